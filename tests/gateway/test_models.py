"""``models.list()`` and ``models.retrieve()`` through the gateway, as the official SDKs call
them: the upstream's answer relayed, the client's provider key sent on and its ctxhub key not,
nothing stored; the offline upstream lists its demo model in each provider's shape."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
from django.test import Client

from gateway.offline import MODEL_ID
from sessions.api.keys import create_key
from sessions.models import AgentSession
from tests.gateway.fake_upstream import FakeUpstream

pytestmark = pytest.mark.django_db(transaction=True)

PROVIDER_KEY = "sk-ant-api03-models-provider-key-0123456789"


@pytest.fixture
def hub_key(alice: Any) -> str:
    return create_key(alice, name="models", scopes=["read", "write"])[1]


def test_the_sdks_list_and_retrieve_the_upstreams_models_through_the_gateway(
    served: tuple[str, FakeUpstream], upstream: FakeUpstream, hub_key: str
) -> None:
    url = served[0]
    claude = anthropic.Anthropic(
        base_url=f"{url}/gateway/anthropic",
        api_key=PROVIDER_KEY,
        max_retries=0,
        default_headers={"X-Ctxhub-Key": hub_key},
    )
    assert [model.id for model in claude.models.list()] == [
        "claude-sonnet-4-6",
        "claude-haiku-4-5",
    ]
    assert claude.models.retrieve("claude-haiku-4-5").id == "claude-haiku-4-5"
    with pytest.raises(anthropic.NotFoundError):
        claude.models.retrieve("claude-unknown")
    gpt = openai.OpenAI(
        base_url=f"{url}/gateway/openai/v1",
        api_key=PROVIDER_KEY,
        max_retries=0,
        default_headers={"X-Ctxhub-Key": hub_key},
    )
    assert [model.id for model in gpt.models.list()] == ["claude-sonnet-4-6", "claude-haiku-4-5"]
    assert gpt.models.retrieve("claude-sonnet-4-6").owned_by == "fake"
    received = [r for r in upstream.received if r.path.startswith("/v1/models")]
    assert [(r.method, r.path) for r in received] == [
        ("GET", "/v1/models"),
        ("GET", "/v1/models/claude-haiku-4-5"),
        ("GET", "/v1/models/claude-unknown"),
        ("GET", "/v1/models"),
        ("GET", "/v1/models/claude-sonnet-4-6"),
    ]
    for request in received:
        assert hub_key not in str(request.headers)
        assert PROVIDER_KEY in (
            request.headers.get("x-api-key", "") + request.headers.get("authorization", "")
        )
    assert not AgentSession.objects.exists()  # a question, not a turn


def test_a_wrong_key_is_refused_before_the_upstream_is_asked(
    served: tuple[str, FakeUpstream], upstream: FakeUpstream
) -> None:
    gpt = openai.OpenAI(
        base_url=f"{served[0]}/gateway/openai/v1",
        api_key=PROVIDER_KEY,
        max_retries=0,
        default_headers={"X-Ctxhub-Key": "ctxh_000000000000_notakey"},
    )
    with pytest.raises(openai.AuthenticationError):
        gpt.models.list()
    assert not upstream.received


def test_the_offline_upstream_lists_its_demo_model(
    client: Client, hub_key: str, settings: Any
) -> None:
    settings.CTXHUB_GATEWAY_ANTHROPIC_URL = "offline"
    settings.CTXHUB_GATEWAY_OPENAI_URL = "offline"
    auth = {"HTTP_AUTHORIZATION": f"Bearer {hub_key}"}
    listed = client.get("/gateway/openai/v1/models", **auth)
    assert listed.status_code == 200
    assert listed.json()["object"] == "list"
    assert [m["id"] for m in listed.json()["data"]] == [MODEL_ID]
    one = client.get("/gateway/openai/v1/models/gpt-4o", **auth).json()
    assert one == {"id": "gpt-4o", "object": "model", "created": 1735689600, "owned_by": "ctxhub"}
    claude = client.get("/gateway/anthropic/v1/models", HTTP_X_API_KEY=hub_key).json()
    assert claude["data"][0]["type"] == "model"
    assert claude["first_id"] == claude["last_id"] == MODEL_ID
    assert client.get("/gateway/anthropic/v1/models").status_code == 401
    assert client.post("/gateway/openai/v1/models", **auth).status_code == 405
