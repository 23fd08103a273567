"""What eats a session's context: its history's tokens by tool, by what each tool call was about
(its path, pattern, command...), and by what else holds them (the user's messages, the model's
answers, governance's own notes, the messages' framing), as stored and as sent.

Plain functions over a ``GovernedContext``. Tool names and tokens come from the report; the
call ids pairing results with calls come from the stored facts (one query of three small
fields); the arguments that label a call come from the payloads of the calls behind the largest
results only (one more query).

What adds up (``Consumers.rows``): every part of the governed history but the system prompt's
lands in exactly one row, and the framing of each message in the last, so the rows' ``sent``
add up to ``Consumers.history``, the x-ray's history tokens (the request without its system
prompt, instructions and tool definitions). Their ``stored`` add up to the effective history's
stored tokens without the system prompt (``Consumers.stored``): a result pair repair moved or
synthesized counts where it is stored, or nowhere when it is not stored at all.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sessions.services.governed import GovernedContext

TOP = 10
"""Rows shown in each list (the tools past it are folded into one row)."""
LABELLED = 500
"""The most calls whose arguments are read to label them: the largest results' calls."""
LABEL_KEYS = ("path", "file", "file_path", "filename", "pattern", "query", "command", "url")
"""Arguments that say what a call was about, in order of preference."""
LABEL_CHARS = 60
SHORT_ARGUMENT = 200
"""The longest argument taken as a label when none of ``LABEL_KEYS`` is there."""
PARSED_ARGUMENTS = 100_000
"""The longest arguments string parsed as JSON for a label."""
UNANSWERED_SEARCH = 64
"""How many of the latest calls are searched for the one a written result answers."""

TOOL_KINDS = frozenset(
    {"tool-call", "tool-return", "retry-prompt", "builtin-tool-call", "builtin-tool-return"}
)
RESULT_KINDS = frozenset({"tool-return", "retry-prompt", "builtin-tool-return"})

KIND_LABELS = {
    "user": "Your messages",
    "answers": "Model answers",
    "notes": "Summaries and notices",
    "other": "Other parts",
    "framing": "Message framing",
}


@dataclass(frozen=True, slots=True)
class Consumer:
    """One row: a tool, a tool and what its calls were about, or a kind of message content."""

    kind: str
    """tool, argument, others (the tools past the top ones), user, answers, notes, other or
    framing."""
    label: str
    tool: str | None
    what: str | None
    """What the calls were about (an argument), for an argument row."""
    results: int
    """Tool results it holds (a tool's or an argument's row)."""
    stored: int
    sent: int
    share: float
    """Percentage of the sent history."""
    seq: int | None = None
    """The log seq of its largest result (a link into the timeline)."""

    @property
    def cut(self) -> bool:
        """Governance sends less of it than is stored (truncated, masked, evicted, dropped)."""
        return self.sent < self.stored


@dataclass(frozen=True)
class Consumers:
    history: int
    """The sent history's tokens (system prompt, instructions and tool definitions aside)."""
    stored: int
    """The effective history's stored tokens, the system prompt's aside."""
    rows: list[Consumer]
    """Tools (the largest ``TOP``, then the rest in one row) and the other kinds, largest
    first, framing last: they add up to ``history`` sent and ``stored`` stored."""
    by_argument: list[Consumer]
    """The largest ``TOP`` tool-and-argument groups."""

    @property
    def tools(self) -> list[Consumer]:
        return [row for row in self.rows if row.kind == "tool"]


@dataclass(slots=True)
class _Tally:
    results: int = 0
    stored: int = 0
    sent: int = 0
    seq: int | None = None
    largest: int = -1

    def add(self, stored: int, sent: int) -> None:
        self.stored += stored
        self.sent += sent

    def result(self, seq: int | None, stored: int, sent: int) -> None:
        self.results += 1
        self.add(stored, sent)
        if seq is not None and stored > self.largest:
            self.largest, self.seq = stored, seq


@dataclass(slots=True)
class _Call(_Tally):
    tool: str = ""
    call_seq: int | None = None
    number: int = 0
    what: str | None = None


@dataclass(frozen=True, slots=True)
class _Stored:
    parts: int
    result_ids: tuple[str, ...]
    call_ids: tuple[str, ...]


def _ids(value: object) -> tuple[str, ...]:
    return tuple(value) if isinstance(value, list) else ()


