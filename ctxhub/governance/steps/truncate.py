"""Truncation of long text: head, tail or both (50/50), by tokens or characters, with an indicator.

The indicator states what was kept of how much, and the total line count, in the formats of
Duragent (001) and AgenticLoop (002):
``[truncated: kept first ~8000 of ~52000 tokens (head); 1234 lines total]``.
The result never exceeds the limit, indicator included, so truncating a truncated text again
changes nothing (governing twice is idempotent).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..policy import Strategy, Unit
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
