"""Observation masking (Duragent, 001): keep the first N and last M tool results, mask the rest.

The calls stay visible, so the model knows what it did; a masked result says how many tokens
were removed: ``[result masked — ~12000 tokens removed]``. Pinned messages, protected tools and
results governance already replaced (placeholders, previews) are left as they are.
"""

from __future__ import annotations

from .._work import Transform, Work, marked, plain_output, with_content
from ..counting import Part, cached_part_tokens, part_cache
from ..tokens import Tokenizer


def placeholder(part: Part, tokens: int, tokenizer: Tokenizer) -> Transform | None:
    """The masked version of a tool result."""
    output = plain_output(part)
    if output is None:
        return None
    values = part_cache(output)
    key = ("mask", tokenizer.encoding_name, tokens)
    if key in values:
        cached: Transform | None = values[key]
        return cached
    text = f"[result masked — ~{tokens} tokens removed]"
    new = with_content(output, text, {"masked": tokens})
    count = cached_part_tokens(new, tokenizer)
    result = None if count >= tokens else Transform(new, count, "masked", "mask")
    values[key] = result
    return result


def mask(work: Work) -> int:
    """Plan masking of the middle tool results; the number of results masked."""
    policy = work.policy.masking
    kept = work.kept
    results = [
        (position, number)
        for position, fact in enumerate(work.facts)
        if fact.outputs and kept[position]
        for number in fact.outputs
    ]
    middle = results[policy.keep_first : max(policy.keep_first, len(results) - policy.keep_last)]
    count = 0
    for position, number in middle:
        part = work.base[position].parts[number]
        if marked(part) or work.exempt(position):
            continue
        work.masked.setdefault(position, set()).add(number)
        work.invalidate(position)
        count += 1
    return count