def _stored_facts(context: GovernedContext, seqs: Iterable[int]) -> dict[int, _Stored]:
    """Each stored message's part count and call ids, from its facts (no payload is read)."""
    wanted = set(seqs)
    if not wanted:
        return {}
    rows = context.session.messages.filter(seq__gte=min(wanted), seq__lte=max(wanted))
    found: dict[int, _Stored] = {}
    for seq, kinds, results, calls in rows.values_list(
        "seq", "facts__part_kinds", "facts__result_ids", "facts__call_ids"
    ):
        if seq in wanted and isinstance(kinds, list):
            found[seq] = _Stored(len(kinds), _ids(results), _ids(calls))
    return found


def top_consumers(context: GovernedContext, *, top: int = TOP) -> Consumers:
    """What holds the governed history's tokens, stored and sent (see the module's doc)."""
    report = context.report
    seqs = [context.seq_of(m.index) for m in report.messages]
    facts = _stored_facts(context, (s for s in seqs if s is not None))
    tools: dict[str, _Tally] = {}
    others: dict[str, _Tally] = {key: _Tally() for key in KIND_LABELS}
    calls: list[_Call] = []
    latest_call: dict[str, _Call] = {}
    # Results pair repair moved up next to their calls, by tool and tokens: sent there, and
    # stored (so attributed to their call) where they came from, later in the history.
    moved_here: dict[tuple[str, int], list[int]] = {}
    for message, seq in zip(report.messages, seqs, strict=True):
        stored_facts = facts.get(seq) if seq is not None else None
        if stored_facts is not None:
            stored_parts = stored_facts.parts
        else:  # a record's own message is all stored; one pair repair added holds none
            stored_parts = len(message.parts) if message.index is not None else 0
        framing_stored = message.tokens_before if message.index is not None else 0
        framing_sent = message.tokens_after
        results = iter(stored_facts.result_ids if stored_facts else ())
        call_ids = iter(stored_facts.call_ids if stored_facts else ())
        for number, part in enumerate(message.parts):
            stored_here = number < stored_parts
            before = part.tokens_before if stored_here else 0
            after = part.tokens_after
            framing_stored -= before
            framing_sent -= after
            kind, tool = part.part_kind, part.tool_name
            if kind == "system-prompt" and message.index is not None:
                continue  # the system prompt's (the budget note, added, is history's)
            if tool is None or kind not in TOOL_KINDS:
                others[_other_kind(kind, message.kind, seq)].add(before, after)
                continue
            tally = tools.setdefault(tool, _Tally())
            is_result = kind in RESULT_KINDS
            if not is_result:
                tally.add(before, after)
            elif stored_here or part.action == "synthesized":
                tally.result(seq, before, after)
            else:
                tally.add(before, after)
            if not stored_here:
                if part.action == "synthesized" and is_result:
                    unanswered = _unanswered(calls, tool)
                    if unanswered is not None:
                        unanswered.result(seq, 0, after)
                elif is_result:
                    moved_here.setdefault((tool, part.tokens_before), []).append(after)
                continue
            if kind == "tool-call":
                call = _Call(tool=tool, call_seq=seq, number=number)
                call.add(before, after)
                calls.append(call)
                call_id = next(call_ids, None)
                if call_id is not None:
                    latest_call[call_id] = call
            elif kind == "tool-return" or kind == "retry-prompt":
                call_id = next(results, None)
                owner = latest_call.get(call_id) if call_id is not None else None
                if owner is None or owner.tool != tool:
                    owner = _Call(tool=tool)
                    calls.append(owner)
                if part.action == "moved":
                    waiting = moved_here.get((tool, before))
                    after = waiting.pop(0) if waiting else 0
                owner.result(seq, before, after)
        others["framing"].add(max(framing_stored, 0), max(framing_sent, 0))
    history = report.history_tokens_after
    return Consumers(
        history=history,
        stored=sum(t.stored for t in tools.values()) + sum(t.stored for t in others.values()),
        rows=_rows(tools, others, history, top),
        by_argument=_by_argument(context, calls, history, top),
    )


def _unanswered(calls: list[_Call], tool: str) -> _Call | None:
    """The latest call of ``tool`` with no result yet: the one a result pair repair wrote
    answers (it is written in the request right after its call)."""
    for call in reversed(calls[-UNANSWERED_SEARCH:]):
        if call.tool == tool and not call.results and call.call_seq is not None:
            return call
    return None


