"""The wire formats the gateway speaks, each with where its upstream is and how the offline model
answers in it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from django.conf import settings

from gateway import offline
from gateway.upstream import Answer
from gateway.wire import WireRequest, anthropic, openai_chat, openai_responses

OFFLINE = "offline"


@dataclass(frozen=True, slots=True)
class Format:
    wire: ModuleType
    """The wire module: ``parse``, ``render``, ``with_breakpoint``, ``body``, ``response``,
    ``response_items``, ``StreamAssembler``."""
    path: str
    """Appended to the upstream's base URL."""
    setting: str
    """The setting naming the upstream's base URL (or ``offline``)."""
    offline: Callable[[WireRequest], Answer]

    @property
    def provider(self) -> str:
        return str(self.wire.PROVIDER)

    @property
    def base_url(self) -> str:
        return str(getattr(settings, self.setting)).rstrip("/")

    @property
    def is_offline(self) -> bool:
        return self.base_url == OFFLINE


def _include_usage(request: WireRequest) -> bool:
    options = request.members.get("stream_options")
    return (
        options is not None
        and isinstance(options.value, dict)
        and options.value.get("include_usage") is True
    )


ANTHROPIC_MESSAGES = Format(
    anthropic, "/v1/messages", "CTXHUB_GATEWAY_ANTHROPIC_URL", offline.anthropic
)


OPENAI_RESPONSES = Format(
    openai_responses, "/responses", "CTXHUB_GATEWAY_OPENAI_URL", offline.openai_responses
)
OPENAI_CHAT = Format(
    openai_chat,
    "/chat/completions",
    "CTXHUB_GATEWAY_OPENAI_URL",
    lambda request: offline.openai_chat(request, _include_usage(request)),
)
