"""No provider key ever leaks: not the one a client passes through, not the one the hub holds.

Four keys are planted: one Anthropic and one OpenAI key stored on the API keys page of a real
hub process, one of each sent by clients beside their ctxhub key. Real requests go through the
gateway to a fake provider (the official SDKs, and raw HTTP for what they would not send),
answers and errors alike: upstream 401 and 429, bodies the gateway or the provider refuses, a
provider that does not answer in time, a ctxhub key the hub does not know. Then every text the
hub made is searched for each key (whole, or the part of it its hint never shows): every table
of the database, the server's log (at DEBUG), every page the user can open for
the sessions, the API's export and reads, and the spans the server exported with message
content captured. The provider must have received each key, so the test cannot pass by sending
nothing; the stored keys never reach a client, and the ctxhub key never reaches the provider.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from cryptography.fernet import Fernet
from django.db import connection
from django.test import Client

from gateway.models import Exchange, ProviderKey
from gateway.provider_keys import hint_of
from sessions.api.keys import create_key
from sessions.models import AgentSession, SentRequest
from tests.conftest import ARTIFACTS
from tests.gateway.fake_upstream import (
    ANTHROPIC_COUNT_TOKENS,
    FakeUpstream,
    Slow,
    Text,
    anthropic_error,
    openai_error,
    running_fake_upstream,
)
from tests.gateway.waiting import wait_for
from tests.processes import asgi_server
from tests.tracing import OtlpReceiver

pytestmark = pytest.mark.django_db(transaction=True)

SECRETS_KEY = Fernet.generate_key().decode()
TIMEOUT_SECONDS = 1
MODEL_ANTHROPIC = "claude-sonnet-4-6"
MODEL_OPENAI = "gpt-4.1"


@dataclass(frozen=True)
class Planted:
    """A provider key planted for the test: ``secret`` is the part of it no hint shows."""

    name: str
    text: str
    secret: str

    @classmethod
    def make(cls, name: str, kind: str) -> Planted:
        secret = f"PLANTED{secrets.token_hex(12)}"
        return cls(name, f"{kind}{secret}-{secrets.token_hex(2)}", secret)

    def found_in(self, text: str) -> bool:
        return self.text in text or self.secret in text


class Leaks:
    """Where each planted key was found (the test fails on any)."""

    def __init__(self, planted: list[Planted]) -> None:
        self.planted = planted
        self.found: list[str] = []
        self.searched = 0

    def search(self, where: str, text: str) -> None:
        self.searched += 1
        for key in self.planted:
            if key.found_in(text):
                at = text.find(key.text) if key.text in text else text.find(key.secret)
                self.found.append(f"{key.name} in {where}: …{text[max(0, at - 80) : at + 80]!r}…")


def hub(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=30, follow_redirects=False)


def logged_in(url: str, user: Any) -> httpx.Client:
    """A browser of ``user`` on the real server: a session made here, in the shared database."""
    django_client = Client()
    django_client.force_login(user)
    browser = hub(url)
    browser.cookies.set("sessionid", django_client.cookies["sessionid"].value)
    return browser


def store_on_the_page(browser: httpx.Client, provider: str, key: str) -> None:
    """Store ``key`` as the user would: the keys page's form, its CSRF token included."""
    page = browser.get("/keys/")
    assert page.status_code == 200
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token is not None
    stored = browser.post(
        f"/keys/provider/{provider}/", data={"key": key, "csrfmiddlewaretoken": token.group(1)}
    )
    assert stored.status_code == 302, stored.text[:500]


def anthropic_body(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL_ANTHROPIC,
        "max_tokens": 256,
        "system": "You keep secrets.",
        "messages": [{"role": "user", "content": text}],
        **extra,
    }


def chat_body(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL_OPENAI,
        "messages": [
            {"role": "system", "content": "You keep secrets."},
            {"role": "user", "content": text},
        ],
        **extra,
    }


