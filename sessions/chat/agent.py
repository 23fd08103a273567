"""The chat's agent: the session's chat model with the repository tools, governed by the hub.

Governance here is the stored session's own: before every model request of a turn, the run's
new messages are appended to the log and the request carries the session's governed context
(``sessions.services.governed_context``), the very one the x-ray shows, under the session's
policy, pins and records. So the chat and an external agent pulling the context get the same
view, and what each request carried is visible while the turn runs.

The tools are the offline demo model's (list and read this repository's files, confined to
it), whatever the model, plus reading back an output governance evicted, from the database,
and ``recall`` over what the session's governed context hides (the database's full-text search).
Their definitions, as each request carries them, are handed to the hooks too: the session keeps
them, so what is governed and shown counts them. A request refused for its length is retried
smaller by ``OverflowRecovery``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from channels.db import database_sync_to_async
from django.conf import settings
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import FunctionToolset

from ctxhub.governance import Policy
from ctxhub.governance.llm import resolve_model
from ctxhub.governance.offline import OFFLINE_DEMO, demo_model, demo_toolset
from ctxhub.governance.recall import answer, recall_toolset
from ctxhub.governance.recovery import OverflowRecovery
from sessions.models import AgentSession
from sessions.services import read_evicted_output, recall, session_policy

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset


class RequestHooks(Protocol):
    """What a turn does around each model request (``sessions.chat.runner.TurnRun``)."""

    async def before_request(
        self, messages: list[ModelMessage], tools: Sequence[ToolDefinition]
    ) -> list[ModelMessage]:
        """Store the run's new messages (and the tool definitions the request carries, if
        they changed); return the messages the request carries."""
        ...

    async def after_response(self, response: ModelResponse) -> None:
        """Store the response."""
        ...


@dataclass
class HubGovernance(AbstractCapability[Any]):
    """Each request of the run carries the stored session's governed context."""

    session: AgentSession
    hooks: RequestHooks
    policy: Policy

    def get_toolset(self) -> AbstractToolset[Any] | None:
        return governance_toolset(self.session, self.policy)

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        parameters = request_context.model_request_parameters
        tools = [*parameters.function_tools, *parameters.output_tools]
        request_context.messages = await self.hooks.before_request(request_context.messages, tools)
        return request_context

    async def after_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        response: ModelResponse,
    ) -> ModelResponse:
        await self.hooks.after_response(response)
        return response


def governance_toolset(session: AgentSession, policy: Policy) -> FunctionToolset[Any] | None:
    """Reading an evicted output back, from the session's stored outputs, and ``recall``
    over what the session's governed context hides; each when ``policy`` gives it."""
    toolset: FunctionToolset[Any] = FunctionToolset()
    if policy.eviction.enabled:

        async def read_evicted(
            ref: str, offset: int = 0, limit: int = 200, grep: str | None = None
        ) -> str:
            """Read an output that was evicted from the context, by its reference.

            Args:
                ref: The reference shown in the evicted output's preview.
                offset: First line (or match, with grep) to return, counting from 0.
                limit: How many lines (or matches) to return.
                grep: A regular expression; only matching lines are returned.
            """
            text = await database_sync_to_async(read_evicted_output)(
                session, ref, offset=offset, limit=limit, grep=grep
            )
            return text if text is not None else f"No evicted output is stored under {ref!r}."

        toolset.add_function(read_evicted, takes_ctx=False, name=policy.eviction.tool_name)
    awareness = policy.awareness
    if awareness.recall:

        async def search(ctx: RunContext[Any], query: str, limit: int) -> str:
            hits = await database_sync_to_async(recall)(session, query, limit)
            return answer(query, hits)

        for tool in recall_toolset(search, awareness.recall_tool_name).tools.values():
            toolset.add_tool(tool)
    return toolset if toolset.tools else None


@dataclass(frozen=True, slots=True)
class ChatTool:
    name: str
    description: str
    """The first sentence of what the model is told the tool does."""


def chat_tools(session: AgentSession) -> list[ChatTool]:
    """The tools the chat's agent offers its model on ``session``, as a new chat lists them."""
    toolsets = [demo_toolset(), governance_toolset(session, session_policy(session))]
    return [
        ChatTool(tool.name, _first_sentence(tool.description or ""))
        for toolset in toolsets
        if toolset is not None
        for tool in toolset.tools.values()
    ]


def _first_sentence(description: str) -> str:
    """A tool description's first sentence, on one line (a docstring wraps mid-sentence)."""
    said = " ".join(description.split())
    end = said.find(". ")
    return said if end < 0 else said[: end + 1]


def chat_agent(session: AgentSession, model_name: str, hooks: RequestHooks) -> Agent[None, str]:
    """The agent that answers a turn; raises what resolving the model raises (an unknown
    name, a missing API key)."""
    policy = session_policy(session)
    pace = settings.CTXHUB_DEMO_PACE_MS / 1000
    model = demo_model(pace=pace) if model_name == OFFLINE_DEMO else resolve_model(model_name)
    return Agent(
        model,
        toolsets=[demo_toolset(pace=pace if model_name == OFFLINE_DEMO else 0.0)],
        # Recovery after the governance: a retry shrinks the governed request further.
        capabilities=[
            HubGovernance(session, hooks, policy),
            OverflowRecovery(policy=policy, tokenizer_model=session.model),
        ],
    )
