"""Repeated reads de-duplicated: an older copy of an output seen again becomes a reference.

Agents read the same file again and run the same command again; every copy costs its full
size in every later request. When the same tool returned the same text more than once, each
older copy is replaced by one line naming the call of the newest copy sent whole — nothing is
lost, that copy is in the request as it was:

    [same output as the later read_file call c42 — ~5200 tokens]

With ``Dedupe.keys``, a later read of the same resource (the same path, say) supersedes an older
read even when what it returned changed: the older copy is stale.

    [superseded by the later read_file call c42 of the same path — ~5200 tokens]

It runs after the window and group dropping, on what they kept. The target is the newest later
copy the request carries as the tool's text (not masked, evicted or left out): a reference to
something the model cannot see would lose the output. A copy of the same output is replaced
only when that target holds all of it (sent whole, or truncated to the same text); an older
read of a resource read again is stale, and is replaced whatever the later read shows. Outputs
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
    references to the newest later copy in the request; the number replaced.

    Every target is chosen before anything is replaced: the result then holds no two copies a
    second pass would find (governing it again changes nothing).
    """
    minimum = work.policy.dedupe.min_tokens
    chains = work.duplicates
    newest = _newest_present(work, chains)
    chosen: list[tuple[Copy, Copy]] = []
    for older, target in newest.items():
        position, number = older
        if target is None or not work.kept[position] or work.exempt(position):
            continue
        work.materialise(position)
        state = work.states_of(position)[number]
        if state.tokens_after <= minimum or state.action not in _REPLACEABLE:
            continue
        if _same(work, older, target) and not _holds_as_much(work, older, target):
            continue
        chosen.append((older, target))
    replaced = 0
    for (position, number), (later, later_number) in chosen:
        state = work.states_of(position)[number]
        output = plain_output(work.message_at(later).parts[later_number])
        assert output is not None
        transform = reference(
            work.message_at(position).parts[number],
            state.tokens_after,
            output.tool_call_id,
            work,
            same=_same(work, (position, number), (later, later_number)),
        )
        if transform is not None:
            work.set_part(position, number, transform)
            replaced += 1
    return replaced


def _newest_present(work: Work, chains: dict[Copy, Copy]) -> dict[Copy, Copy | None]:
    """For each older copy, the newest later copy of its chain that the request carries as the
    tool's text (whole or truncated; not masked, evicted or left out)."""
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
            if found is None and _present(work, later):
                found = later
            best[older] = found
    return best


def _present(work: Work, copy: Copy) -> bool:
    position, number = copy
    if not work.kept[position]:
        return False
    work.materialise(position)
    if work.states_of(position)[number].action not in _REPLACEABLE:
        return False
    output = plain_output(work.message_at(position).parts[number])
    return output is not None and not marked(output) and tool_output_text(output) is not None


def _holds_as_much(work: Work, older: Copy, later: Copy) -> bool:
    """Whether the later copy of the same output carries all the older copy does: it is sent
    whole, or both are truncated to the same text. (A read superseded by a later read of the
    same resource is stale, and goes whatever the later copy shows.)"""
    if work.states_of(later[0])[later[1]].action != "truncated":
        return True
    text = getattr(work.message_at(older[0]).parts[older[1]], "content", None)
    later_text = getattr(work.message_at(later[0]).parts[later[1]], "content", None)
    return text == later_text


# A result pair repair moved next to its call is synthesized in the working state where it now
# sits, but its text is the tool's own. A truncated copy is the tool's text too: governed again,
# it is an output like any other (truncating it again changes nothing), so it must be a target
# the first time as it will be the second.
_REPLACEABLE = frozenset({"kept", "synthesized", "truncated"})


def _same(work: Work, older: Copy, later: Copy) -> bool:
    return _digest(work, *older) == _digest(work, *later)


def _digest(work: Work, position: int, number: int) -> str | None:
    """The digest of the output at ``number`` in a position's message (what makes two outputs
    the same)."""
    fact = work.facts[position]
    for output, digest in zip(fact.outputs, fact.output_digests, strict=True):
        if output == number:
            return digest
    return None
