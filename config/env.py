"""Strict parsing of environment variables: a bad value stops start-up naming the variable."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured
from psycopg_pool import ConnectionPool

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip()


def env_choice(name: str, default: str, choices: set[str]) -> str:
    value = env_str(name, default).upper()
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} is not one of {', '.join(sorted(choices))}")
    return value


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use true/false, 1/0, yes/no)")


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name}={raw!r} must be at least {minimum}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def _sqlite(path: Path) -> dict[str, Any]:
    """SQLite set up for a server where requests, sockets and chat turns write at once: WAL
    (readers do not block the writer), transactions that take the write lock when they begin
    (no deadlock upgrading it) and a wait for it rather than an error. Tests use a file too,
    so they meet the same locking as the server."""
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": path,
        "OPTIONS": {
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
        "TEST": {"NAME": path.with_name(f"test-{path.name}")},
    }


@dataclass(frozen=True, slots=True)
class Pool:
    """A process's PostgreSQL connection pool: at most ``size`` connections; a request that finds
    them all busy waits ``timeout`` seconds for one, then gives up (the hub answers 503)."""

    size: int
    timeout: float


def database_from_url(name: str, url: str, *, sqlite_default: Path, pool: Pool) -> dict[str, Any]:
    """A DATABASES entry from ``postgres://user:pass@host:port/db`` or ``sqlite:///path``."""
    if not url:
        return _sqlite(sqlite_default)
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        # sqlite:///relative/path, sqlite:////absolute/path (the usual convention)
        path = unquote(parts.path)[1:]
        if not path:
            raise ImproperlyConfigured(
                f"{name}={url!r}: sqlite needs a file, e.g. sqlite:///db.sqlite3"
            )
        return _sqlite(Path(path))
    if parts.scheme not in {"postgres", "postgresql"}:
        raise ImproperlyConfigured(
            f"{name}={url!r}: unsupported scheme {parts.scheme!r} (use postgres:// or sqlite:///)"
        )
    database = unquote(parts.path.lstrip("/"))
    if not database:
        raise ImproperlyConfigured(f"{name}={url!r} names no database")
    try:
        port = parts.port
    except ValueError:
        raise ImproperlyConfigured(f"{name}={url!r} has an invalid port") from None
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": database,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": unquote(parts.hostname or ""),
        "PORT": str(port or ""),
        # https://docs.djangoproject.com/en/6.1/ref/databases/#postgresql-pool
        # Persistent connections are not reused across requests under ASGI (each request may
        # run in a new thread) and pile up until PostgreSQL refuses clients: the pool bounds
        # what one process holds, and every request hands its connection back when it ends.
        "CONN_MAX_AGE": 0,
        "OPTIONS": {
            "pool": {
                "min_size": min(2, pool.size),
                "max_size": pool.size,
                "timeout": pool.timeout,
                # A connection is checked as it is handed out (one round trip): those held idle
                # die with the server when PostgreSQL restarts, and would fail their requests.
                "check": ConnectionPool.check_connection,
            }
        },
    }


def redis_url(name: str, url: str) -> str:
    if url and urlsplit(url).scheme not in {"redis", "rediss", "unix"}:
        raise ImproperlyConfigured(f"{name}={url!r}: use redis://host:port/db")
    return url


_OTLP_HTTP = "http/protobuf"


def otlp_traces_endpoint() -> str:
    """Where the hub sends its traces, over OTLP/HTTP: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
    as given, else ``OTEL_EXPORTER_OTLP_ENDPOINT`` with ``/v1/traces`` appended (the
    OpenTelemetry conventions); "" when neither is set, or ``OTEL_SDK_DISABLED`` or
    ``OTEL_TRACES_EXPORTER=none`` turns tracing off."""
    if env_bool("OTEL_SDK_DISABLED"):
        return ""
    exporter = env_str("OTEL_TRACES_EXPORTER", "otlp").lower()
    if exporter == "none":
        return ""
    if exporter != "otlp":
        raise ImproperlyConfigured(
            f"OTEL_TRACES_EXPORTER={exporter!r}: the hub exports traces over OTLP only (otlp, "
            "or none for no traces)"
        )
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = env_str(name)
        if protocol and protocol != _OTLP_HTTP:
            raise ImproperlyConfigured(
                f"{name}={protocol!r}: the hub sends OTLP over HTTP ({_OTLP_HTTP}, a "
                "collector's port 4318), not gRPC"
            )
    for name, path in (
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ""),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "/v1/traces"),
    ):
        url = env_str(name)
        if not url:
            continue
        parts = urlsplit(url)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise ImproperlyConfigured(
                f"{name}={url!r}: use the collector's OTLP/HTTP address, e.g. http://127.0.0.1:4318"
            )
        return url.rstrip("/") + path if path else url
    return ""
