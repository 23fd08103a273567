"""Real server processes for tests: an ASGI server and a Celery worker on the test database."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
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


def service_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": shared_database_url(),
        "PYTHONUNBUFFERED": "1",
        **(extra or {}),
    }


@contextmanager
def running(
    args: list[str],
    log: Path,
    ready: Callable[[], bool],
    timeout: float = 30,
    env: dict[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start a process, wait until ``ready()``, stop it afterwards; its output goes to ``log``
    (appended, so a process started again keeps its predecessor's lines)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        # Its own process group, so stopping it stops its children too (a worker's beat).
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env=service_env(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
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
            stop_group(proc)


def stop_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    """Stop a process started by ``running`` and everything it started."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    # Children outlive a leader killed on its own; they go with the group.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def port_open(port: int) -> Callable[[], bool]:
    def check() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    return check


def healthy(url: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    return check


@contextmanager
def asgi_server(
    log: Path,
    port: int | None = None,
    *,
    env: dict[str, str] | None = None,
    workers: int = 1,
) -> Iterator[str]:
    """The production web server (gunicorn with uvicorn workers, scripts/web.sh) serving
    pages, static files and sockets; yields its base URL."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    args = ["bash", str(ROOT / "scripts" / "web.sh"), f"127.0.0.1:{port}"]
    extra = {"WEB_CONCURRENCY": str(workers), **(env or {})}
    # Ready when a worker answers, not when gunicorn listens (its workers boot after).
    with running(args, log, healthy(url), env=extra):
        yield url


@contextmanager
def celery_worker(
    log: Path,
    *,
    env: dict[str, str] | None = None,
    beat: bool = False,
    hostname: str | None = None,
    wait: bool = True,
) -> Iterator[subprocess.Popen[bytes]]:
    """A Celery worker process consuming from the broker at REDIS_URL (``env`` overrides);
    with ``beat``, it also runs the periodic tasks (the job sweeper). ``wait=False`` yields
    as soon as it started (for a worker that may die before it could answer a ping)."""
    from config.celery import app

    hostname = hostname or f"test-{os.getpid()}-{time.monotonic_ns()}@localhost"

    def ready() -> bool:
        return not wait or bool(app.control.ping(destination=[hostname], timeout=0.5))

    args = [
        str(BIN / "celery"),
        "-A",
        "config.celery",
        "worker",
        "--pool=solo",
        "--loglevel=INFO",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        f"--hostname={hostname}",
    ]
    if beat:
        args += ["--beat", f"--schedule={log.with_suffix('.beat')}"]
    with running(args, log, ready, timeout=60, env=env) as proc:
        yield proc


class OwnRedis:
    """A Redis server of a test's own, so stopping it disturbs no other test; ``options`` are
    redis-server's (e.g. ``["--maxmemory-policy", "allkeys-lru"]``)."""

    def __init__(self, directory: Path, options: list[str] | None = None) -> None:
        self.dir = directory
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.options = options or []

    def start(self) -> None:
        subprocess.run(
            [
                "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--daemonize", "yes", "--save", "", "--appendonly", "no",
                "--dir", str(self.dir), "--pidfile", str(self.dir / "redis.pid"),
                "--logfile", str(self.dir / "redis.log"), *self.options,
            ],
            check=True,
        )  # fmt: skip
        self._until(self.up, "redis to start")

    def up(self) -> bool:
        import redis

        try:
            return bool(redis.Redis.from_url(self.url).ping())
        except redis.ConnectionError:
            return False

    def stop(self) -> None:
        pid = int((self.dir / "redis.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        self._until(lambda: not self.up(), "redis to stop")

    @staticmethod
    def _until(condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 10
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited 10 s for {what}")
            time.sleep(0.05)


class OwnPostgres:
    """A PostgreSQL cluster of a test's own, with an empty ``ctxhub`` database, so restarting it
    disturbs no other test. (As root, the cluster belongs to the postgres user: initdb refuses
    root, as in scripts/lib.sh.)"""

    def __init__(self) -> None:
        # Not under pytest's tmp_path: the postgres user must reach it, and that is root's.
        self.dir = Path(tempfile.mkdtemp(prefix="ctxhub-pg-"))
        self.dir.chmod(0o755)
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/ctxhub"
        self.as_owner: list[str] = []
        if os.getuid() == 0:
            self.as_owner = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.dir, "postgres")

    def _bin(self, name: str) -> str:
        found = shutil.which(name) or next(
            (str(path) for path in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))),
            None,
        )
        if found is None:
            raise RuntimeError(f"no {name}: PostgreSQL's server is not installed")
        return found

    def _pg_ctl(self, *args: str) -> None:
        subprocess.run(
            [*self.as_owner, self._bin("pg_ctl"), "-D", str(self.dir / "data"), *args],
            check=True,
            stdout=subprocess.DEVNULL,
        )

    def start(self) -> None:
        subprocess.run(
            [*self.as_owner, self._bin("initdb"), "-D", str(self.dir / "data"), "-A", "trust",
             "-U", "postgres", "--no-sync"],
            check=True,
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._pg_ctl("-l", str(self.dir / "log"), "-w", "-o", options, "start")
        subprocess.run(
            [*self.as_owner, self._bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port),
             "-U", "postgres", "ctxhub"],
            check=True,
        )  # fmt: skip

    def restart(self) -> None:
        """Stop (ending every connection, as a crash or an upgrade does) and start again."""
        self._pg_ctl("-m", "fast", "-w", "restart")

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._pg_ctl("-m", "immediate", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)
