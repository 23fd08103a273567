"""Overflow recovery: a request the provider refused as too long is shrunk and sent again.

Token counts are estimates for most providers, and a history can also grow past the window
between two governed requests, so a provider may still answer "context length exceeded".
``OverflowRecovery`` (a pydantic-ai capability) recognises that answer — pydantic-ai's typed
``ModelContextWindowExceededError`` and the raw errors of OpenAI (``context_length_exceeded``),
Anthropic ("prompt is too long") and Gemini ("exceeds the maximum number of tokens") — and asks
for another attempt (``RetryModelRequest``) with a smaller history: at most ``max_retries``
times (3, as AgenticLoop RFC 005), each removing a larger share of the history than the one
before, the last sending the least the policy allows.

Shrinking is the engine's own: the failed attempt's history is governed again with a history
cap, so the oldest messages go first (the sliding window, then iteration groups of the current
turn), a tool call never loses its result, and the system prompt, pins, protected tools and
the latest user request stay. When the provider states the limit and the size ("maximum
context length is 8192 tokens … resulted in 9000 tokens", or any "507414 > 120000"), the
first shrink aims just below the limit, still within the bounds.

What a run learns is kept for the rest of it: once a shrunk request went through, the later
requests of the run are sent within the size that worked, so one overflow does not cost a
failed request at every later step (the history only grows). A run's state is dropped when it
ends.

Only the request on the wire changes; the run's history keeps every message.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ModelContextWindowExceededError, RetryModelRequest
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.tools import RunContext

from .facts import message_facts
from .governor import govern
from .policy import Policy
from .tokens import tokenizer_for

if TYPE_CHECKING:
    from pydantic_ai.capabilities.abstract import WrapRunHandler
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.run import AgentRunResult

DEFAULT_MAX_RETRIES = 3

_OVERFLOW_CODES = frozenset({"context_length_exceeded", "model_context_window_exceeded"})
_OVERFLOW_PHRASES = (
    "context_length_exceeded",
    "maximum context length",
    "context length exceeded",
    "context window exceeded",
    "reduce the length of the messages",
    "prompt is too long",
    "input is too long",
    "exceeds the maximum number of tokens",
    "input token count",
    "too many tokens",
    "exceeds the context window",
)
_LIMIT_AND_SIZE = (
    # OpenAI: "maximum context length is 8192 tokens. However, your messages resulted in 9000"
    re.compile(r"maximum context length is (\d[\d,]*).*?resulted in (\d[\d,]*)", re.S),
    # Anthropic: "prompt is too long: 210000 tokens > 200000 maximum"
    re.compile(r"(?P<size>\d[\d,]*) tokens > (?P<limit>\d[\d,]*) maximum"),
    # Gemini: "The input token count (N) exceeds the maximum number of tokens allowed (M)"
    re.compile(r"input token count \((?P<size>\d[\d,]*)\).*?allowed \((?P<limit>\d[\d,]*)\)", re.S),
    # Any other "size > limit" pair: "507414 > 120000", "130,000 tokens > 128,000"
    re.compile(r"(?P<size>\d[\d,]*)(?:\s*tokens?)?\s*>\s*(?P<limit>\d[\d,]*)"),
)


def _texts(error: BaseException) -> list[str]:
    texts = [str(error)]
    for name in ("message", "body", "code", "provider_error_code", "type"):
        value = getattr(error, name, None)
        if value is not None:
            texts.append(str(value))
    return texts


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen and len(seen) < 8:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def is_context_overflow(error: BaseException) -> bool:
    """Whether an error says the request exceeded the model's context window."""
    for link in _chain(error):
        if isinstance(link, ModelContextWindowExceededError):
            return True
        code = getattr(link, "code", None) or getattr(link, "provider_error_code", None)
        if isinstance(code, str) and code in _OVERFLOW_CODES:
            return True
        text = " ".join(_texts(link)).lower()
        if any(phrase in text for phrase in _OVERFLOW_PHRASES):
            return True
    return False


def stated_sizes(error: BaseException) -> tuple[int, int] | None:
    """(limit, size) in tokens when the error states both, else None."""
    for link in _chain(error):
        text = " ".join(_texts(link))
        for pattern in _LIMIT_AND_SIZE:
            match = pattern.search(text)
            if match is None:
                continue
            groups = match.groupdict()
            if groups:
                limit, size = groups["limit"], groups["size"]
            else:
                limit, size = match.group(1), match.group(2)
            return int(limit.replace(",", "")), int(size.replace(",", ""))
    return None


