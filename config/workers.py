"""The gunicorn worker class of the production web server (scripts/web.sh)."""

from __future__ import annotations

from typing import Any

from uvicorn_worker import UvicornWorker as _UvicornWorker


class UvicornWorker(_UvicornWorker):  # type: ignore[misc]  # uvicorn-worker ships no types
    """uvicorn in a gunicorn process. Django has no lifespan protocol to run; each request is
    not logged twice (gunicorn's ``--access-logfile`` logs them when asked); a socket whose
    peer vanished without closing is found by a ping within 20 s and its group left."""

    CONFIG_KWARGS: dict[str, Any] = {
        **_UvicornWorker.CONFIG_KWARGS,
        "lifespan": "off",
        "access_log": False,
        "ws_ping_interval": 20.0,
        "ws_ping_timeout": 20.0,
        # Longer than a proxy's idle keep-alive to it, so the proxy closes first: a connection
        # closed here as a request is sent on it fails that request.
        "timeout_keep_alive": 75,
    }