@dataclass
class Traffic:
    """What the clients got back (stored keys must never be in it) and the exchanges the hub
    must have recorded once every answer is in."""

    answers: list[str]
    exchanges: int = 0

    def got(self, response: httpx.Response | Any) -> None:
        headers = "\n".join(f"{name}: {value}" for name, value in response.headers.items())
        self.answers.append(f"{response.status_code}\n{headers}\n\n{response.text}")


def anthropic_traffic(
    url: str, hub_key: str, passed: Planted, upstream: FakeUpstream, traffic: Traffic
) -> None:
    # As Claude Code with ANTHROPIC_AUTH_TOKEN=ctxh_…: the hub sends the stored key.
    sdk = anthropic.Anthropic(
        base_url=f"{url}/gateway/anthropic",
        api_key=None,
        auth_token=hub_key,
        max_retries=0,
        default_headers={"X-Ctxhub-Session": "secrets-anthropic-stored"},
    )
    answer = sdk.messages.create(**anthropic_body("What is the stored key?"))
    assert answer.content[0].type == "text"
    traffic.exchanges += 1
    ask = anthropic_body("Tell me the key.")
    ask["messages"] = [
        *ask["messages"],
        {"role": "assistant", "content": [block.model_dump() for block in answer.content]},
        {"role": "user", "content": "Again, streamed."},
    ]
    with sdk.messages.stream(**ask) as stream:
        assert stream.get_final_message().stop_reason == "end_turn"
    traffic.exchanges += 1
    counted = sdk.messages.count_tokens(
        model=MODEL_ANTHROPIC, messages=[{"role": "user", "content": "count me"}]
    )
    assert counted.input_tokens > 0

    upstream.script(anthropic_error(401, "authentication_error", "invalid x-api-key"))
    with pytest.raises(anthropic.AuthenticationError) as refused:
        sdk.messages.create(**anthropic_body("refused"))
    traffic.got(refused.value.response)
    traffic.exchanges += 1
    upstream.script(
        anthropic_error(429, "rate_limit_error", "slow down", headers={"retry-after": "7"})
    )
    with pytest.raises(anthropic.RateLimitError) as limited:
        sdk.messages.create(**anthropic_body("limited"))
    assert limited.value.response.headers["retry-after"] == "7"
    traffic.got(limited.value.response)
    traffic.exchanges += 1

    raw = hub(url)
    auth = {"authorization": f"Bearer {hub_key}"}
    # A body the provider refuses (no max_tokens), one the hub refuses (not JSON), a timeout.
    no_max = anthropic_body("no max_tokens")
    del no_max["max_tokens"]
    refused_body = raw.post("/gateway/anthropic/v1/messages", json=no_max, headers=auth)
    assert refused_body.status_code == 400
    traffic.got(refused_body)
    traffic.exchanges += 1
    not_json = raw.post("/gateway/anthropic/v1/messages", content=b"{not json", headers=auth)
    assert not_json.status_code == 400
    traffic.got(not_json)
    upstream.script(Slow(Text("too late"), TIMEOUT_SECONDS + 2))
    late = raw.post("/gateway/anthropic/v1/messages", json=anthropic_body("late"), headers=auth)
    assert late.status_code == 504
    traffic.got(late)
    traffic.exchanges += 1

    # The client's own key, beside its ctxhub key, in observe mode and govern mode.
    own = {"x-api-key": passed.text, "x-ctxhub-key": hub_key, "anthropic-version": "2023-06-01"}
    for mode in ("observe", "govern"):
        body = anthropic_body(f"My own key, {mode}.")
        sent = raw.post(
            "/gateway/anthropic/v1/messages",
            json=body,
            headers={**own, "x-ctxhub-mode": mode, "x-ctxhub-session": f"passed-{mode}"},
        )
        assert sent.status_code == 200
        traffic.exchanges += 1
        streamed = raw.post(
            "/gateway/anthropic/v1/messages",
            json={**body, "stream": True},
            headers={**own, "x-ctxhub-mode": mode, "x-ctxhub-session": f"passed-{mode}-s"},
        )
        assert streamed.status_code == 200
        assert "message_stop" in streamed.text
        traffic.exchanges += 1
    # An upstream that quotes the key it refused: the client hears it, the hub stores its hint.
    upstream.script(
        anthropic_error(401, "authentication_error", f"invalid x-api-key: {passed.text}")
    )
    refused_own = raw.post(
        "/gateway/anthropic/v1/messages", json=anthropic_body("refused own"), headers=own
    )
    assert refused_own.status_code == 401
    assert passed.text in refused_own.text
    traffic.exchanges += 1
    # A ctxhub key the hub does not know: refused before anything is sent or stored.
    stranger = raw.post(
        "/gateway/anthropic/v1/messages",
        json=anthropic_body("who am I"),
        headers={**own, "x-ctxhub-key": "ctxh_000000000000_unknownunknownunknown"},
    )
    assert stranger.status_code == 401


