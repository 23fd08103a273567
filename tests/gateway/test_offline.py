"""The offline upstream through a real hub process, as the README's gateway examples use it: its
answer is at hand at once, so an exchange is recorded before its request's threading has even
begun, and each is stored all the same, in either mode."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from gateway.models import Exchange, GatewaySession
from sessions.api.keys import create_key
from tests.conftest import ARTIFACTS
from tests.gateway.waiting import wait_for
from tests.processes import asgi_server

pytestmark = pytest.mark.django_db(transaction=True)

OFFLINE = {"CTXHUB_GATEWAY_ANTHROPIC_URL": "offline", "CTXHUB_GATEWAY_OPENAI_URL": "offline"}
TOOLS = [{"name": "Read", "description": "Read a file.", "input_schema": {"type": "object"}}]


def conversation(client: anthropic.Anthropic, prompt: str, turns: int) -> None:
    """A tool loop of ``turns`` requests, whole answers and streams in turn."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    for turn in range(turns):
        ask: dict[str, Any] = {
            "model": "claude-sonnet-4-6",
            "max_tokens": 200,
            "messages": messages,
            "tools": TOOLS,
        }
        if turn % 2:
            with client.messages.stream(**ask) as stream:
                answer = stream.get_final_message()
        else:
            answer = client.messages.create(**ask)
        messages.append(
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in answer.content],
            }
        )
        calls = [block for block in answer.content if block.type == "tool_use"]
        if calls:
            result = {"type": "tool_result", "tool_use_id": calls[0].id, "content": "# ctxhub"}
            messages.append({"role": "user", "content": [result]})
        else:
            messages.append({"role": "user", "content": "Go on."})


def test_both_modes_store_every_exchange_with_the_offline_upstream(alice: Any) -> None:
    key = create_key(alice, name="agent", scopes=["read", "write"])[1]
    with asgi_server(ARTIFACTS / "logs" / "web-gateway-offline.log", env=OFFLINE) as url:
        for mode in ("observe", "govern"):
            client = anthropic.Anthropic(
                base_url=f"{url}/gateway/anthropic",
                api_key=key,
                max_retries=0,
                timeout=20,
                default_headers={"X-Ctxhub-Mode": mode},
            )
            conversation(client, f"Read the README ({mode}).", 4)
        wait_for(lambda: Exchange.objects.count() == 8, "the exchanges")
    for mode in ("observe", "govern"):
        gateway = GatewaySession.objects.get(mode=mode)
        # The 4 requests' 4 prompts and results, the 4 answers: each stored once.
        assert gateway.session.messages.count() == 8
        assert Exchange.objects.filter(session=gateway.session, status=200).count() == 4