def _other_kind(part_kind: str, message_kind: str, seq: int | None) -> str:
    if seq is None:  # written by governance: a summary, a window notice, the budget note
        return "notes"
    if part_kind == "user-prompt":
        return "user"
    if message_kind == "response":
        return "answers"
    return "other"


def _share(tokens: int, history: int) -> float:
    return 100.0 * tokens / history if history else 0.0


def _order(tally: _Tally) -> tuple[int, int]:
    return (-tally.sent, -tally.stored)


def _rows(
    tools: dict[str, _Tally], others: dict[str, _Tally], history: int, top: int
) -> list[Consumer]:
    ranked = sorted(tools.items(), key=lambda item: (_order(item[1]), item[0]))
    rows = [
        Consumer(
            "tool", name, name, None, t.results, t.stored, t.sent, _share(t.sent, history), t.seq
        )
        for name, t in ranked[:top]
    ]
    rest = ranked[top:]
    if rest:
        folded = _Tally()
        for _, t in rest:
            folded.results += t.results
            folded.add(t.stored, t.sent)
        rows.append(
            Consumer(
                "others",
                f"{len(rest)} other tools",
                None,
                None,
                folded.results,
                folded.stored,
                folded.sent,
                _share(folded.sent, history),
            )
        )
    for key, t in others.items():
        if key != "framing" and (t.stored or t.sent):
            rows.append(
                Consumer(
                    key, KIND_LABELS[key], None, None, 0, t.stored, t.sent, _share(t.sent, history)
                )
            )
    rows.sort(key=lambda row: (-row.sent, -row.stored))
    framing = others["framing"]
    rows.append(
        Consumer(
            "framing",
            KIND_LABELS["framing"],
            None,
            None,
            0,
            framing.stored,
            framing.sent,
            _share(framing.sent, history),
        )
    )
    return rows


def _by_argument(
    context: GovernedContext, calls: list[_Call], history: int, top: int
) -> list[Consumer]:
    """The calls grouped by tool and what they were about, the largest first. Only the
    ``LABELLED`` largest calls are read (one query), so on a longer history a group counts
    the calls among them."""
    ranked = sorted((c for c in calls if c.results), key=_order)[:LABELLED]
    wanted = {c.call_seq for c in ranked if c.call_seq is not None}
    payloads: dict[int, Any] = {}
    if wanted:
        rows = context.session.messages.filter(seq__in=wanted)
        payloads = dict(rows.values_list("seq", "payload__parts"))
    groups: dict[tuple[str, str | None], _Call] = {}
    for call in ranked:
        what = (
            _call_what(payloads.get(call.call_seq), call.number)
            if call.call_seq is not None
            else None
        )
        group = groups.setdefault((call.tool, what), _Call(tool=call.tool, what=what))
        group.results += call.results
        group.add(call.stored, call.sent)
        if call.seq is not None and call.largest > group.largest:
            group.largest, group.seq = call.largest, call.seq
    best = sorted(groups.values(), key=lambda g: (_order(g), g.tool, g.what or ""))[:top]
    return [
        Consumer(
            "argument",
            f"{g.tool} {g.what}" if g.what else g.tool,
            g.tool,
            g.what,
            g.results,
            g.stored,
            g.sent,
            _share(g.sent, history),
            g.seq,
        )
        for g in best
    ]


def _call_what(parts: object, number: int) -> str | None:
    """The label of the call part ``number`` of a stored response's parts."""
    if not isinstance(parts, list) or not 0 <= number < len(parts):
        return None
    part = parts[number]
    return call_what(part.get("args")) if isinstance(part, dict) else None


def call_what(args: object) -> str | None:
    """What a tool call was about, from its arguments (a dict, or its JSON text): the first of
    ``LABEL_KEYS`` it has, else its first short string argument; shortened to one line."""
    if isinstance(args, str):
        if len(args) > PARSED_ARGUMENTS:
            return None
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):
            return None
    if not isinstance(args, dict):
        return None
    for key in LABEL_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            return _one_line(value)
    for value in args.values():
        if isinstance(value, str) and value.strip() and len(value) <= SHORT_ARGUMENT:
            return _one_line(value)
    return None


def _one_line(text: str) -> str:
    line = " ".join(text[: LABEL_CHARS * 4].split())
    return line if len(line) <= LABEL_CHARS else line[: LABEL_CHARS - 1] + "…"