def openai_traffic(
    url: str, hub_key: str, passed: Planted, upstream: FakeUpstream, traffic: Traffic
) -> None:
    # As an OpenAI SDK app whose only key is its ctxhub key: the hub sends the stored key.
    sdk = openai.OpenAI(base_url=f"{url}/gateway/openai/v1", api_key=hub_key, max_retries=0)
    completion = sdk.chat.completions.create(**chat_body("What is the stored key?"))
    assert completion.choices[0].message.content
    traffic.exchanges += 1
    chunks = list(
        sdk.chat.completions.create(
            **chat_body("Stream it."), stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks
    traffic.exchanges += 1
    response = sdk.responses.create(
        model=MODEL_OPENAI, instructions="You keep secrets.", input="Responses, please."
    )
    assert response.output_text
    traffic.exchanges += 1
    # OpenAI's own 401 names the key it got, masked but for its last four characters.
    upstream.script(
        openai_error(
            401,
            "Incorrect API key provided: sk-proj-****************************abcd. You can "
            "find your API key at https://platform.openai.com/account/api-keys.",
            code="invalid_api_key",
        )
    )
    with pytest.raises(openai.AuthenticationError) as refused:
        sdk.chat.completions.create(**chat_body("refused"))
    traffic.got(refused.value.response)
    traffic.exchanges += 1
    upstream.script(
        openai_error(429, "Rate limit reached", "requests", headers={"retry-after": "3"})
    )
    with pytest.raises(openai.RateLimitError) as limited:
        sdk.responses.create(model=MODEL_OPENAI, input="limited")
    traffic.got(limited.value.response)
    traffic.exchanges += 1
    upstream.script(Slow(Text("too late"), TIMEOUT_SECONDS + 2))
    with pytest.raises(openai.InternalServerError) as late:
        sdk.chat.completions.create(**chat_body("late"))
    assert late.value.status_code == 504
    traffic.got(late.value.response)
    traffic.exchanges += 1

    # The client's own key, beside its ctxhub key.
    own = openai.OpenAI(
        base_url=f"{url}/gateway/openai/v1",
        api_key=passed.text,
        max_retries=0,
        default_headers={"X-Ctxhub-Key": hub_key, "X-Ctxhub-Session": "passed-openai"},
    )
    assert own.chat.completions.create(**chat_body("My own key.")).choices
    traffic.exchanges += 1
    with own.responses.stream(model=MODEL_OPENAI, input="My own key, streamed.") as stream:
        assert stream.get_final_response().output_text
    traffic.exchanges += 1
    with pytest.raises(openai.BadRequestError) as bad:  # the provider refuses an unknown role
        own.chat.completions.create(
            model=MODEL_OPENAI,
            messages=[{"role": "narrator", "content": "x"}],  # type: ignore[list-item,misc]
        )
    traffic.got(bad.value.response)
    if bad.value.response.headers.get("x-ctxhub-session"):
        traffic.exchanges += 1


def pages_of(browser: httpx.Client, sessions: list[AgentSession]) -> Iterator[tuple[str, str]]:
    """Every page the user can open for the gateway's sessions, and the fleet and keys pages."""
    opened: list[str] = ["/", "/keys/"]
    for session in sessions:
        base = f"/sessions/{session.pk}/"
        seqs = list(session.messages.values_list("seq", flat=True))
        opened += [
            base,
            f"{base}xray/",
            f"{base}consumers/",
            f"{base}records/",
            f"{base}trajectory/",
            f"{base}fates/?from=0&to={max(seqs)}",
            f"{base}messages/",
            f"{base}messages/?before={max(seqs) + 1}",
            f"{base}export/",
            f"{base}export/?format=markdown",
        ]
        for seq in seqs:
            opened += [f"{base}messages/{seq}/", f"{base}messages/{seq}/sent/"]
        for number in SentRequest.objects.filter(session=session).values_list("number", flat=True):
            opened.append(f"{base}requests/{number}/")
    for path in opened:
        page = browser.get(path)
        # A message the Governor never sent has no "as sent" view; every other page opens.
        expected = (200, 404) if path.endswith("/sent/") else (200,)
        assert page.status_code in expected, f"{path}: {page.status_code} {page.text[:300]}"
        yield f"page {path} ({page.status_code})", page.text


def api_reads(url: str, hub_key: str, sessions: list[AgentSession]) -> Iterator[tuple[str, str]]:
    """The API's reads of the sessions, their export first."""
    api = hub(url)
    api.headers["authorization"] = f"Bearer {hub_key}"
    paths = ["/api/v1/sessions"]
    for session in sessions:
        base = f"/api/v1/sessions/{session.pk}"
        paths += [
            f"{base}/export",
            f"{base}/export?format=markdown",
            base,
            f"{base}/messages",
            f"{base}/context",
        ]
    for path in paths:
        read = api.get(path)
        assert read.status_code == 200, f"{path}: {read.status_code} {read.text[:300]}"
        yield f"API {path}", read.text


def database_dump() -> Iterator[tuple[str, str]]:
    """Every row of every table, as text."""
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            columns = [column[0] for column in cursor.description]
            for row in cursor.fetchall():
                values = [
                    bytes(value).decode("latin-1")
                    if isinstance(value, bytes | memoryview)
                    else str(value)
                    for value in row
                ]
                yield (
                    f"table {table}",
                    "\t".join(f"{c}={v}" for c, v in zip(columns, values, strict=False)),
                )


def test_no_provider_key_leaks_from_the_gateway(
    alice: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    settings.CTXHUB_SECRETS_KEY = SECRETS_KEY
    stored_anthropic = Planted.make("the stored Anthropic key", "sk-ant-api03-")
    stored_openai = Planted.make("the stored OpenAI key", "sk-proj-")
    passed_anthropic = Planted.make("the Anthropic key a client passed", "sk-ant-api03-")
    passed_openai = Planted.make("the OpenAI key a client passed", "sk-proj-")
    planted = [stored_anthropic, stored_openai, passed_anthropic, passed_openai]
    hub_key = create_key(alice, name="agent", scopes=["read", "write"])[1]
    hub_secret = hub_key.rsplit("_", 1)[1]

    log = ARTIFACTS / "logs" / "web-gateway-secrets.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    traffic = Traffic(answers=[])
    env = {
        "CTXHUB_SECRETS_KEY": SECRETS_KEY,
        "CTXHUB_GATEWAY_TIMEOUT_SECONDS": str(TIMEOUT_SECONDS),
        # Everything logged, the HTTP client's own lines too.
        "LOG_LEVEL": "DEBUG",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",
    }
    with running_fake_upstream() as upstream, OtlpReceiver() as collector:
        env["CTXHUB_GATEWAY_ANTHROPIC_URL"] = upstream.url
        env["CTXHUB_GATEWAY_OPENAI_URL"] = upstream.url + "/v1"
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.url
        with asgi_server(log, env=env) as url:
            browser = logged_in(url, alice)
            store_on_the_page(browser, "anthropic", stored_anthropic.text)
            store_on_the_page(browser, "openai", stored_openai.text)

            anthropic_traffic(url, hub_key, passed_anthropic, upstream, traffic)
            openai_traffic(url, hub_key, passed_openai, upstream, traffic)
            wait_for(lambda: Exchange.objects.count() == traffic.exchanges, "the exchanges")

            sessions = list(AgentSession.objects.filter(owner=alice, gateway__isnull=False))
            assert len(sessions) >= 5
            texts = [*pages_of(browser, sessions), *api_reads(url, hub_key, sessions)]
            collector.wait_for(
                lambda spans: any(
                    str(span.attributes.get("url.path", "")).startswith("/api/v1/sessions/")
                    for span in spans
                )
            )
        # The server flushed what was left as it stopped.
        spans = list(collector.spans)
        upstream_received = list(upstream.received)
    log_text = log.read_text(errors="replace")

    # The provider got every key it had to, each where its SDK sends it, and never the hub's.
    anthropic_keys = {
        r.headers.get("x-api-key") for r in upstream_received if "/messages" in r.path
    }
    openai_keys = {
        r.headers.get("authorization") for r in upstream_received if "/messages" not in r.path
    }
    assert anthropic_keys == {stored_anthropic.text, passed_anthropic.text}
    assert openai_keys == {f"Bearer {stored_openai.text}", f"Bearer {passed_openai.text}"}
    assert any(r.path == ANTHROPIC_COUNT_TOKENS for r in upstream_received)
    for request in upstream_received:
        assert "authorization" not in request.headers or "/messages" not in request.path
        assert "x-api-key" not in request.headers or "/messages" in request.path
        assert not any(name.startswith("x-ctxhub") for name in request.headers)
        seen = f"{request.headers}{request.body.decode('utf-8', 'replace')}"
        assert hub_secret not in seen, "the ctxhub key reached the provider"

    # The stored keys are in the database encrypted, and nowhere else; the passed ones nowhere.
    rows = {row.provider: row for row in ProviderKey.objects.filter(owner=alice)}
    for provider, key in (("anthropic", stored_anthropic), ("openai", stored_openai)):
        decrypted = Fernet(SECRETS_KEY).decrypt(rows[provider].encrypted.encode()).decode()
        assert decrypted == key.text
        assert rows[provider].hint == hint_of(key.text)
        assert rows[provider].hint.endswith(f"…{key.text[-4:]}")

    leaks = Leaks(planted)
    for where, text in [*texts, *database_dump()]:
        leaks.search(where, text)
    leaks.search("the server's log", log_text)
    for span in spans:
        leaks.search(f"span {span.name}", f"{span.attributes}{span.resource}")
    # What the clients got back may carry their own keys, never the stored ones.
    answers = Leaks([stored_anthropic, stored_openai])
    for answer in traffic.answers:
        answers.search("an answer to a client", answer)
    assert leaks.found == []
    assert answers.found == []

    # The search looked where the keys would have been: the sessions' pages and export hold
    # the conversations, the log holds the requests, the keys page holds the hints.
    joined = "\n".join(text for _, text in texts)
    assert "What is the stored key?" in joined
    assert "fake answer" in joined
    assert rows["anthropic"].hint in joined
    assert rows["openai"].hint in joined
    # The log holds the server's DEBUG lines, the gateway's of each upstream call too.
    assert "DEBUG gateway.upstream POST http://127.0.0.1:" in log_text
    assert len(spans) > 0
    # The gateway's requests have their spans too (searched above), named by their route.
    relayed = [span for span in spans if span.name == "POST /gateway/anthropic/v1/messages"]
    assert {span.attributes["http.response.status_code"] for span in relayed} >= {200, 401}
    assert any(span.name == "POST /gateway/openai/v1/chat/completions" for span in spans)
    assert leaks.searched > 100
    assert hub_secret not in log_text


def test_the_log_search_finds_a_planted_key(tmp_path: Path) -> None:
    """The search itself: a key, or the part of it no hint shows, is found wherever it is."""
    key = Planted.make("a key", "sk-ant-api03-")
    leaks = Leaks([key])
    leaks.search("whole", f"header x-api-key: {key.text}\n")
    leaks.search("its secret part", f"…{key.secret[3:-3]}…{key.secret}")
    leaks.search("its hint only", f"sk-ant-api03-…{key.text[-4:]}")
    assert [found.split(":")[0] for found in leaks.found] == [
        "a key in whole",
        "a key in its secret part",
    ]
