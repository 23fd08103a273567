"""Truncation of long text: head, tail or both (50/50), by tokens or characters, with an indicator.

The indicator states what was kept of how much, and the total line count, in the formats of
Duragent (001) and AgenticLoop (002):
``[truncated: kept first ~8000 of ~52000 tokens (head); 1234 lines total]``.
The result never exceeds the limit, indicator included, so truncating a truncated text again
changes nothing (governing twice is idempotent).

Tool-call arguments (a file written in full) are cut by their long string values, each with the
same indicator, so the arguments stay JSON of the same shape (see ``truncate_args``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pydantic_core

from ..policy import MIN_TRUNCATION_CHARS, MIN_TRUNCATION_TOKENS, Strategy, Unit
from ..tokens import Tokenizer

_WHERE = {"head": "first", "tail": "last", "both": "first+last"}


def indicator(strategy: Strategy, unit: Unit, kept: int, total: int, lines: int | None) -> str:
    """The marker telling the model what was cut."""
    text = f"[truncated: kept {_WHERE[strategy]} ~{kept} of ~{total} {unit} ({strategy})"
    if lines is not None:
        text += f"; {lines} lines total"
    return text + "]"


def _assemble(strategy: Strategy, head: str, tail: str, marker: str) -> str:
    if strategy == "head":
        return f"{head}\n{marker}"
    if strategy == "tail":
        return f"{marker}\n{tail}"
    return f"{head}\n{marker}\n{tail}"


def _split(strategy: Strategy, keep: int) -> tuple[int, int]:
    if strategy == "head":
        return keep, 0
    if strategy == "tail":
        return 0, keep
    return keep - keep // 2, keep // 2


def truncate_text(
    text: str,
    limit: int,
    *,
    unit: Unit,
    strategy: Strategy,
    tokenizer: Tokenizer,
    line_count: bool = True,
    token_ids: Sequence[int] | None = None,
    total_tokens: int | None = None,
) -> str | None:
    """``text`` cut to at most ``limit`` units with an indicator; None when it already fits.

    ``token_ids`` (the encoding of ``text``) spares tokenising the text again.
    """
    lines = text.count("\n") + 1 if line_count else None
    if unit == "chars":
        if len(text) <= limit:
            return None
        marker = indicator(strategy, unit, 0, len(text), lines)
        keep = max(0, limit - len(marker) - 2 - 12)
        marker = indicator(strategy, unit, keep, len(text), lines)
        head_n, tail_n = _split(strategy, keep)
        return _assemble(strategy, text[:head_n], text[len(text) - tail_n :], marker)

    ids = list(token_ids) if token_ids is not None else tokenizer.encode(text)
    total = len(ids) if ids is not None else (total_tokens or tokenizer.count(text))
    if total <= limit:
        return None
    keep = max(0, limit - tokenizer.count(indicator(strategy, unit, limit, total, lines)) - 4)
    for _ in range(4):
        marker = indicator(strategy, unit, keep, total, lines)
        head_n, tail_n = _split(strategy, keep)
        if ids is not None:
            head = tokenizer.decode(ids[:head_n]) if head_n else ""
            tail = tokenizer.decode(ids[len(ids) - tail_n :]) if tail_n else ""
        else:
            # bytes/4 fallback: four characters stand for a token.
            head = text[: head_n * 4]
            tail = text[len(text) - tail_n * 4 :] if tail_n else ""
        result = _assemble(strategy, head, tail, marker)
        over = tokenizer.count(result) - limit
        if over <= 0:
            return result
        # Re-tokenising at the cut can merge or split a few tokens; give them back and retry.
        keep = max(0, keep - over - 2)
    return indicator(strategy, unit, 0, total, lines)


INVALID_JSON = "INVALID_JSON"
"""The key pydantic-ai sends unparsable arguments under: ``{"INVALID_JSON": "<raw args>"}``."""

# An argument value this short is never cut, and none is cut shorter: room for the indicator
# (at most about 30 tokens, 90 characters) and a little of the value. A value cut once is then at
# most this long or the arguments fit the limit, so cutting them again changes nothing.
_SHORT: dict[Unit, int] = {"tokens": MIN_TRUNCATION_TOKENS, "chars": MIN_TRUNCATION_CHARS // 2}


def truncate_args(
    args: str | dict[str, Any] | None,
    limit: int,
    *,
    unit: Unit,
    strategy: Strategy,
    tokenizer: Tokenizer,
    line_count: bool = True,
) -> str | dict[str, Any] | None:
    """Tool-call arguments whose JSON fits ``limit`` units; None when they already fit.

    The long string values (at any depth) are cut with ``truncate_text``'s indicator, sharing
    what the rest of the JSON leaves of the limit: values shorter than their share are kept
    whole, the longer ones are cut to it (never below a floor holding the indicator). Keys,
    numbers, short strings and the nesting are kept, and so is the type: a dict stays a dict,
    a JSON string stays a (compact) JSON string. A string that is not a JSON object is sent as
    ``{"INVALID_JSON": "<raw args>"}`` (``BaseToolCallPart.args_as_json_str``), so the raw text
    is cut as that one value and stays a string. None too when nothing long enough to cut is
    left (arguments made of many short values).
    """
    if not args:
        return None
    if isinstance(args, dict):
        return _cut_values(args, limit, unit, strategy, tokenizer, line_count)
    try:
        parsed = pydantic_core.from_json(args)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raw = _cut_values({INVALID_JSON: args}, limit, unit, strategy, tokenizer, line_count)
        return None if raw is None else str(raw[INVALID_JSON])
    cut = _cut_values(parsed, limit, unit, strategy, tokenizer, line_count)
    return None if cut is None else _json(cut)


def _cut_values(
    args: dict[str, Any],
    limit: int,
    unit: Unit,
    strategy: Strategy,
    tokenizer: Tokenizer,
    line_count: bool,
) -> dict[str, Any] | None:
    def measure(text: str) -> int:
        return len(text) if unit == "chars" else tokenizer.count(text)

    total = measure(_json(args))
    if total <= limit:
        return None
    floor = _SHORT[unit]
    values: list[str] = []
    _strings(args, values)
    # The long values: their number among the values, size, size as JSON (escapes make it
    # larger) and token ids (to cut them without tokenising them again).
    long: list[tuple[int, int, int, list[int] | None]] = []
    for number, value in enumerate(values):
        if len(value) * 4 <= floor:
            continue  # short whatever the unit: a token takes a byte at least
        ids = tokenizer.encode(value) if unit == "tokens" else None
        size = len(value) if unit == "chars" else len(ids) if ids is not None else measure(value)
        if size > floor:
            long.append((number, size, max(measure(_json(value)) - 2, size), ids))
    if not long:
        return None

    def cut(share: int) -> dict[str, Any] | None:
        """The arguments with each long value larger than ``share`` as JSON cut to about it."""
        new = list(values)
        changed = False
        for number, size, encoded, ids in long:
            if encoded <= share:
                continue
            # The value is cut in its own unit: scale the share down by what escaping adds.
            short = truncate_text(
                values[number],
                max(floor, share * size // encoded),
                unit=unit,
                strategy=strategy,
                tokenizer=tokenizer,
                line_count=line_count,
                token_ids=ids,
                total_tokens=size,
            )
            if short is not None:
                new[number] = short
                changed = True
        if not changed:
            return None
        rebuilt: dict[str, Any] = _rebuilt(args, iter(new))
        return rebuilt

    # What the rest of the JSON (keys, framing, short values) leaves to the long values.
    budget = limit - (total - sum(encoded for _, _, encoded, _ in long))
    for _ in range(6):
        share = _share([encoded for _, _, encoded, _ in long], budget)
        if share <= floor:
            break
        result = cut(share)
        if result is None:
            return None
        over = measure(_json(result)) - limit
        if over <= 0:
            return result
        # Re-tokenising the cut values in the JSON can add a little; give it back.
        budget -= over
    # Not even the smallest cut fits: every long value is cut to the floor, so cutting the
    # result again changes nothing.
    return cut(0)


def _json(value: Any) -> str:
    """``value`` as the compact JSON a provider is sent (``args_as_json_str``)."""
    return pydantic_core.to_json(value).decode()


def _share(sizes: list[int], budget: int) -> int:
    """The largest share such that ``sizes``, each cut to it, sum to at most ``budget``."""
    remaining = budget
    ordered = sorted(sizes)
    for number, size in enumerate(ordered):
        left = len(ordered) - number
        if size * left > remaining:
            return max(remaining // left, 0)
        remaining -= size
    return ordered[-1]


def _strings(value: Any, found: list[str]) -> None:
    """The string values inside ``value`` (not the keys), depth first."""
    if isinstance(value, str):
        found.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            _strings(item, found)
    elif isinstance(value, list):
        for item in value:
            _strings(item, found)


def _rebuilt(value: Any, strings: Iterator[str]) -> Any:
    """``value`` with its string values taken from ``strings`` in ``_strings``'s order."""
    if isinstance(value, str):
        return next(strings)
    if isinstance(value, dict):
        return {key: _rebuilt(item, strings) for key, item in value.items()}
    if isinstance(value, list):
        return [_rebuilt(item, strings) for item in value]
    return value
