"""``ContextGovernor``: a pydantic-ai capability that governs an agent's own history.

``Agent(model, capabilities=[ContextGovernor(policy)])`` governs before every model request,
including between tool iterations, with one ``Governor`` per run: between its actions a
request repeats the one before with the new messages appended, so the provider's prompt cache
keeps the prefix. It works in ``prepare_model_request``, once the serving
model is known (its tokenizer and context window decide the budget), and changes only what
that request sends: the run's history keeps every message intact, so a later request — or
the hub reading the run — still has the full record, exactly as the log-is-truth design wants.

The request's real instructions and tool definitions (the agent's own, this capability's tools
included) are counted into the budget. Evicted outputs go to an ``EvictionStore`` (in memory
unless another is given) and the agent gets a tool to read them back by reference. With
``policy.awareness.recall`` (on by default) it also gets ``recall(query, limit)``, which
searches, in memory, what the run's last governed request did not carry in full: masked, cut
and evicted outputs, dropped and summarised messages (``recall.py``).

With a ``summarizer`` (a cheaper model, or ``offline:extractive``), the run's older history is
also summarised inside the run, before the request that would reach ``summarize_at`` of the
history budget — as co-cli's window processor and pydantic-deep's context manager do. It is
``compact`` itself, with its invariants: the head, the current turn's request and the newest
exchange stay verbatim, user messages are kept, the fact ledger keeps what the summary forgot,
and a failing summariser leaves its marker so the run goes on. The summary stands for those
messages for the rest of the run; the run's own history is still never changed.

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
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import FunctionToolset

from .compact import Compacted, compact
from .governed import Governed
from .governor import Governor
from .policy import Policy, Threshold
from .recall import Piece, answer, fate_of, hidden, recall_toolset, search_history
from .recovery import OverflowRecovery
from .store import EvictionStore, InMemoryEvictionStore, read_evicted

if TYPE_CHECKING:
    from pydantic_ai.capabilities.abstract import WrapRunHandler
    from pydantic_ai.models import Model, ModelRequestContext
    from pydantic_ai.run import AgentRunResult
    from pydantic_ai.toolsets import AbstractToolset


@dataclass
class _RunSummary:
    """The run's history as last compacted: ``messages`` stand for its first ``covered``."""

    covered: int
    last: ModelMessage
    """The run's message at ``covered - 1``, to know the run's history still begins so."""
    messages: list[ModelMessage]


