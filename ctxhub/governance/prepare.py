"""How a Governor knows a history: one left-to-right pass, extended rather than repeated.

An agent governs the same history plus a message or two before every request. The Governor
keeps the passes over the histories it governed last (``WorkCache``), recognises the next
history as one of them grown, and looks only at the new messages. Everything kept follows from
the histories themselves, so dropping it changes no request, only what the next one costs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest

from .facts import MessageFacts, message_facts
from .policy import Policy
from .prepared import Prepared, WorkCache
from .reads import Reads
from .report import PartTotals, ReportCache
from .steps.pairing import Pairing
from .tokens import Tokenizer

# The histories a Governor governed last (``WorkCache.histories``), most recent first: an
# agent governs the same list plus a message or two before every request, so the shared prefix
# is recognised by identity (a few C-level passes) and only the new messages are looked at. Two
# entries let an agent's history survive one other history governed in between (a dashboard,
# another session); more would keep more histories, with all their text, alive. A history that
# extends none of them (shrunk, reordered, a message replaced, or one of its last messages given
# another parts list) is prepared from scratch.
_KEEP_LAST = 2

# How many of a remembered history's last messages are checked for an edit in place. An agent
# run edits only its latest request (pydantic-ai adds instructions and capability parts to it);
# an older message changes by being replaced, which the identity check sees. Reading every
# message's parts list instead would cost a pass over the history's objects on every call.
# Messages are values: a caller changes an older one by replacing it, as pydantic-ai does.
EDITABLE = 16


# Token ids of long texts not truncated yet (``WorkCache.token_ids``), newest
# first: the current turn's outputs are tokenised when they arrive and truncated only once a
# later turn makes them older, a call or several later. Truncating takes an entry out; the
# oldest go first beyond the cap (ids are Python ints, about 36 bytes a token, so 1M tokens hold
# about 36 MB).
_KEEP_IDS_TOKENS = 1_000_000


def truncated_above(policy: Policy) -> float:
    """Below how many tokens a text's ids are not worth keeping (inf: token truncation is off).

    Half the smallest token limit: a part is truncated by its count with framing, which the
    text alone may be a little under.
    """
    limits = [
        truncation.limit
        for truncation in (policy.tool_output, policy.text)
        if truncation.enabled and truncation.unit == "tokens" and truncation.limit
    ]
    return min(limits, default=float("inf")) / 2


def newest_ids(
    token_ids: dict[int, tuple[str, list[int]]],
) -> dict[int, tuple[str, list[int]]]:
    """The first (newest) entries of ``token_ids`` holding at most ``_KEEP_IDS_TOKENS`` ids."""
    kept: dict[int, tuple[str, list[int]]] = {}
    room = _KEEP_IDS_TOKENS
    for key, entry in token_ids.items():
        room -= len(entry[1])
        if room < 0:
            break
        kept[key] = entry
    return kept


# Whether a history begins with a remembered one: its last remembered message must be the same
# object, and the rest is decided by list comparisons: C-level, and an item that is the same
# object as the remembered one is equal without being looked at (a few nanoseconds an item,
# where a Python-level identity check costs tens). An item that is not the same object is
# compared by value: a message (or parts list) replaced by an equal copy is as good as the same,
# since everything carried from the remembered history follows from its value (the governed
# versions carried by position are checked by identity of their facts where they are taken;
# see ``Work.seed``).


def _extends(previous: Prepared, messages: list[ModelMessage]) -> bool:
    """Whether ``messages`` begins with ``previous``'s, its last messages not edited since."""
    if previous.messages is None or previous.tail is None:
        return False
    size = len(previous.messages)
    if size > len(messages):
        return False
    if size == 0:
        return True
    return (
        previous.messages[-1] is messages[size - 1]
        and _starts_with(messages, previous.messages)
        and _tail(messages[max(size - EDITABLE, 0) : size]) == previous.tail
    )


def _tail(messages: list[ModelMessage]) -> list[tuple[Sequence[Any], int]]:
    """Each message's parts list and its length."""
    return [(message.parts, len(message.parts)) for message in messages]


def _ends_like(previous: Prepared, facts: Sequence[MessageFacts]) -> bool:
    """Whether ``facts`` may begin with ``previous``'s facts: they are as many or more, and the
    last of them is the same object."""
    size = previous.size
    return size <= len(facts) and (size == 0 or previous.facts[size - 1] is facts[size - 1])


