"""Spans of API calls and of the requests they govern, through the Django test client on the
real database: the server span with its route and status, a caller's trace continued, and the
governed request with the figures the API answered."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from opentelemetry.trace import SpanKind, StatusCode

from sessions import services, telemetry
from sessions.api.keys import create_key
from sessions.models import ApiKey, SentRequest
from tests.messages import reply, user
from tests.tracing import named, one, parent_of

pytestmark = pytest.mark.django_db

# gpt-4o's input, per token: $2.50 a million, $1.25 read from the prompt cache (OpenAI bills no
# cache writes: the rest of a request is plain input).
GPT_4O_INPUT = 2.50 / 1_000_000
GPT_4O_CACHED = 1.25 / 1_000_000


class Api:
    def __init__(self, key: str, client: Client | None = None) -> None:
        self.client = client or Client()
        self.key = key

    def get(self, path: str, **headers: str) -> Any:
        return self.client.get(
            f"/api/v1{path}", headers={"Authorization": f"Bearer {self.key}", **headers}
        )


@pytest.fixture
def api(alice: Any) -> Api:
    return Api(create_key(alice, name="agent", scopes=["read", "write", "govern"])[1])


def test_a_governed_request_through_the_api_is_a_span_under_the_calls(
    spans: Any, api: Api, session: Any
) -> None:
    path = f"/sessions/{session.pk}/context"
    first = api.get(path)
    assert first.status_code == 200
    services.append_messages(session, [user("And db-east-1?"), reply("Same fix.")])
    second = api.get(path)
    assert second.status_code == 200

    done = spans.get_finished_spans()
    calls = named(done, "GET /api/v1/sessions/{session_id}/context")
    sends = named(done, telemetry.CONTEXT_SENT)
    assert len(calls) == len(sends) == 2
    rows = list(SentRequest.objects.filter(session=session).order_by("number"))
    key = ApiKey.objects.get()
    for call, send, response, row in zip(calls, sends, (first, second), rows, strict=True):
        assert call.kind == SpanKind.SERVER
        assert parent_of(send, done) is call
        assert call.attributes["http.route"] == "/api/v1/sessions/{session_id}/context"
        assert call.attributes["http.request.method"] == "GET"
        assert call.attributes["http.response.status_code"] == 200
        assert call.attributes["url.path"] == f"/api/v1{path}"
        assert call.attributes["ctxhub.session.id"] == str(session.pk)
        assert call.attributes["ctxhub.api_key.id"] == key.pk

        report = response.json()["report"]
        sent = report["tokens_after"] + report["tool_definition_tokens"]
        attributes = send.attributes
        assert attributes["gen_ai.conversation.id"] == str(session.pk)
        assert attributes["gen_ai.request.model"] == "gpt-4o"
        assert attributes["gen_ai.provider.name"] == "openai"
        assert attributes["ctxhub.model"] == "openai:gpt-4o"
        assert attributes["ctxhub.window.tokens"] == report["window_tokens"] == 20_000
        assert attributes["ctxhub.budget.tokens"] == report["budget_tokens"]
        assert attributes["ctxhub.tokens.before"] == report["tokens_before"]
        assert attributes["ctxhub.tokens.after"] == report["tokens_after"]
        assert attributes["gen_ai.usage.input_tokens"] == sent
        assert attributes["ctxhub.messages.after"] == report["messages_after"]
        # The request recorded as sent is the one on the span.
        assert attributes["ctxhub.request.number"] == row.number
        assert attributes["ctxhub.tokens.after"] == row.tokens
        assert attributes.get("ctxhub.acted", "") == row.acted
        assert attributes["ctxhub.prefix.tokens"] == (row.prefix_tokens or 0)
        # The steps that changed the request, each also an event with what it removed.
        changed = [s["step"] for s in report["steps"] if s["parts"] or s["tokens_removed"]]
        assert list(attributes["ctxhub.steps"]) == changed
        events = {e.attributes["ctxhub.step"]: e.attributes for e in send.events}
        for step in report["steps"]:
            assert events[step["step"]]["ctxhub.step.tokens_removed"] == step["tokens_removed"]

    first_send, second_send = sends
    # The first request governed the session from the start: the window cut the history down,
    # and nothing of it was in a cache yet.
    assert first_send.attributes["ctxhub.acted"] == "start"
    assert "window" in first_send.attributes["ctxhub.steps"]
    assert first_send.attributes["ctxhub.tokens.before"] > 20_000
    assert first_send.attributes["ctxhub.tokens.after"] < 20_000
    assert first_send.attributes["ctxhub.prefix.tokens"] == 0
    sent = first_send.attributes["gen_ai.usage.input_tokens"]
    assert first_send.attributes["ctxhub.cost.input"] == pytest.approx(sent * GPT_4O_INPUT)
    assert first_send.attributes["ctxhub.cost.currency"] == "USD"
    # The second sent the first's messages again with the new ones after: its prefix is
    # served by the cache, at the cached price.
    assert "ctxhub.acted" not in second_send.attributes
    kept = second_send.attributes["ctxhub.prefix.tokens"]
    sent = second_send.attributes["gen_ai.usage.input_tokens"]
    assert kept == rows[1].prefix_tokens
    assert 0 < kept < sent
    assert second_send.attributes["ctxhub.cost.input"] == pytest.approx(
        kept * GPT_4O_CACHED + (sent - kept) * GPT_4O_INPUT
    )
    assert second_send.attributes["ctxhub.cost.input_uncached"] == pytest.approx(
        sent * GPT_4O_INPUT
    )


def test_a_preview_for_another_model_is_a_read_not_a_request_sent(
    spans: Any, api: Api, session: Any
) -> None:
    response = api.get(f"/sessions/{session.pk}/context?model=anthropic:claude-sonnet-4-5")
    assert response.status_code == 200

    read = one(spans.get_finished_spans(), telemetry.CONTEXT_READ)
    assert not named(spans.get_finished_spans(), telemetry.CONTEXT_SENT)
    assert not SentRequest.objects.exists()
    assert read.attributes["ctxhub.preview"] is True
    assert read.attributes["gen_ai.request.model"] == "claude-sonnet-4-5"
    assert read.attributes["gen_ai.provider.name"] == "anthropic"
    assert read.attributes["ctxhub.tokens.after"] == response.json()["report"]["tokens_after"]
    assert "gen_ai.usage.input_tokens" not in read.attributes  # nothing was sent


def test_an_agents_traceparent_is_continued_into_the_hub(
    spans: Any, api: Api, session: Any
) -> None:
    trace_id, caller = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    response = api.get(f"/sessions/{session.pk}/context", traceparent=f"00-{trace_id}-{caller}-01")
    assert response.status_code == 200

    done = spans.get_finished_spans()
    call = one(done, "GET /api/v1/sessions/{session_id}/context")
    assert call.parent is not None
    assert call.parent.is_remote
    assert f"{call.parent.span_id:016x}" == caller
    assert {f"{span.context.trace_id:032x}" for span in done} == {trace_id}


def test_an_unknown_path_and_a_failing_view_have_their_status(
    spans: Any, api: Api, session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert api.get("/no/such/thing").status_code == 404

    def broken(session: Any) -> Any:
        raise RuntimeError("the disk is on fire")

    monkeypatch.setattr(services, "send_context", broken)
    failing = Api(api.key, Client(raise_request_exception=False))
    assert failing.get(f"/sessions/{session.pk}/context").status_code == 500

    unknown, failed = spans.get_finished_spans()
    # No route matched: the span is named by its method alone.
    assert unknown.name == "GET"
    assert "http.route" not in unknown.attributes
    assert unknown.attributes["http.response.status_code"] == 404
    assert unknown.status.status_code == StatusCode.UNSET  # the client's error, not the hub's
    assert failed.name == "GET /api/v1/sessions/{session_id}/context"
    assert failed.attributes["http.response.status_code"] == 500
    assert failed.attributes["error.type"] == "500"
    assert failed.status.status_code == StatusCode.ERROR
    (exception,) = [e for e in failed.events if e.name == "exception"]
    assert exception.attributes["exception.message"] == "the disk is on fire"


def test_pages_are_traced_too(spans: Any, client: Client, alice: Any, session: Any) -> None:
    client.force_login(alice)
    assert client.get(f"/sessions/{session.pk}/").status_code == 200

    done = spans.get_finished_spans()
    page = one(done, "GET /sessions/{pk}/")
    # The page reads the governed context (nothing is sent).
    reads = named(done, telemetry.CONTEXT_READ)
    assert reads
    assert all(parent_of(read, done) is page for read in reads)
    assert not named(done, telemetry.CONTEXT_SENT)
