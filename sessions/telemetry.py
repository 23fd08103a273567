"""The hub's traces: a span for every HTTP request, governed request, compaction job and chat
turn, with the OpenTelemetry GenAI conventions' attributes where they exist and ``ctxhub.*``
ones for the rest (docs/telemetry.md lists them all).

Spans come from the OpenTelemetry API's global tracer provider, as it is when each starts: the
SDK's one that ``config.telemetry.setup_tracing`` installs when tracing is configured, else the
API's no-op one, whose spans record nothing. Attributes are worked out only for a span that
records, so a hub without tracing pays for a no-op context switch per span and nothing else.

The chat agent's and the summariser's own spans (pydantic-ai's instrumentation: the agent run,
each model call, each tool) are turned on with ``agent_instrumentation`` only while tracing is
on, and nest under the hub's span of the turn or of the job.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from pydantic_ai.models.instrumented import InstrumentationSettings, InstrumentedModel

from ctxhub.pricing import cache_weighting, model_ref
from sessions.models import AgentSession, ApiKey, ChatTurn, CompactionJob, JobStatus, TurnStatus

if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from ctxhub.governance import CompactionReport
    from sessions.services.governed import GovernedContext

SCOPE = "ctxhub"
"""The instrumentation scope of the hub's spans."""

# Span names: few and fixed (what varies is in the attributes).
CONTEXT_SENT = "ctxhub.context.send"
CONTEXT_READ = "ctxhub.context.read"
COMPACTION = "ctxhub.compaction"
COMPACTION_PLAN = "ctxhub.compaction.plan"
COMPACTION_SUMMARISE = "ctxhub.compaction.summarise"
COMPACTION_WRITE = "ctxhub.compaction.write"
CHAT_TURN = "ctxhub.chat.turn"


def tracer() -> trace.Tracer:
    """The hub's tracer, from the provider installed now (the no-op one when none is)."""
    return trace.get_tracer(SCOPE)


def tracing() -> bool:
    """Whether spans go anywhere: a tracer provider is installed (ours, or the one the process
    was started with)."""
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def agent_instrumentation() -> InstrumentationSettings | None:
    """pydantic-ai's instrumentation, for an agent's or a model's own spans under the hub's;
    None while tracing is off. Prompts, answers and tool arguments are left out unless
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` asks for them."""
    if not tracing():
        return None
    content = settings.CTXHUB_TRACE_CONTENT
    return InstrumentationSettings(include_content=content, include_binary_content=content)


def instrumented(model: Model) -> Model:
    """``model`` making a span per call while tracing is on (itself otherwise)."""
    instrumentation = agent_instrumentation()
    return model if instrumentation is None else InstrumentedModel(model, instrumentation)


def carrier() -> dict[str, str]:
    """The current trace context as headers (``traceparent``), to hand to work done later."""
    headers: dict[str, str] = {}
    propagate.inject(headers)
    return headers


def _session(session: AgentSession, model: str | None = None) -> dict[str, Any]:
    """A session's attributes: its id as the GenAI conversation, the model it is governed for
    (the request's model and provider in the GenAI conventions' terms)."""
    model = model or session.model
    provider, name = model_ref(model)
    attributes: dict[str, Any] = {
        "ctxhub.session.id": str(session.pk),
        "gen_ai.conversation.id": str(session.pk),
        "ctxhub.model": model,
        "gen_ai.request.model": name,
    }
    if provider:
        attributes["gen_ai.provider.name"] = provider
    return attributes


# --- governed requests ----------------------------------------------------------------------


@contextmanager
def governing(session: AgentSession, *, sent: bool, model: str | None = None) -> Iterator[Span]:
    """The span of one governance of a session: a request being sent (``sent``), or the
    governed context read (a page, a preview; ``model`` another model's view)."""
    name = CONTEXT_SENT if sent else CONTEXT_READ
    with tracer().start_as_current_span(name, attributes=_session(session, model)) as span:
        yield span