def _extends_facts(
    recent: list[Prepared], facts: Sequence[MessageFacts]
) -> tuple[Prepared | None, list[MessageFacts], bool]:
    """The remembered history ``facts`` extends, if any (the longest); ``facts`` as a list of
    this call's own; and whether this call took the remembered history over (``_take``).

    A remembered history taken over whose result is read no more has its facts list grown in
    place to ``facts``: proving that ``facts`` begins with it is then one list comparison,
    with no copy of a long history's facts on every call.
    """
    if not isinstance(facts, list):
        facts = list(facts)  # compared by list comparisons
    held: list[MessageFacts] | None = None
    for candidate in sorted(
        (c for c in recent if _ends_like(c, facts)), key=attrgetter("size"), reverse=True
    ):
        taken = _take(candidate)
        if taken and _unread(candidate):
            if _grown(candidate, facts):
                return candidate, candidate.facts, True
        else:
            if held is None:
                held = list(facts)
            # A list another call grew in place is left to it.
            if len(candidate.facts) == candidate.size and _starts_with(held, candidate.facts):
                return candidate, held, taken
        if taken:
            _untake(candidate)
    return None, list(facts) if held is None else held, False


def _grown(previous: Prepared, facts: Sequence[MessageFacts]) -> bool:
    """Whether ``facts`` begins with ``previous``'s facts, growing ``previous``'s list to
    ``facts`` in place if it does (``previous`` is taken over and its result read no more)."""
    items = previous.facts
    items += facts[previous.size :]
    if items == facts:  # C-level; an item that is the same object is not looked at
        return True
    del items[previous.size :]
    return False


def _starts_with(items: list[Any], prefix: Sequence[Any]) -> bool:
    """Whether ``items`` (a list of this call's own) begins with ``prefix``, by one list
    comparison; the items past the prefix are set aside meanwhile rather than the prefix
    copied (a copy would touch every item of a long history again)."""
    size = len(prefix)
    if size == len(items):
        return items == prefix
    rest = items[size:]
    del items[size:]
    try:
        return items == prefix
    finally:
        items.extend(rest)


def prepare(
    messages: Sequence[ModelMessage],
    tokenizer: Tokenizer,
    cache: WorkCache,
    token_ids: dict[int, tuple[str, list[int]]],
    keep_above: float = 0,
) -> Prepared:
    """Facts, pairing and the latest instructions of a history; long texts' token ids are kept
    for the newest few longer than ``keep_above`` tokens (shorter ones are never truncated)."""
    room = [4_000_000]

    def sink(part: Any, text: str, ids: list[int]) -> None:
        # Only the newest outputs can survive the window, so only theirs are worth keeping.
        if room[0] > 0 and len(ids) > keep_above:
            token_ids[id(part)] = (text, ids)
            room[0] -= len(ids)

    held = list(messages)
    recent = cache.histories
    previous = _longest(c for c in recent if _extends(c, held))
    known = previous.size if previous is not None else 0
    taken = previous is not None and _take(previous)
    # Newest first, so the token ids kept for truncation are the newest outputs'.
    new = [message_facts(held[p], tokenizer, sink) for p in range(len(held) - 1, known - 1, -1)]
    if previous is None:
        facts = []
    elif taken and _unread(previous):
        facts = previous.facts  # grown in place (see ``_extends_facts``)
    else:
        facts = previous.facts[:known]
    facts.extend(reversed(new))
    # Read from the messages, not their cached facts: an agent run sets a request's
    # instructions after the request is in the history.
    instructions_at = previous.instructions_at if previous is not None else None
    for position in range(known, len(held)):
        message = held[position]
        if isinstance(message, ModelRequest) and message.instructions is not None:
            instructions_at = position
    return _prepared(recent, previous, taken, facts, instructions_at, held, _tail(held[-EDITABLE:]))


def prepare_stored(facts: Sequence[MessageFacts], cache: WorkCache) -> Prepared:
    """``prepare`` from facts the caller holds: the messages are not read."""
    recent = cache.histories
    previous, held, taken = _extends_facts(recent, facts)
    instructions_at = previous.instructions_at if previous is not None else None
    for position in range(previous.size if previous is not None else 0, len(held)):
        if held[position].instructions:
            instructions_at = position
    return _prepared(recent, previous, taken, held, instructions_at, None, None)


