"""Caps: eviction and truncation of each part past the policy's limits, and a message's governed
version (its caps, and the placeholders of the results masking replaces).

Caps are planned as rules and applied to a message only when its tokens are needed (see
``Work.materialise``); each governed part is cached on the original, so the next call on the
same history finds it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

from pydantic_ai.messages import ModelMessage, TextPart, UserPromptPart

from ..caches import memory
from ..counting import Part, cached_part_tokens, part_cache
from ..facts import MessageFacts
from ..parts import (
    Transform,
    marked,
    masked_version,
    measure,
    plain_call,
    plain_output,
    rebuilt,
    tool_output_text,
    with_content,
)
from ..policy import Policy, Truncation
from ..tokens import MESSAGE_OVERHEAD, Tokenizer
from .evict import eviction_ref, preview
from .truncate import truncate_args, truncate_text


class Work(Protocol):
    """What capping reads of a plan (the working state of ``ctxhub.governance._work``, which
    calls into this module to govern a message)."""

    policy: Policy
    tokenizer: Tokenizer
    turn_start: int
    latest_prompt: int | None
    token_ids: dict[int, tuple[str, list[int]]]

    def exempt(self, position: int) -> bool: ...


def governed_version(
    work: Work, position: int, message: ModelMessage, facts: MessageFacts, masked: frozenset[int]
) -> tuple[ModelMessage, int, tuple[tuple[int, Transform], ...]]:
    """A message with its ``masked`` results replaced by placeholders (or the long values of its
    ``masked`` calls) and every other part capped: the message, its tokens and the changes by
    part number."""
    changes: list[tuple[int, Transform]] = []
    for number, part in enumerate(message.parts):
        transform: Transform | None = None
        if number in masked:
            transform = masked_version(part, facts.part_tokens[number], work.tokenizer)
        if transform is None:  # not masked, or nothing long enough to mask (a call)
            transform = cap(work, position, number, part, facts.part_tokens[number])
        if transform is not None:
            changes.append((number, transform))
    if not changes:
        return message, facts.tokens, ()
    parts = list(message.parts)
    counts = list(facts.part_tokens)
    for number, transform in changes:
        parts[number] = transform.part
        counts[number] = transform.tokens
    return rebuilt(message, parts), MESSAGE_OVERHEAD + sum(counts), tuple(changes)


def _in_scope(work: Work, position: int, scope: str) -> bool:
    return scope == "all" or position < work.turn_start


def cap(work: Work, position: int, number: int, part: Part, tokens: int) -> Transform | None:
    """The capped version of one part (evicted or truncated), None when no cap applies."""
    policy = work.policy
    output = plain_output(part)
    if output is not None:
        eviction = policy.eviction
        truncation = policy.tool_output
        evict = (
            eviction.threshold_tokens is not None
            and 0 < eviction.threshold_tokens < tokens
            and _in_scope(work, position, eviction.scope)
        )
        truncate = (
            truncation.limit is not None
            and 0 < truncation.limit < measure(tokens, truncation, output)
            and _in_scope(work, position, truncation.scope)
        )
        if not (evict or truncate) or marked(output) or work.exempt(position):
            return None
        return _cached(work, output, tokens, evict, truncation if truncate else None)
    call = plain_call(part)
    if call is not None:
        # Large arguments (a file written in full) are cut like outputs, by the same limit.
        truncation = policy.tool_output
        if (
            not truncation.limit
            or not _in_scope(work, position, truncation.scope)
            or truncation.limit >= measure(tokens, truncation, call)
            or work.exempt(position)
        ):
            return None
        return _cached(work, call, tokens, False, truncation)
    if isinstance(part, UserPromptPart | TextPart) and isinstance(part.content, str):
        truncation = policy.text
        if (
            truncation.limit is None
            or truncation.limit >= measure(tokens, truncation, part)
            or not _in_scope(work, position, truncation.scope)
            or (position == work.latest_prompt and isinstance(part, UserPromptPart))
            or work.exempt(position)
        ):
            return None
        return _cached(work, part, tokens, False, truncation)
    return None


def _cached(
    work: Work, part: Part, tokens: int, evict: bool, truncation: Truncation | None
) -> Transform | None:
    eviction = work.policy.eviction
    key = (
        "cap",
        work.tokenizer.encoding_name,
        eviction if evict else None,
        truncation,
    )
    values = part_cache(part)
    if key in values:
        cached: Transform | None = values[key]
        return cached
    result = _compute(work, part, tokens, eviction if evict else None, truncation)
    values[key] = result
    return result


def _compute(
    work: Work, part: Part, tokens: int, eviction: Any, truncation: Truncation | None
) -> Transform | None:
    output = plain_output(part)
    call = plain_call(part)
    new: Part
    if call is not None:
        assert truncation is not None
        assert truncation.limit is not None
        # The arguments' token ids (if kept) are of their whole JSON: of no use to cut it.
        work.token_ids.pop(id(part), None)
        args = truncate_args(
            call.args,
            truncation.limit,
            unit=truncation.unit,
            strategy=truncation.strategy,
            tokenizer=work.tokenizer,
            line_count=truncation.line_count,
        )
        if args is None:
            return None
        new = replace(call, args=args)
    elif output is not None:
        text = tool_output_text(output)
        if text is None:
            return None
        if eviction is not None:
            ref = eviction_ref(text)
            shown = preview(text, ref, tokens, eviction)
            new = with_content(output, shown, {"evicted": ref})
            count = cached_part_tokens(new, work.tokenizer)
            if count < tokens:
                return Transform(new, count, "evicted", "evict", ref, text)
        if truncation is None:
            return None
        cut = _truncate(work, output, text, truncation)
        if cut is None:
            return None
        new = with_content(output, cut)
    else:
        assert isinstance(part, UserPromptPart | TextPart)
        assert truncation is not None
        assert isinstance(part.content, str)
        cut = _truncate(work, part, part.content, truncation)
        if cut is None:
            return None
        new = replace(part, content=cut)
    count = cached_part_tokens(new, work.tokenizer)
    if count >= tokens:
        return None
    return Transform(new, count, "truncated", "truncate")


def _truncate(work: Work, part: Part, text: str, truncation: Truncation) -> str | None:
    assert truncation.limit is not None
    # Taken out: the truncated version is cached on the part, so its ids are not needed again.
    known = work.token_ids.pop(id(part), None)
    ids = known[1] if known is not None and known[0] is text else None
    return truncate_text(
        text,
        truncation.limit,
        unit=truncation.unit,
        strategy=truncation.strategy,
        tokenizer=work.tokenizer,
        line_count=truncation.line_count,
        token_ids=ids,
    )


def smallest_cap(policy: Policy) -> float:
    """No part at or below this many tokens can be evicted or truncated."""
    limits: list[float] = []
    for truncation in (policy.tool_output, policy.text):
        if truncation.limit:
            limits.append(truncation.limit if truncation.unit == "tokens" else 0)
    if policy.eviction.threshold_tokens:
        limits.append(policy.eviction.threshold_tokens)
    return min(limits, default=float("inf"))


def cap_key(policy: Policy, encoding: str) -> int:
    """A small int standing for the settings that decide a message's governed version."""
    # Hashing the settings (pydantic models) costs more than the rest of a warm call's set-up,
    # so the key is remembered per policy object (kept alive with it; policies are few).
    by_policy = memory.cap_keys_by_policy
    known = by_policy.get((id(policy), encoding))
    if known is not None and known[0] is policy:
        return known[1]
    settings = (
        encoding,
        policy.tool_output,
        policy.text,
        policy.eviction,
        policy.window.protected_tools,
    )
    key = memory.cap_keys.setdefault(settings, len(memory.cap_keys))
    if len(by_policy) >= 64:
        by_policy.clear()
    by_policy[(id(policy), encoding)] = (policy, key)
    return key