def governed(
    span: Span,
    context: GovernedContext,
    *,
    model: str,
    sent: bool = False,
    number: int | None = None,
    preview: bool = False,
) -> None:
    """What a governance decided, on its span: the window and budget, the tokens before and
    after, the steps that changed the request, the prefix the previous request's cache still
    serves and what the request's input costs; for a request ``sent``, its tokens as the
    GenAI usage and its ``number`` (as the session's trajectory counts them; None when it
    could not be recorded). A context read back from a snapshot keeps neither what acted nor
    the prefix."""
    if not span.is_recording():
        return
    report = context.figures
    tokens = context.tokens
    attributes: dict[str, Any] = {
        "ctxhub.window.tokens": report.window_tokens,
        "ctxhub.budget.tokens": report.budget_tokens,
        "ctxhub.tokens.before": report.tokens_before,
        "ctxhub.tokens.after": report.tokens_after,
        "ctxhub.tokens.tools": report.tool_definition_tokens,
        "ctxhub.tokens.sent": tokens,
        "ctxhub.tokens.exact": report.exact,
        "ctxhub.encoding": report.encoding,
        "ctxhub.messages.before": report.messages_before,
        "ctxhub.messages.after": report.messages_after,
        "ctxhub.fits": report.fits,
        "ctxhub.steps": [s.step for s in report.steps if s.parts or s.tokens_removed],
        "ctxhub.snapshot": context.source == "snapshot",
    }
    if preview:
        attributes["ctxhub.preview"] = True
    if sent:
        attributes["gen_ai.usage.input_tokens"] = tokens
    if number is not None:
        attributes["ctxhub.request.number"] = number
    prefix = 0
    if context.acted is not None:
        attributes["ctxhub.acted"] = context.acted
    if context.prefix_tokens is not None:
        prefix = min(context.prefix_tokens, tokens)
        attributes["ctxhub.prefix.tokens"] = prefix
    weighting = cache_weighting(model, [(tokens, prefix)])
    if weighting is not None:
        attributes["ctxhub.cost.input"] = _money(weighting.cached.total)
        attributes["ctxhub.cost.input_uncached"] = _money(weighting.uncached.total)
        attributes["ctxhub.cost.currency"] = weighting.cached.currency
    span.set_attributes(attributes)
    for step in report.steps:
        span.add_event(
            "ctxhub.step",
            {
                "ctxhub.step": step.step,
                "ctxhub.step.parts": step.parts,
                "ctxhub.step.tokens_removed": step.tokens_removed,
                "ctxhub.step.detail": step.detail,
            },
        )
    if not report.fits:
        span.set_status(Status(StatusCode.ERROR, report.reason or "over the budget"))


def _money(amount: Decimal) -> float:
    return float(amount)


# --- compaction jobs ------------------------------------------------------------------------


@contextmanager
def compaction_job(job_id: str, headers: Mapping[str, Any] | None = None) -> Iterator[Span]:
    """The span of one delivery of a compaction job, continuing the trace that queued it when
    its message carries one (``headers``, see ``carrier``)."""
    parent = propagate.extract(dict(headers)) if headers else None
    with tracer().start_as_current_span(
        COMPACTION, context=parent, kind=SpanKind.CONSUMER, attributes={"ctxhub.job.id": job_id}
    ) as span:
        yield span


def job_claimed(job: CompactionJob, session: AgentSession) -> None:
    """The job a delivery took, on the job's span."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    span.set_attributes(
        {
            **_session(session),
            "ctxhub.job.trigger": str(job.trigger),
            "ctxhub.job.delivery": job.deliveries,
            "ctxhub.job.retries": job.retries,
            "ctxhub.summarizer": job.summarizer,
        }
    )


def job_finished(span: Span, outcome: str, job: CompactionJob | None) -> None:
    """What became of a delivery (``sessions.jobs.compaction.run_job``'s answer) and, for a
    job that wrote its compaction, what it changed and cost."""
    if not span.is_recording():
        return
    span.set_attribute("ctxhub.job.outcome", outcome)
    if job is None:
        return
    span.set_attribute("ctxhub.job.status", str(job.status))
    result = job.result or {}
    figures = {
        "ctxhub.compaction.id": result.get("compaction"),
        "ctxhub.tokens.before": result.get("tokens_before"),
        "ctxhub.tokens.after": result.get("tokens_after"),
        "ctxhub.tokens.sent_before": result.get("sent_before"),
        "ctxhub.tokens.sent_after": result.get("sent_after"),
        "ctxhub.window.tokens": result.get("window"),
        "ctxhub.compaction.facts": result.get("facts"),
        "ctxhub.compaction.fact_score": result.get("fact_score"),
    }
    span.set_attributes({key: value for key, value in figures.items() if value is not None})
    for key, name in (("summarizer_cost", "summarizer"), ("saved_per_request", "saved")):
        if result.get(key) is not None:
            span.set_attribute(f"ctxhub.cost.{name}", _money(Decimal(result[key])))
    if job.status == JobStatus.FAILED:
        span.set_status(Status(StatusCode.ERROR, job.error or outcome))


@contextmanager
def compaction_step(name: str) -> Iterator[Span]:
    """A child span of a job's: ``COMPACTION_PLAN``, ``COMPACTION_SUMMARISE`` or
    ``COMPACTION_WRITE``."""
    with tracer().start_as_current_span(name) as span:
        yield span


def summarised(span: Span, summarizer: str, report: CompactionReport) -> None:
    """What the summariser made of the history, on the summarise span: the tokens before and
    after, what it summarised, its calls' usage (their own spans, pydantic-ai's, are below)."""
    if not span.is_recording():
        return
    provider, name = model_ref(summarizer)
    attributes: dict[str, Any] = {
        "ctxhub.summarizer": summarizer,
        "gen_ai.request.model": name,
        "ctxhub.compaction.outcome": report.outcome,
        "ctxhub.tokens.before": report.tokens_before,
        "ctxhub.tokens.after": report.tokens_after,
        "ctxhub.messages.before": report.messages_before,
        "ctxhub.messages.after": report.messages_after,
        "ctxhub.compaction.summarized_messages": report.summarized_messages,
        "ctxhub.compaction.summary_tokens": report.summary_tokens,
        "ctxhub.compaction.chunks": report.chunks,
        "ctxhub.compaction.rounds": report.rounds,
        "ctxhub.summarizer.input_tokens": report.summarizer_input_tokens,
        "ctxhub.summarizer.output_tokens": report.summarizer_output_tokens,
    }
    if provider:
        attributes["gen_ai.provider.name"] = provider
    span.set_attributes(attributes)
    if report.outcome == "fallback":  # the summariser failed: its marker stands in
        span.set_status(Status(StatusCode.ERROR, report.error or report.outcome))


# --- chat turns -----------------------------------------------------------------------------


@contextmanager
def chat_turn(session: AgentSession, turn: ChatTurn) -> Iterator[Span]:
    """The span of a chat turn; the agent's run (and each model request it governs) nests in
    it."""
    attributes = {**_session(session, turn.model), "ctxhub.turn.id": str(turn.pk)}
    with tracer().start_as_current_span(CHAT_TURN, attributes=attributes) as span:
        yield span


def turn_finished(span: Span, turn: ChatTurn) -> None:
    """How a turn ended, on its span."""
    if not span.is_recording():
        return
    span.set_attributes(
        {"ctxhub.turn.status": str(turn.status), "ctxhub.turn.requests": turn.requests}
    )
    if turn.status == TurnStatus.FAILED:
        span.set_status(Status(StatusCode.ERROR, turn.error))


# --- HTTP requests --------------------------------------------------------------------------

_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}
_CONVERTER = re.compile(r"<(?:\w+:)?(\w+)>")


class TracedRequests:
    """A server span for every request Django serves (pages, fragments, the API), named by its
    route template (``GET /api/v1/sessions/{session_id}/context``) with the HTTP conventions'
    attributes, continuing the trace of a caller that sent a W3C ``traceparent`` header: an
    agent's trace goes on into the hub. Outermost, so the status is the one the client gets."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponse | Awaitable[HttpResponse]:
        if self.is_async:
            return self._acall(request)
        if not tracing():
            response: HttpResponse = self.get_response(request)
            return response
        with _server_span(request) as (span, method):
            response = self.get_response(request)
            _answered(span, method, request, response)
            return response

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        if not tracing():
            response: HttpResponse = await self.get_response(request)
            return response
        with _server_span(request) as (span, method):
            response = await self.get_response(request)
            _answered(span, method, request, response)
            return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> None:
        """A view's exception (Django answers 500 for it) goes on the request's span."""
        trace.get_current_span().record_exception(exception)