class Shrunk(BaseModel):
    """One shrink of a history before a retry."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    messages: list[ModelMessage]
    target_tokens: int
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int

    @property
    def changed(self) -> bool:
        """Whether the shrink removed anything."""
        return self.tokens_after < self.tokens_before


def _history_tokens(messages: list[ModelMessage], model: str | None) -> int:
    """Tokens of a history without its system prompt parts (what a history cap limits)."""
    tokenizer = tokenizer_for(model)
    facts = [message_facts(message, tokenizer) for message in messages]
    return sum(f.tokens - f.system_tokens for f in facts)


def _recovery_policy(policy: Policy, cap: int | None) -> Policy:
    window = policy.window.model_copy(update={"enabled": True, "triggers": (), "keep": None})
    return policy.model_copy(
        update={
            "history_cap_tokens": cap,
            "window": window,
            "drop_groups": True,
            "context_window": policy.context_window or 10**9,
        }
    )


def shrink_history(
    messages: list[ModelMessage], target_tokens: int, *, policy: Policy, model: str | None
) -> Shrunk:
    """``messages`` governed down to ``target_tokens`` of history, oldest first, pairs intact."""
    before = _history_tokens(messages, model)
    governed = govern(messages, _recovery_policy(policy, max(1, target_tokens)), model=model)
    report = governed.report
    return Shrunk(
        messages=governed.messages,
        target_tokens=target_tokens,
        tokens_before=before,
        tokens_after=report.tokens_after - report.system_tokens,
        messages_before=len(messages),
        messages_after=len(governed.messages),
    )


class RecoveryEvent(BaseModel):
    """One recovery: the overflow that caused it and the shrink that answered it."""

    model_config = ConfigDict(frozen=True)

    retry: int
    error: str
    target_tokens: int
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int


@dataclass
class OverflowRecovery(AbstractCapability[Any]):
    """A capability that retries a request refused for its length with a smaller history.

    Put it after ``ContextGovernor`` in ``capabilities`` (or let the governor hold one), so the
    shrink applies to the governed request.
    """

    policy: Policy = field(default_factory=Policy)
    max_retries: int = DEFAULT_MAX_RETRIES
    min_shrink: float = 0.25
    """Share of the history removed by a retry when the error states no sizes."""
    max_shrink: float = 0.6
    """Most a single retry removes, whatever the error states."""
    tokenizer_model: str | None = None
    on_recovery: Callable[[RecoveryEvent], None] | None = None
    events: list[RecoveryEvent] = field(default_factory=list, init=False, repr=False)
    _targets: dict[tuple[str | None, int], list[int]] = field(
        default_factory=dict, init=False, repr=False
    )
    _learned: dict[str | None, int] = field(default_factory=dict, init=False, repr=False)
    """Per run: the history size (tokens) a shrunk request went through at."""

    def __post_init__(self) -> None:
        if not 0 < self.min_shrink <= self.max_shrink < 1:
            raise ValueError("shrinks must satisfy 0 < min_shrink <= max_shrink < 1")
        if self.max_retries < 0:
            raise ValueError("max_retries must not be negative")

    def _key(self, ctx: RunContext[Any]) -> tuple[str | None, int]:
        return (ctx.run_id, ctx.run_step)

    def _model(self, request_context: ModelRequestContext) -> str:
        return self.tokenizer_model or request_context.model.model_name

    def _share(self, error: Exception, retry: int) -> float:
        """Share of the history retry ``retry`` (from 0) removes. It escalates: the stated
        sizes' share (else ``min_shrink``) is doubled on each retry, within ``max_shrink``, and
        the last retry sends the least the policy allows (what must stay), so the retries
        reach a request that fits whatever the overflow, if any can."""
        if retry >= self.max_retries - 1:
            return 1.0
        sizes = stated_sizes(error)
        if sizes is None:
            wanted = self.min_shrink
        else:
            limit, size = sizes
            wanted = 1 - (limit / size) * 0.9 if size else self.min_shrink
        wanted *= float(2**retry)
        return min(self.max_shrink, max(self.min_shrink, wanted))

    async def wrap_run(
        self, ctx: RunContext[Any], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        """Forget what the run learned when it ends, however it ends."""
        try:
            return await handler()
        finally:
            self._learned.pop(ctx.run_id, None)
            for key in [k for k in self._targets if k[0] == ctx.run_id]:
                del self._targets[key]

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """On a retry, send the history shrunk to the target the last overflow set; after a
        retry went through, send every later request of the run within the size that worked."""
        targets = self._targets.get(self._key(ctx))
        target = targets[-1] if targets else self._learned.get(ctx.run_id)
        if target is not None:
            model = self._model(request_context)
            if targets or _history_tokens(request_context.messages, model) > target:
                shrunk = shrink_history(
                    request_context.messages, target, policy=self.policy, model=model
                )
                request_context.messages = shrunk.messages
        return request_context

    async def after_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        response: ModelResponse,
    ) -> ModelResponse:
        """The request went through: forget its retries, and remember the size that worked."""
        targets = self._targets.pop(self._key(ctx), None)
        if targets:
            learned = self._learned.get(ctx.run_id)
            self._learned[ctx.run_id] = (
                targets[-1] if learned is None else min(learned, targets[-1])
            )
        return response

    async def on_model_request_error(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        error: Exception,
    ) -> ModelResponse:
        """An overflow within the retry budget becomes another, smaller attempt."""
        key = self._key(ctx)
        targets = self._targets.setdefault(key, [])
        if not is_context_overflow(error) or len(targets) >= self.max_retries:
            self._targets.pop(key, None)
            raise error
        model = self._model(request_context)
        current = _history_tokens(request_context.messages, model)
        target = int(current * (1 - self._share(error, len(targets))))
        shrunk = shrink_history(request_context.messages, target, policy=self.policy, model=model)
        if not shrunk.changed:
            # Nothing left that may be removed: retrying would fail the same way.
            self._targets.pop(key, None)
            raise error
        targets.append(target)
        event = RecoveryEvent(
            retry=len(targets),
            error=f"{type(error).__name__}: {error}"[:500],
            target_tokens=target,
            tokens_before=shrunk.tokens_before,
            tokens_after=shrunk.tokens_after,
            messages_before=shrunk.messages_before,
            messages_after=shrunk.messages_after,
        )
        self.events.append(event)
        if self.on_recovery is not None:
            self.on_recovery(event)
        raise RetryModelRequest()
