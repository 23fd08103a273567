"""Repeated reads de-duplicated: an older copy of an output seen again becomes a reference.

Agents read the same file again and run the same command again; every copy costs its full
size in every later request. When the same tool returned the same text more than once, each
older copy is replaced by one line naming the call of the newest copy sent whole — nothing is
lost, that copy is in the request as it was:

    [same output as the later read_file call c42 — ~5200 tokens]

With ``Dedupe.keys``, a later read of the same resource (the same path, say) supersedes an older
read even when what it returned changed: the older copy is stale.

    [superseded by the later read_file call c42 of the same path — ~5200 tokens]

It runs after the window and group dropping, on what they kept, and only where a later copy
is sent whole (kept, not masked, truncated or evicted), or where a later copy is truncated to
the same text: a reference to something the model cannot see would lose the output. Outputs
of at most ``Dedupe.min_tokens`` are left alone (a reference would save little), as are pinned
messages and protected tools. Governing the result again changes nothing: a reference is
governance's own part, not an output.
"""

from __future__ import annotations

from .._work import Work
from ..counting import Part, cached_part_tokens, part_cache
from ..parts import Transform, marked, plain_output, tool_output_text, with_content


def reference(
    part: Part, tokens: int, newest_call: str, work: Work, *, same: bool = True
) -> Transform | None:
    """The reference standing for an older copy of an output (``same``), or an older read of
    what a later call read again; None when it would not be shorter or the part is not an
    ordinary output."""
    output = plain_output(part)
    if output is None or marked(output):
        return None
    values = part_cache(output)
    key = ("dedupe", work.tokenizer.encoding_name, newest_call, tokens, same)
    if key in values:
        cached: Transform | None = values[key]
        return cached
    if same:
        text = (
            f"[same output as the later {output.tool_name} call {newest_call} — ~{tokens} tokens]"
        )
    else:
        names = "/".join(work.policy.dedupe.keys.get(output.tool_name, ()))
        text = (
            f"[superseded by the later {output.tool_name} call {newest_call} of the same "
            f"{names} — ~{tokens} tokens]"
        )
    new = with_content(output, text, {"duplicate_of": newest_call})
    count = cached_part_tokens(new, work.tokenizer)
    result = None if count >= tokens else Transform(new, count, "deduplicated", "dedupe")
    values[key] = result
    return result


Copy = tuple[int, int]
"""(position, part number) of an output."""


def dedupe(work: Work) -> int:
    """Replace older copies of repeated outputs, and older reads of a resource read again, by
    references to the newest later copy sent whole; the number replaced.

    Every target is chosen before anything is replaced: the result then holds no two copies a
    second pass would find (governing it again changes nothing).
    """
    minimum = work.policy.dedupe.min_tokens
    chains = work.duplicates
    newest_whole = _newest_whole(work, chains)
    chosen: list[tuple[Copy, Copy]] = []
    for older in chains:
        position, number = older
        if not work.kept[position] or work.exempt(position):
            continue
        work.materialise(position)
        state = work.states_of(position)[number]
        if state.tokens_after <= minimum:
            continue
        target = newest_whole.get(older)
        if target is not None and state.action in _REPLACEABLE:
            chosen.append((older, target))
        elif target is None and state.action == "truncated":
            # Truncated alike, the copies are the same text again: governing the result would
            # find them repeated.
            alike = _newest_truncated_alike(work, chains, older)
            if alike is not None:
                chosen.append((older, alike))
    replaced = 0
    for (position, number), (later, later_number) in chosen:
        state = work.states_of(position)[number]
        output = plain_output(work.message_at(later).parts[later_number])
        assert output is not None
        same = _digest(work, position, number) == _digest(work, later, later_number)
        transform = reference(
            work.message_at(position).parts[number],
            state.tokens_after,
            output.tool_call_id,
            work,
            same=same,
        )
        if transform is not None:
            work.set_part(position, number, transform)
            replaced += 1
    return replaced


def _newest_whole(work: Work, chains: dict[Copy, Copy]) -> dict[Copy, Copy | None]:
    """For each older copy, the newest later copy of its chain that is sent whole."""
    best: dict[Copy, Copy | None] = {}
    for start in chains:
        path: list[Copy] = []
        copy = start
        while copy in chains and copy not in best:
            path.append(copy)
            copy = chains[copy]
        found = best.get(copy)
        for older in reversed(path):
            later = chains[older]
            if found is None and _sent_whole(work, later):
                found = later
            best[older] = found
    return best


def _newest_truncated_alike(work: Work, chains: dict[Copy, Copy], older: Copy) -> Copy | None:
    """The newest later copy of ``older``'s chain truncated to the same text."""
    text = getattr(work.message_at(older[0]).parts[older[1]], "content", None)
    found = None
    copy = older
    while copy in chains:
        copy = chains[copy]
        position, number = copy
        if not work.kept[position]:
            continue
        work.materialise(position)
        if work.states_of(position)[number].action != "truncated":
            continue
        output = plain_output(work.message_at(position).parts[number])
        if output is not None and output.content == text:
            found = copy
    return found


def _sent_whole(work: Work, copy: Copy) -> bool:
    position, number = copy
    if not work.kept[position]:
        return False
    work.materialise(position)
    if work.states_of(position)[number].action not in _WHOLE:
        return False
    output = plain_output(work.message_at(position).parts[number])
    return output is not None and not marked(output) and tool_output_text(output) is not None


# A result pair repair moved next to its call is synthesized in the working state where it now
# sits, but its text is the tool's own: it counts as sent whole, as it will when governed again.
_WHOLE = frozenset({"kept", "synthesized"})
# A copy truncated (or a stale read) is replaced as well: the copy sent whole holds all of it.
_REPLACEABLE = _WHOLE | {"truncated"}


def _digest(work: Work, position: int, number: int) -> str | None:
    """The digest of the output at ``number`` in a position's message (what makes two outputs
    the same)."""
    fact = work.facts[position]
    for output, digest in zip(fact.outputs, fact.output_digests, strict=True):
        if output == number:
            return digest
    return None
