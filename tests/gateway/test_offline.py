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
from tests.gateway.test_gateway_anthropic import tool_loop
from tests.gateway.waiting import wait_for
from tests.processes import asgi_server

pytestmark = pytest.mark.django_db(transaction=True)

OFFLINE = {"CTXHUB_GATEWAY_ANTHROPIC_URL": "offline", "CTXHUB_GATEWAY_OPENAI_URL": "offline"}


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
            tool_loop(client, 4, messages=[{"role": "user", "content": f"Read ({mode})."}])
        wait_for(lambda: Exchange.objects.count() == 8, "the exchanges")
    for mode in ("observe", "govern"):
        gateway = GatewaySession.objects.get(mode=mode)
        # The system prompt, the 4 requests' prompts and results, the 4 answers: each once.
        assert gateway.session.messages.count() == 9
        assert Exchange.objects.filter(session=gateway.session, status=200).count() == 4
