"""Spans for the tests: an in-memory tracer provider installed for one test, and a local OTLP/HTTP
receiver that decodes what a process exports over the network."""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once


def _install(provider: TracerProvider | None) -> None:
    """Make ``provider`` the global one (None: none, as in a process without tracing). The API
    lets a process install one provider, once: a test takes it back afterwards."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    if provider is not None:
        trace.set_tracer_provider(provider)


@contextmanager
def recorded_spans() -> Iterator[InMemorySpanExporter]:
    """Every span finished while it is open, kept in memory (tracing on, no network)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _install(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        _install(None)


def named(spans: Any, name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def one(spans: Any, name: str) -> ReadableSpan:
    found = named(spans, name)
    assert len(found) == 1, f"{len(found)} spans named {name!r} in {[s.name for s in spans]}"
    return found[0]


def parent_of(span: ReadableSpan, spans: Any) -> ReadableSpan | None:
    """The span's parent among ``spans`` (None: a root, or a remote parent)."""
    if span.parent is None:
        return None
    return next((s for s in spans if s.context.span_id == span.parent.span_id), None)


def ancestors(span: ReadableSpan, spans: Any) -> list[str]:
    """The names of the span's ancestors, nearest first."""
    names = []
    parent = parent_of(span, spans)
    while parent is not None:
        names.append(parent.name)
        parent = parent_of(parent, spans)
    return names


# --- over the network -------------------------------------------------------------------------


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    resource: dict[str, Any]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    return getattr(value, kind) if kind else None


class OtlpReceiver:
    """A collector's OTLP/HTTP traces endpoint on 127.0.0.1: ``POST /v1/traces`` bodies are
    decoded into ``spans`` (protobuf, plain or compressed), answered 200."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.posts = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                encoding = self.headers.get("Content-Encoding", "")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver._received(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The collector's base URL, as ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes it."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _received(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            resource=resource,
                        )
                    )
        with self._lock:
            self.posts += 1
            self.spans.extend(found)

    def wait_for(
        self, arrived: Callable[[list[ReceivedSpan]], bool], timeout: float = 20
    ) -> list[ReceivedSpan]:
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                spans = list(self.spans)
            if arrived(spans):
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(f"not there after {timeout} s: {[s.name for s in spans]}")
            time.sleep(0.05)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