def _longest(candidates: Iterable[Prepared]) -> Prepared | None:
    """The remembered history with the most messages among ``candidates``."""
    return max(candidates, key=attrgetter("size"), default=None)


def _prepared(
    recent: list[Prepared],
    previous: Prepared | None,
    taken: bool,
    facts: list[MessageFacts],
    instructions_at: int | None,
    messages: list[ModelMessage] | None,
    tail: list[tuple[Sequence[Any], int]] | None,
) -> Prepared:
    """The pass over ``facts`` extended from ``previous``'s (``taken``: taken over, see
    ``_take``), remembered in ``recent``."""
    # The pairing's mappings are taken over as the containers below are; another call
    # extending the same history later pairs from the start, as the taker grew them.
    carried = previous.pairing if previous is not None and taken else Pairing()
    pairing = carried.extended(facts, in_place=taken)
    if taken:
        assert previous is not None
        # Extended in place rather than copied: the containers grow with the history, and
        # copying them on every call would be a pass over it.
        known = previous.size
        system_at, aborted_at = previous.system_at, previous.aborted_at
        notices_at, latest_call = previous.notices_at, previous.latest_call
        first_text, outputs_at, calls_at = (
            previous.first_text,
            previous.outputs_at,
            previous.calls_at,
        )
        tokens = previous.tokens
        newest_output, older_copies = previous.newest_output, previous.older_copies
    else:
        known = 0
        system_at, aborted_at, notices_at, latest_call = [], [], [], {}
        first_text, outputs_at, calls_at = None, None, None
        tokens = 0
        newest_output, older_copies = {}, []
    if previous is not None:
        reports = previous.reports
        totals = previous.totals.extended(facts, previous.size, in_place=taken)
    else:
        reports, totals = ReportCache(), PartTotals().extended(facts, 0, in_place=True)
    for position in range(known, len(facts)):
        fact = facts[position]
        tokens += fact.tokens
        if fact.system_tokens:
            system_at.append(position)
        if fact.aborted:
            aborted_at.append(position)
        if fact.notice:
            notices_at.append(position)
        if fact.request:
            if fact.outputs:
                outputs_at = (position if outputs_at is None else outputs_at[0], position)
            digests = fact.output_digests
            for at, digest in enumerate(digests):
                # Which copy of the digest in this message: parallel calls may return one text.
                copy = (position, digest, digests[:at].count(digest) if at else 0)
                older = newest_output.get(digest)
                if older is not None:
                    older_copies.append((older, copy))
                newest_output[digest] = copy
        else:
            for name in fact.tool_names:
                latest_call[name] = position
            if fact.call_ids:
                calls_at = (position if calls_at is None else calls_at[0], position)
            if first_text is None and fact.text_response:
                first_text = position
    prepared = Prepared(
        messages,
        len(facts),
        tail,
        facts,
        pairing,
        instructions_at,
        system_at,
        aborted_at,
        notices_at,
        latest_call,
        first_text,
        outputs_at,
        calls_at,
        newest_output,
        older_copies,
        tokens,
        previous.reads if taken and previous is not None else Reads(),
        reports,
        totals,
        extends=previous if taken else None,
        follows=None if previous is None else previous.serial,
        grows=previous is not None and facts is previous.facts,
    )
    # The history extended is superseded by this one; the others stay, newest first.
    recent[:] = [prepared, *(c for c in recent if c is not previous)][:_KEEP_LAST]
    return prepared


def _take(previous: Prepared) -> bool:
    """Whether this call may extend ``previous``'s containers in place: only one call may,
    once ``previous``'s own call is done; another that extends it later collects them afresh.
    (A Governor's calls are serialised, so no two calls take at once.)"""
    if previous.taken or previous.result is None:
        return False
    previous.taken = True
    return True


def _untake(previous: Prepared) -> None:
    """Give ``previous`` back: this call does not extend it after all."""
    previous.taken = False


def _unread(previous: Prepared) -> bool:
    """Whether nothing reads ``previous``'s lists any more: the result of its call is gone, or
    its report (which reads them when first asked for) is built. A history taken over may then
    have its lists grown in place."""
    if previous.result is None:
        return False  # its call is not done
    governed = previous.result()
    return governed is None or "report" in vars(governed)
