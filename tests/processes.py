"""Real server processes for tests: an ASGI server and a Celery worker on the test database."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def shared_database_url() -> str:
    """The URL of the database pytest-django created, so other processes share its data."""
    db = settings.DATABASES["default"]
    if not db["ENGINE"].endswith("postgresql"):
        raise RuntimeError("real-process tests need PostgreSQL (DATABASE_URL)")
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def service_env() -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": shared_database_url(), "PYTHONUNBUFFERED": "1"}


@contextmanager
def running(
    args: list[str], log: Path, ready: Callable[[], bool], timeout: float = 30
) -> Iterator[subprocess.Popen[bytes]]:
    """Start a process, wait until ``ready()``, stop it afterwards; its output goes to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            args, cwd=ROOT, env=service_env(), stdout=out, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.monotonic() + timeout
            while not ready():
                if proc.poll() is not None:
                    raise RuntimeError(f"{args[0]} exited early:\n{log.read_text()[-3000:]}")
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{args[0]} not ready after {timeout}s:\n{log.read_text()[-3000:]}"
                    )
                time.sleep(0.1)
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def port_open(port: int) -> Callable[[], bool]:
    def check() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    return check


@contextmanager
def asgi_server(log: Path, port: int | None = None) -> Iterator[str]:
    """daphne serving ctxhub.asgi (pages, static files, sockets); yields its base URL."""
    port = port or free_port()
    args = [str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), "ctxhub.asgi:application"]
    with running(args, log, port_open(port)):
        yield f"http://127.0.0.1:{port}"


@contextmanager
def celery_worker(log: Path) -> Iterator[None]:
    """A Celery worker process consuming from the broker at REDIS_URL."""
    from ctxhub.celery import app

    def ready() -> bool:
        return bool(app.control.ping(timeout=0.5))

    args = [
        str(BIN / "celery"),
        "-A",
        "ctxhub.celery",
        "worker",
        "--pool=solo",
        "--loglevel=INFO",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]
    with running(args, log, ready, timeout=60):
        yield