@contextmanager
def served(request: HttpRequest) -> Iterator[Callable[[HttpResponseBase], None]]:
    """The span ``TracedRequests`` gives a request, for one served without Django's middleware
    (the gateway's handler): what it yields takes the response once there is one."""
    if not tracing():
        yield lambda response: None
        return
    with _server_span(request) as (span, method):
        yield lambda response: _answered(span, method, request, response)


@contextmanager
def _server_span(request: HttpRequest) -> Iterator[tuple[Span, str]]:
    method = request.method if request.method in _METHODS else "_OTHER"
    meta = request.META
    host, _, port = str(meta.get("HTTP_HOST") or meta.get("SERVER_NAME", "")).rpartition(":")
    if not host or not port.isdigit():  # no port in the header: the whole of it is the host
        host, port = str(meta.get("HTTP_HOST") or meta.get("SERVER_NAME", "")), ""
    attributes: dict[str, Any] = {
        "http.request.method": method,
        "url.path": request.path,
        "url.scheme": request.scheme or "http",
        "server.address": host,
        "network.protocol.version": str(meta.get("SERVER_PROTOCOL", "")).removeprefix("HTTP/"),
    }
    if port:
        attributes["server.port"] = int(port)
    if meta.get("REMOTE_ADDR"):
        attributes["client.address"] = meta["REMOTE_ADDR"]
    if meta.get("HTTP_USER_AGENT"):
        attributes["user_agent.original"] = meta["HTTP_USER_AGENT"]
    with tracer().start_as_current_span(
        method,
        context=propagate.extract(request.headers),
        kind=SpanKind.SERVER,
        attributes=attributes,
        record_exception=False,  # a view's is recorded by process_exception
    ) as span:
        yield span, method


def _answered(span: Span, method: str, request: HttpRequest, response: HttpResponseBase) -> None:
    if not span.is_recording():
        return
    status = response.status_code
    span.set_attribute("http.response.status_code", status)
    match = request.resolver_match
    if match is not None and match.route:
        route = "/" + _CONVERTER.sub(r"{\1}", match.route).lstrip("^").rstrip("$")
        span.set_attribute("http.route", route)
        span.update_name(f"{method} {route}")
        session_id = match.kwargs.get("session_id")
        if session_id is not None:
            span.set_attribute("ctxhub.session.id", str(session_id))
    key = getattr(request, "auth", None)
    if isinstance(key, ApiKey):
        span.set_attribute("ctxhub.api_key.id", key.pk)
    if status >= 500:
        span.set_attribute("error.type", str(status))
        span.set_status(Status(StatusCode.ERROR))
