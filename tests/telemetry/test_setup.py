"""Tracing is off unless configured, then every span goes to the collector over OTLP/HTTP; the
standard variables turn it on, name the service and are refused when the hub cannot honour
them."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from opentelemetry import trace

from config import telemetry as setup
from config.env import otlp_traces_endpoint
from sessions import telemetry
from tests.processes import ROOT
from tests.tracing import OtlpReceiver, _install

OTEL = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SERVICE_NAME",
)


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in OTEL:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def fresh_process() -> Iterator[None]:
    """As in a process that has not set tracing up yet; taken down again afterwards."""
    _install(None)
    setup._installed = None
    yield
    if setup._installed is not None:
        setup._installed.shutdown()
    setup._installed = None
    _install(None)


def test_no_endpoint_no_tracing(environment: pytest.MonkeyPatch) -> None:
    assert otlp_traces_endpoint() == ""
    environment.setenv("OTEL_SERVICE_NAME", "hub-eu")  # a name alone turns nothing on
    assert otlp_traces_endpoint() == ""


def test_the_standard_variables_name_the_endpoint(environment: pytest.MonkeyPatch) -> None:
    environment.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    assert otlp_traces_endpoint() == "http://collector:4318/v1/traces"
    # The traces' own endpoint is taken as given, and wins.
    environment.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://otel.example.com/in/traces")
    assert otlp_traces_endpoint() == "https://otel.example.com/in/traces"
    environment.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    assert otlp_traces_endpoint() == "https://otel.example.com/in/traces"
    for off in (("OTEL_SDK_DISABLED", "true"), ("OTEL_TRACES_EXPORTER", "none")):
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(*off)
            assert otlp_traces_endpoint() == ""


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318", "OTEL_EXPORTER_OTLP_ENDPOINT="),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "not gRPC"),
        ("OTEL_TRACES_EXPORTER", "zipkin", "over OTLP only"),
        ("OTEL_SDK_DISABLED", "perhaps", "not a boolean"),
    ],
)
def test_what_the_hub_cannot_honour_stops_start_up_naming_it(
    environment: pytest.MonkeyPatch, name: str, value: str, says: str
) -> None:
    environment.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    environment.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match=says) as refused:
        otlp_traces_endpoint()
    assert name in str(refused.value)


def test_unconfigured_nothing_is_installed_and_spans_record_nothing(
    fresh_process: None, settings: Any, alice: Any
) -> None:
    settings.CTXHUB_TRACES_ENDPOINT = ""
    assert setup.setup_tracing("web") is None
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert not telemetry.tracing()
    assert telemetry.agent_instrumentation() is None
    with telemetry.tracer().start_as_current_span("anything") as span:
        assert not span.is_recording()


def _process_env(tmp_path: Any, **more: str) -> dict[str, str]:
    """A process of its own on the embedded defaults, with no OTEL variable but ``more``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    for name in ("DATABASE_URL", "REDIS_URL"):
        env.pop(name, None)
    return {**env, "CTXHUB_DATA_DIR": str(tmp_path), **more}


def test_processes_trace_only_when_configured(tmp_path: Any) -> None:
    """The web server's start without tracing loads neither the SDK's tracing nor an exporter,
    and starts no thread; a ``manage.py`` command with it sends its spans before it exits
    (the batch's delay is 5 s: they go at exit). Both at once, in processes of their own."""
    web = (
        "import sys, threading, config.asgi\n"
        "from opentelemetry import trace\n"
        "print([m for m in sys.modules if m.startswith(('opentelemetry.sdk.trace',"
        " 'opentelemetry.exporter'))], type(trace.get_tracer_provider()).__name__,"
        " [t.name for t in threading.enumerate() if t.name.startswith('Otel')])"
    )
    command = (
        "from sessions import telemetry\n"
        "with telemetry.tracer().start_as_current_span('in a command'): pass\n"
    )
    with OtlpReceiver() as collector:
        untraced = subprocess.Popen(
            [sys.executable, "-c", web],
            cwd=ROOT,
            env=_process_env(tmp_path / "web"),
            stdout=subprocess.PIPE,
            text=True,
        )
        traced = subprocess.Popen(
            [sys.executable, "manage.py", "shell", "-c", command],
            cwd=ROOT,
            env=_process_env(tmp_path / "command", OTEL_EXPORTER_OTLP_ENDPOINT=collector.url),
        )
        out, _ = untraced.communicate(timeout=60)
        assert traced.wait(timeout=60) == 0
        received = list(collector.spans)
    assert untraced.returncode == 0
    assert out.splitlines()[-1] == "[] ProxyTracerProvider []"
    assert [span.name for span in received] == ["in a command"]
    assert received[0].resource["service.name"] == "ctxhub"
    assert received[0].resource["ctxhub.process"] == "manage.py shell"


@pytest.mark.django_db
def test_configured_spans_go_to_the_collector_over_otlp_http(
    fresh_process: None, settings: Any
) -> None:
    with OtlpReceiver() as collector:
        settings.CTXHUB_TRACES_ENDPOINT = f"{collector.url}/v1/traces"
        settings.CTXHUB_SERVICE_NAME = "ctxhub-test"
        provider = setup.setup_tracing("web")
        assert provider is not None
        assert setup.setup_tracing("web") is provider  # once per process
        assert telemetry.tracing()
        assert telemetry.agent_instrumentation() is not None
        with telemetry.tracer().start_as_current_span("a span") as span:
            span.set_attribute("ctxhub.tokens.after", 1234)
        setup.flush_tracing()

        (received,) = collector.wait_for(lambda spans: len(spans) == 1)
    assert received.name == "a span"
    assert received.attributes == {"ctxhub.tokens.after": 1234}
    assert received.resource["service.name"] == "ctxhub-test"
    assert received.resource["ctxhub.process"] == "web"
    assert received.trace_id == f"{span.get_span_context().trace_id:032x}"


def test_a_provider_installed_before_is_left_in_place(fresh_process: None, settings: Any) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    theirs = TracerProvider()
    _install(theirs)
    settings.CTXHUB_TRACES_ENDPOINT = "http://127.0.0.1:9/v1/traces"
    assert setup.setup_tracing("worker") is None
    assert trace.get_tracer_provider() is theirs
    assert telemetry.tracing()  # the hub's spans go to theirs
