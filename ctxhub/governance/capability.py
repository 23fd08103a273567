"""``ContextGovernor``: a pydantic-ai capability that governs an agent's own history.

``Agent(model, capabilities=[ContextGovernor(policy)])`` governs before every model request,
including between tool iterations. It works in ``prepare_model_request``, once the serving
model is known (its tokenizer and context window decide the budget), and changes only what
that request sends: the run's history keeps every message intact, so a later request — or
the hub reading the run — still has the full record, exactly as the log-is-truth design wants.

The request's real instructions and tool definitions (the agent's own, this capability's tool
included) are counted into the budget. Evicted outputs go to an ``EvictionStore`` (in memory
unless another is given) and the agent gets a tool to read them back by reference.

A request the provider still refuses for its length (the budget is an estimate for models
whose tokenizer is not shipped, and windows are sometimes smaller than advertised) is retried
with a smaller history by ``OverflowRecovery``, at most three times, so the agent recovers by
itself. ``recover=False`` turns that off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelResponse
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import FunctionToolset

from .govern import Governed, govern
from .policy import Policy
from .recovery import OverflowRecovery
from .store import EvictionStore, InMemoryEvictionStore, read_evicted

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.toolsets import AbstractToolset


@dataclass
class ContextGovernor(AbstractCapability[Any]):
    """Governs the history before every model request of the agent that holds it."""

    policy: Policy = field(default_factory=Policy)
    store: EvictionStore = field(default_factory=InMemoryEvictionStore)
    tokenizer_model: str | None = None
    """Model name to pick the tokenizer by; defaults to the serving model's name."""
    on_governed: Callable[[Governed], None] | None = None
    """Called with every governance result (for meters, logs or the hub's live view)."""
    recover: bool = True
    """Retry a request refused as too long with a smaller history."""
    recovery: OverflowRecovery | None = None
    """The recovery used when ``recover`` is on; built from ``policy`` unless given."""
    last: Governed | None = field(default=None, init=False, repr=False)
    """The latest governance result."""

    def __post_init__(self) -> None:
        if self.recover and self.recovery is None:
            self.recovery = OverflowRecovery(
                policy=self.policy, tokenizer_model=self.tokenizer_model
            )
        if not self.recover:
            self.recovery = None

    def get_toolset(self) -> AbstractToolset[Any] | None:
        """The tool that reads an evicted output back, when eviction is on."""
        if not self.policy.eviction.enabled:
            return None
        store = self.store

        def read_evicted_output(
            ref: str, offset: int = 0, limit: int = 200, grep: str | None = None
        ) -> str:
            """Read an output that was evicted from the context, by its reference.

            Args:
                ref: The reference shown in the evicted output's preview.
                offset: First line (or match, with grep) to return, counting from 0.
                limit: How many lines (or matches) to return.
                grep: A regular expression; only matching lines are returned.
            """
            return read_evicted(store.get(ref), ref, offset=offset, limit=limit, grep=grep)

        toolset: FunctionToolset[Any] = FunctionToolset()
        toolset.add_function(
            read_evicted_output, takes_ctx=False, name=self.policy.eviction.tool_name
        )
        return toolset

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Replace this request's messages by their governed version."""
        model = request_context.model
        parameters = request_context.model_request_parameters
        instruction_parts = parameters.instruction_parts
        instructions = (
            "\n\n".join(part.content for part in instruction_parts)
            if instruction_parts is not None
            else None
        )
        governed = govern(
            request_context.messages,
            self.policy,
            model=self.tokenizer_model or model.model_name,
            tool_definitions=[*parameters.function_tools, *parameters.output_tools],
            instructions=instructions,
            context_window_tokens=model.context_window,
        )
        for ref, text in governed.evicted.items():
            self.store.put(ref, text)
        request_context.messages = governed.messages
        self.last = governed
        if self.on_governed is not None:
            self.on_governed(governed)
        if self.recovery is not None:
            # On a retry after an overflow, the governed request is shrunk further.
            request_context = await self.recovery.prepare_model_request(ctx, request_context)
        return request_context

    async def after_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        response: ModelResponse,
    ) -> ModelResponse:
        """A request went through: recovery forgets its retries."""
        if self.recovery is not None:
            response = await self.recovery.after_model_request(
                ctx, request_context=request_context, response=response
            )
        return response

    async def on_model_request_error(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        error: Exception,
    ) -> ModelResponse:
        """An overflow becomes a retry with a smaller history; anything else propagates."""
        if self.recovery is None:
            raise error
        return await self.recovery.on_model_request_error(
            ctx, request_context=request_context, error=error
        )
