"""Repeated reads de-duplicated: an older copy of an output seen again becomes a reference.

Agents read the same file again and run the same command again; every copy costs its full
size in every later request. When the same tool returned the same text more than once, each
older copy is replaced by one line naming the newest copy's call — nothing is lost, the newest
copy is in the request as it was:

    [same output as the later read_file call c42 — ~5200 tokens]

It runs after the window and group dropping, on what they kept, and only where the newest copy
is sent whole (kept, not masked, truncated or evicted), or where both copies are truncated to
the same text: a reference to something the model cannot see would lose the output. Outputs
of at most ``Dedupe.min_tokens`` are left alone (a reference would save little), as are pinned
messages and protected tools. Governing the result again changes nothing: a reference is
governance's own part, not an output.
"""

from __future__ import annotations

from .._work import Work
from ..counting import Part, cached_part_tokens, part_cache
from ..parts import Transform, marked, plain_output, tool_output_text, with_content


def reference(part: Part, tokens: int, newest_call: str, work: Work) -> Transform | None:
    """The reference standing for an older copy of an output; None when it would not be
    shorter or the part is not an ordinary output."""
    output = plain_output(part)
    if output is None or marked(output):
        return None
    values = part_cache(output)
    key = ("dedupe", work.tokenizer.encoding_name, newest_call, tokens)
    if key in values:
        cached: Transform | None = values[key]
        return cached
    text = f"[same output as the later {output.tool_name} call {newest_call} — ~{tokens} tokens]"
    new = with_content(output, text, {"duplicate_of": newest_call})
    count = cached_part_tokens(new, work.tokenizer)
    result = None if count >= tokens else Transform(new, count, "deduplicated", "dedupe")
    values[key] = result
    return result


def dedupe(work: Work) -> int:
    """Replace older copies of repeated outputs by references; the number replaced."""
    minimum = work.policy.dedupe.min_tokens
    replaced = 0
    for (position, number), (newest, newest_number) in work.duplicates.items():
        if not (work.kept[position] and work.kept[newest]):
            continue
        if work.exempt(position):
            continue
        work.materialise(position)
        work.materialise(newest)
        state = work.states_of(position)[number]
        newest_action = work.states_of(newest)[newest_number].action
        if state.tokens_after <= minimum:
            continue
        part = work.message_at(position).parts[number]
        newest_part = work.message_at(newest).parts[newest_number]
        newest_output = plain_output(newest_part)
        if newest_output is None or tool_output_text(newest_output) is None:
            continue
        if not (
            (state.action in _WHOLE and newest_action in _WHOLE)
            # Truncated alike, the copies are the same text again: governing the result would
            # find them repeated.
            or (
                state.action == newest_action == "truncated"
                and getattr(part, "content", None) == newest_output.content
            )
        ):
            continue
        transform = reference(part, state.tokens_after, newest_output.tool_call_id, work)
        if transform is not None:
            work.set_part(position, number, transform)
            replaced += 1
    return replaced


# A result pair repair moved next to its call is synthesized in the working state where it now
# sits, but its text is the tool's own: it counts as sent whole, as it will when governed again.
_WHOLE = frozenset({"kept", "synthesized"})
