"""``RemoteGovernor``: an external pydantic-ai agent keeps its history in the hub and sends what
the hub governs."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelResponse
from pydantic_ai.tools import RunContext

from ctxhub.client.async_hub import AsyncHub
from ctxhub.client.calls import tool_json
from ctxhub.governance.recall import recall_toolset

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.toolsets import AbstractToolset


@dataclass
class _SentTools:
    sent: list[dict[str, Any]] | None = None
    """None: none sent yet."""


@dataclass
class RemoteGovernor(AbstractCapability[Any]):
    """Keeps an agent's history in the hub and sends what the hub governs.

    Before every model request of a run, the messages the run added since the last request
    are appended to the session (a user prompt, tool results), and the request carries the
    session's governed context; each response is appended as it arrives. The session shows
    live in the dashboard, and compactions, clears and pins made there apply to the agent's
    next request. The hub holds the history: run the agent without ``message_history`` (or
    with what the hub gave back); only what a run adds is pushed. The tool definitions the
    request carries are sent to the session when they differ from those sent last, so the hub
    counts them into the request.

    The agent also gets the ``recall`` tool (``recall=False`` leaves it out): it searches, in
    the hub, what the session's governed context no longer carries in full. Name it as the
    session's policy does (``awareness.recall_tool_name``) when that is not ``recall``: the
    notices the hub writes tell the model to call it by that name.
    """

    hub: AsyncHub
    session_id: uuid.UUID | str
    recall: bool = True
    recall_tool_name: str = "recall"
    _pushed: int | None = field(default=None, init=False, repr=False)
    """How many of the run's messages the hub has (None: the run has made no request yet)."""
    _tools: _SentTools = field(default_factory=lambda: _SentTools(), init=False, repr=False)
    """The tool definitions sent to the session last, shared by the runs of this capability."""

    async def for_run(self, ctx: RunContext[Any]) -> AbstractCapability[Any]:
        run = replace(self)
        run._tools = self._tools
        return run

    def get_toolset(self) -> AbstractToolset[Any] | None:
        if not self.recall:
            return None

        async def search(ctx: RunContext[Any], query: str, limit: int) -> str:
            return (await self.hub.recall(self.session_id, query, limit=limit)).text

        return recall_toolset(search, self.recall_tool_name)

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        messages = request_context.messages
        if self._pushed is None:
            # What came before the run's first request is the history it was given.
            self._pushed = len(messages) - 1
        new = messages[self._pushed :]
        if new:
            await self.hub.append(self.session_id, new)
            self._pushed = len(messages)
        parameters = request_context.model_request_parameters
        tools = tool_json([*parameters.function_tools, *parameters.output_tools])
        if tools != self._tools.sent:
            await self.hub.update_session(self.session_id, tools=tools)
            self._tools.sent = tools
        request_context.messages = (await self.hub.context(self.session_id)).messages
        return request_context

    async def after_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        response: ModelResponse,
    ) -> ModelResponse:
        await self.hub.append(self.session_id, [response])
        if self._pushed is not None:
            self._pushed += 1
        return response
