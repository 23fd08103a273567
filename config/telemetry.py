"""Tracing set up for a process: the OpenTelemetry SDK exporting over OTLP/HTTP, or nothing.

With an endpoint configured (``settings.CTXHUB_TRACES_ENDPOINT``, from the standard
``OTEL_EXPORTER_OTLP_*`` variables), ``setup_tracing`` installs one tracer provider for the
process: spans are batched by a ``BatchSpanProcessor`` and sent from its thread, never from the
request that made them. The web server (``config.asgi``), the Celery worker (``config.celery``)
and ``manage.py`` call it as they start. Without an endpoint nothing is imported or installed:
every span the hub starts (``sessions.telemetry``) comes from the OpenTelemetry API's no-op
tracer, which records nothing.

A provider installed before (``opentelemetry-instrument``, Logfire) is left in place and used.
Forked processes (gunicorn ``--preload``, Celery's prefork pool) restart the batch thread after
the fork (the SDK does it); a pool process that ends without running ``atexit`` hands its last
spans over in ``flush_tracing``.
"""

from __future__ import annotations

import logging
import threading
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from django.conf import settings
from opentelemetry import trace

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

log = logging.getLogger(__name__)

_installed: TracerProvider | None = None
_lock = threading.Lock()

FLUSH_MILLISECONDS = 5_000
"""How long a process that ends waits for its last spans to be sent."""


def setup_tracing(process: str) -> TracerProvider | None:
    """Install the process's tracer provider when tracing is configured (once; later calls
    return it), naming the process in the ``ctxhub.process`` resource attribute ("web",
    "worker", "manage.py migrate"). None when tracing is off, or when another provider was
    installed first (its spans then carry the hub's too)."""
    global _installed
    endpoint = settings.CTXHUB_TRACES_ENDPOINT
    if not endpoint:
        return None
    with _lock:
        if _installed is not None:
            return _installed
        if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            log.info("tracing: a tracer provider is already installed; the hub's spans go to it")
            return None
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create(
            {
                "service.name": settings.CTXHUB_SERVICE_NAME,
                "service.version": _version(),
                "ctxhub.process": process,
            }
        )
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
        trace.set_tracer_provider(provider)
        _installed = provider
    log.info("tracing: %s sends spans to %s", process, endpoint)
    return provider


def flush_tracing() -> None:
    """Send the spans still waiting in the batch (a process about to end without ``atexit``,
    as a pool process of the Celery worker does)."""
    if _installed is not None:
        _installed.force_flush(FLUSH_MILLISECONDS)


def _version() -> str:
    try:
        return version("ctxhub")
    except PackageNotFoundError:  # a checkout run without installing it
        return "unknown"
