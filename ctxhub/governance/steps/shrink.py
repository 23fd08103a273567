"""Last resort: shrink the newest tool outputs proportionally until the history fits.

When truncation, masking, the window and group dropping leave the history over budget, the
tool outputs still kept in the current turn are cut further, each in proportion to its size,
by just enough to fit — never below a floor that still says what was cut. If even that is not
enough, the report says so and why.
"""

from __future__ import annotations

from itertools import compress
from typing import Any

from pydantic_ai.messages import ToolReturnPart

from .._work import Work
from ..counting import cached_part_tokens
from ..parts import Transform, marked, plain_output, tool_output_text, with_content
from ..policy import MIN_TRUNCATION_TOKENS
from .truncate import truncate_text


def _candidates(work: Work) -> list[tuple[int, int, ToolReturnPart[Any], int]]:
    found: list[tuple[int, int, ToolReturnPart[Any], int]] = []
    for position in range(work.turn_start, len(work.facts)):
        if not work.kept[position] or work.exempt(position) or not work.facts[position].result_ids:
            continue
        work.materialise(position)
        message = work.message_at(position)
        states = work.states_of(position)
        counts = work.facts[position].part_tokens
        for number, part in enumerate(message.parts):
            output = plain_output(part)
            if output is None or marked(output):
                continue
            tokens = states[number].tokens_after if states else counts[number]
            if tokens > MIN_TRUNCATION_TOKENS and tool_output_text(output) is not None:
                found.append((position, number, output, tokens))
    return found


def shrink(work: Work) -> int:
    """Shrink the newest tool outputs; the number of outputs shrunk."""
    # The excess must be exact: a kept message not governed yet counts at its size before caps
    # and masks, which would cut the outputs by more than needed, and by how much would depend
    # on what earlier steps happened to govern (a warm call would cut unlike a cold one).
    for position in compress(range(len(work.kept)), work.kept):
        work.materialise(position)
    shrunk: set[tuple[int, int]] = set()
    for _ in range(4):
        excess = work.total() - work.limit
        if excess <= 0:
            break
        candidates = _candidates(work)
        pool = sum(tokens - MIN_TRUNCATION_TOKENS for *_, tokens in candidates)
        if pool <= 0:
            break
        ratio = min(1.0, (excess + 8 * len(candidates)) / pool)
        for position, number, part, tokens in candidates:
            target = max(
                MIN_TRUNCATION_TOKENS,
                tokens - int((tokens - MIN_TRUNCATION_TOKENS) * ratio) - 8,
            )
            text = tool_output_text(part)
            assert text is not None
            # The part may carry more tokens than its text (an error is sent wrapped in JSON):
            # scale the text's limit by the share the part must keep.
            text_tokens = work.tokenizer.count(text)
            cut = truncate_text(
                text,
                max(MIN_TRUNCATION_TOKENS, text_tokens * target // tokens),
                unit="tokens",
                strategy=work.policy.tool_output.strategy,
                tokenizer=work.tokenizer,
                line_count=work.policy.tool_output.line_count,
            )
            if cut is None:
                continue
            new = with_content(part, cut)
            count = cached_part_tokens(new, work.tokenizer)
            if count < tokens:
                work.set_part(position, number, Transform(new, count, "truncated", "shrink"))
                shrunk.add((position, number))
    return len(shrunk)