@dataclass
class _Seen:
    """What a run's last governed request hid, for the recall tool to search."""

    history: list[ModelMessage]
    """The run's messages, numbered by position."""
    summarised: frozenset[int]
    """Positions the request's history did not hold: a summary stood for them."""
    messages: dict[int, str]
    parts: dict[tuple[int, int], str]

    def fate(self, piece: Piece) -> str | None:
        if piece.seq in self.summarised:
            return "summarised"
        return fate_of(piece, self.messages, self.parts)


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
    summarizer: Model | str | None = None
    """Summarise the older history inside the run with this model; None never does."""
    summarize_at: float = 0.9
    """Share of the history budget the history may reach before it is summarised."""
    summary_keep: Threshold | None = None
    """How much recent history a summary leaves verbatim (default: as ``compact``)."""
    on_compacted: Callable[[Compacted], None] | None = None
    """Called with every in-run compaction (summarised, fallen back or refused)."""
    _governors: dict[str | None, Governor] = field(default_factory=dict, init=False, repr=False)
    """Each run's Governor: its requests are governed as one session, keeping the cache warm."""
    _runs: dict[str | None, _RunSummary] = field(default_factory=dict, init=False, repr=False)
    _refused: dict[str | None, int] = field(default_factory=dict, init=False, repr=False)
    """History tokens at which the run's summariser last gave nothing usable: it is not asked
    again before the history has grown by a quarter."""
    _seen: dict[str | None, _Seen] = field(default_factory=dict, init=False, repr=False)
    """What each run's last request hid, for ``recall``."""

    def __post_init__(self) -> None:
        if not 0 < self.summarize_at <= 1:
            raise ValueError("summarize_at must be in (0, 1]")
        if self.recover and self.recovery is None:
            self.recovery = OverflowRecovery(
                policy=self.policy, tokenizer_model=self.tokenizer_model
            )
        if not self.recover:
            self.recovery = None

    def get_toolset(self) -> AbstractToolset[Any] | None:
        """The tools that reach what governance hid: reading an evicted output back (when
        eviction is on) and ``recall`` (when the policy gives it)."""
        toolset: FunctionToolset[Any] = FunctionToolset()
        if self.policy.eviction.enabled:
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

            toolset.add_function(
                read_evicted_output, takes_ctx=False, name=self.policy.eviction.tool_name
            )
        awareness = self.policy.awareness
        if awareness.recall:
            recall = recall_toolset(self._recall, awareness.recall_tool_name)
            for tool in recall.tools.values():
                toolset.add_tool(tool)
        return toolset if toolset.tools else None

    async def _recall(self, ctx: RunContext[Any], query: str, limit: int) -> str:
        seen = self._seen.get(ctx.run_id)
        hits = [] if seen is None else search_history(seen.history, seen.fate, query, limit)
        return answer(query, hits)

    async def wrap_run(
        self, ctx: RunContext[Any], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        """Forget the run's summary (and what recovery learned) when the run ends, however
        it ends."""
        try:
            if self.recovery is not None:
                return await self.recovery.wrap_run(ctx, handler=handler)
            return await handler()
        finally:
            self._governors.pop(ctx.run_id, None)
            self._runs.pop(ctx.run_id, None)
            self._refused.pop(ctx.run_id, None)
            self._seen.pop(ctx.run_id, None)

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Replace this request's messages by their governed version (summarised first when
        a summariser is set and the history has reached its threshold)."""
        model = request_context.model
        parameters = request_context.model_request_parameters
        instruction_parts = parameters.instruction_parts
        instructions = (
            "\n\n".join(part.content for part in instruction_parts)
            if instruction_parts is not None
            else None
        )
        name = self.tokenizer_model or model.model_name
        tools = [*parameters.function_tools, *parameters.output_tools]
        governor = self._governors.get(ctx.run_id)
        if governor is None or governor.model != name:
            governor = self._governors[ctx.run_id] = Governor(self.policy, model=name)

        def governed_from(history: list[ModelMessage]) -> Governed:
            return governor.govern(
                history,
                tool_definitions=tools,
                instructions=instructions,
                context_window_tokens=model.context_window,
            )

        messages = request_context.messages
        history = self._summarised(ctx, messages)
        governed = governed_from(history)
        if self.summarizer is not None and self._due(ctx, governed):
            compacted = await self._compact(history, name, governed)
            if compacted.report.outcome in ("summarized", "fallback"):
                summary = _RunSummary(len(messages), messages[-1], compacted.messages)
                self._runs[ctx.run_id] = summary
                governed = governed_from(compacted.messages)
            else:
                self._refused[ctx.run_id] = self._history_tokens(governed)
        for ref, text in governed.evicted.items():
            self.store.put(ref, text)
        if self.policy.awareness.recall:
            self._seen[ctx.run_id] = _seen(messages, history, governed)
        request_context.messages = governed.messages
        if self.on_governed is not None:
            self.on_governed(governed)
        if self.recovery is not None:
            # On a retry after an overflow, the governed request is shrunk further.
            request_context = await self.recovery.prepare_model_request(ctx, request_context)
        return request_context

    def _summarised(self, ctx: RunContext[Any], messages: list[ModelMessage]) -> list[ModelMessage]:
        """The run's history with its summary standing for what it covers, if it has one."""
        summary = self._runs.get(ctx.run_id)
        if summary is None:
            return messages
        covered = summary.covered
        if covered > len(messages) or messages[covered - 1] is not summary.last:
            # The history was rewritten under the run: the summary no longer describes it.
            del self._runs[ctx.run_id]
            return messages
        return [*summary.messages, *messages[covered:]]

    @staticmethod
    def _history_tokens(governed: Governed) -> int:
        return governed.tokens_before - governed.system_tokens

    def _due(self, ctx: RunContext[Any], governed: Governed) -> bool:
        """Whether the history has reached the share of its budget that calls for a summary."""
        history = self._history_tokens(governed)
        if history <= self.summarize_at * governed.budget_tokens:
            return False
        refused = self._refused.get(ctx.run_id)
        return refused is None or history > refused * 1.25

    async def _compact(
        self, history: list[ModelMessage], model: str, governed: Governed
    ) -> Compacted:
        """``history`` compacted by the summariser, within the window and beside the tools
        the request ``governed`` has."""
        assert self.summarizer is not None
        policy = self.policy
        if policy.context_window is None:
            policy = policy.model_copy(update={"context_window": governed.window_tokens})
        compacted = await compact(
            history,
            policy,
            summarizer=self.summarizer,
            model=model,
            keep=self.summary_keep,
            tool_tokens=governed.tool_definition_tokens,
            sent_now=governed.tokens_after + governed.tool_definition_tokens,
        )
        if self.on_compacted is not None:
            self.on_compacted(compacted)
        return compacted

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


def _seen(run: list[ModelMessage], history: list[ModelMessage], governed: Governed) -> _Seen:
    """What the request governed from ``history`` (the run's messages, or a summary and the
    messages after it) hid of the run's messages."""
    numbers = {id(message): n for n, message in enumerate(run)}
    positions = [numbers.get(id(message)) for message in history]
    messages, parts = hidden(governed.report, lambda position: positions[position])
    held = set(positions)
    summarised = frozenset(n for n in range(len(run)) if n not in held)
    return _Seen(list(run), summarised, messages, parts)
