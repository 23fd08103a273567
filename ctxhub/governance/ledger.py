"""The fact ledger: what compactions lose, extracted deterministically so a summary cannot.

Summarisers paraphrase. The things people need back after a compaction are exactly the ones a
paraphrase loses: the file path, the URL, the identifier, the error message, the command, the
number or name the user gave. ``extract_ledger`` lists them from the messages being summarised
(with regular expressions, no model), and ``reconcile`` appends to a summary every item it does
not already contain, verbatim, so no identifier is ever lost to a summariser's whim.

Where each kind is looked for, to keep the ledger about what matters rather than every token
of every file the agent read:

* user prompts: everything (paths, URLs, identifiers, commands, error lines, numbers, names and
  quoted values) — the user's own words are the costliest to lose. Identifiers there are the
  backticked spans and what people type in passing: snake_case and CamelCase names, hashes,
  UUIDs, tickets (``OPS-1234``), host and service names with digits (``db-west-3``,
  ``db-7.internal:5432``), domain names, e-mail addresses, versions (``v2.3.1``,
  ``1.4.0-rc2``, ``python 3.12``), image tags (``redis:7-alpine``), settings (``env=prod``) and
  environments (``production`` and ``staging`` always; ``dev``, ``test``, ``qa`` … only when
  stated as one: ``the dev cluster``, ``deploy to qa``). Ordinary words do not count;
* assistant text: paths, URLs, identifiers (backticked spans only), commands;
* tool-call arguments: paths, URLs, commands. The paths the agent acted on are the value of
  every path-like argument (``path``, ``file_path``, ``files``, ``new_path`` …, at any depth)
  and the paths inside a command; the paths other arguments mention are kept too;
* tool outputs and retry prompts: error messages only;
* an earlier summary: its verbatim facts, and everything its prose states (read as a user's
  words), so a chain of compactions never drops what an earlier one kept.

Paths are rooted, relative, Windows (``C:\\x``) or bare names with a file extension, well-known
extensionless files (``Makefile``, ``Dockerfile``, ``LICENSE``) and dotfiles (``.env``), whatever
their case and wherever they sit in a sentence. A fact is in a summary only when stated whole:
``db-west-3`` is not kept by ``db-west-30``.

A compaction appends to its summary the facts the summary lacks, as many as its room holds, in
the order of ``ranked``: what an earlier summary kept first (a chain of compactions never drops
it while there is room), then the user's facts, the paths the agent acted on, the rest; within
each, the newest of every kind in turn, so a short room keeps the latest path, identifier,
command and number rather than every old path. What is left out is counted, and stays in the
log for ``recall``.
"""

import re
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic_ai.messages import (
    ModelMessage,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from .fact_finders import (
    commands_in,
    errors_in,
    identifiers_in,
    names_in,
    numbers_in,
    paths_in,
    urls_in,
)
from .fact_patterns import (
    COMMAND_ARGS,
    FACT_LINE,
    FACTS_HEADING,
    KINDS,
    PATH_ARG_SUFFIXES,
    PATH_ARGS,
    Kind,
)
from .tokens import as_text


class LedgerItem(BaseModel):
    """One fact: its kind, its exact text and the input index of the message it came from."""

    model_config = ConfigDict(frozen=True)

    kind: Kind
    text: str
    index: int | None = None
    tier: int = 3
    """How much it matters, most first: ``CARRIED``, ``USER``, ``ACTED``, then the rest."""


class Ledger(BaseModel):
    """The facts of the summarised messages, in order of first appearance."""

    model_config = ConfigDict(frozen=True)

    items: list[LedgerItem]
    omitted: int = 0
    """Items left out because the ledger reached its size limit: never a user's fact or a path
    the agent acted on while others remain; the lower-value kinds and the oldest first."""

    def texts(self) -> list[str]:
        """The items' texts."""
        return [item.text for item in self.items]

    def ranked(self) -> list[LedgerItem]:
        """The items, the most valuable first (see ``ranked``)."""
        return ranked(self.items)

    def __len__(self) -> int:
        return len(self.items)


class Reconciled(BaseModel):
    """A summary with the ledger's missing items appended, and which items were where."""

    model_config = ConfigDict(frozen=True)

    text: str
    kept_by_summarizer: list[LedgerItem]
    added_by_ledger: list[LedgerItem]
    """Items the summary left out, appended to it."""
    kept_in_messages: list[LedgerItem] = []
    """Of those, the ones the messages kept beside the summary still state (appended all the
    same: the window may drop those messages later)."""

    @property
    def missing(self) -> list[LedgerItem]:
        """Items the compacted history would have lost but for the ledger."""
        kept = {item.text for item in self.kept_in_messages}
        return [item for item in self.added_by_ledger if item.text not in kept]

    @property
    def score(self) -> float:
        """The share of the ledger the compacted history held before the ledger's items were
        appended: in the summary or in the messages kept beside it (1.0 for an empty one)."""
        total = len(self.kept_by_summarizer) + len(self.added_by_ledger)
        return 1.0 if total == 0 else 1 - len(self.missing) / total


CARRIED, USER, ACTED, OTHER = 0, 1, 2, 3
"""Tiers of facts, most valuable first: what an earlier summary kept (a chain of compactions
never drops it while there is room), what the user said, the paths the agent acted on, the
rest."""


def ranked(items: Sequence[LedgerItem]) -> list[LedgerItem]:
    """``items`` (in order of first appearance) the most valuable first: by tier, and within
    a tier the newest of each kind in turn (in ``KINDS`` order: paths first, names last), so
    a short room holds the latest facts of every kind rather than every old path."""
    out: list[LedgerItem] = []
    for tier in sorted({item.tier for item in items}):
        queues = [
            deque(item for item in reversed(items) if item.tier == tier and item.kind == kind)
            for kind in KINDS
        ]
        while queues := [queue for queue in queues if queue]:
            out.extend(queue.popleft() for queue in queues)
    return out


class _Collector:
    def __init__(self) -> None:
        self.items: dict[str, LedgerItem] = {}

    def add(self, kind: Kind, texts: Iterable[str], index: int | None, *, tier: int) -> None:
        for raw in texts:
            text = raw.strip()
            if len(text) < 2 or len(text) > 240:
                continue
            known = self.items.get(text)
            if known is None:
                self.items[text] = LedgerItem(kind=kind, text=text, index=index, tier=tier)
            elif tier < known.tier:
                self.items[text] = known.model_copy(update={"tier": tier})


def _arg_strings(args: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """Every string of a tool call's arguments, at any depth, with the key it sits under."""
    if isinstance(args, str):
        yield key, args
    elif isinstance(args, Mapping):
        for name, value in args.items():
            yield from _arg_strings(value, str(name).lower())
    elif isinstance(args, list | tuple):
        for value in args:
            yield from _arg_strings(value, key)


def _is_path_arg(key: str) -> bool:
    return key in PATH_ARGS or key.endswith(tuple(f"_{s}" for s in PATH_ARG_SUFFIXES))


SUMMARY_PREFIXES = (
    "[Summary of ",
    "[Compacted conversation summary]",
    "[Earlier conversation trimmed",
)
"""How the summaries and markers compaction writes begin (000: co-cli's formats)."""


def is_summary_text(text: str) -> bool:
    """Whether a text is one of the summaries or markers compaction writes."""
    return text.startswith(SUMMARY_PREFIXES)


def summary_prose(text: str) -> str:
    """A summary's text without its first line, which only says what it stands for."""
    first, _, rest = text.partition("\n")
    return rest if is_summary_text(first) else text


def _collect(collector: _Collector, message: ModelMessage, index: int | None) -> None:
    for part in message.parts:
        if isinstance(part, UserPromptPart):
            text = part.content if isinstance(part.content, str) else as_text(part.content)
            if is_summary_text(text):
                _collect_summary(collector, text, index)
            else:
                _collect_user(collector, text, index)
        elif isinstance(part, TextPart):
            text = part.content
            collector.add("url", urls_in(text), index, tier=OTHER)
            collector.add("path", paths_in(text), index, tier=OTHER)
            collector.add("command", commands_in(text), index, tier=OTHER)
            collector.add("identifier", identifiers_in(text, prose=False), index, tier=OTHER)
        elif isinstance(part, ToolCallPart):
            try:
                args = part.args_as_dict()
            except ValueError:
                args = {}
            for key, value in _arg_strings(args):
                if key in COMMAND_ARGS:
                    collector.add("command", [value.strip()], index, tier=OTHER)
                    collector.add("path", paths_in(value), index, tier=ACTED)
                elif _is_path_arg(key) and "\n" not in value and "://" not in value:
                    collector.add("path", [value.strip()], index, tier=ACTED)
                else:
                    collector.add("url", urls_in(value), index, tier=OTHER)
                    collector.add("path", paths_in(value), index, tier=OTHER)
        elif isinstance(part, ToolReturnPart):
            collector.add("error", errors_in(part.model_response_str()), index, tier=OTHER)
        elif isinstance(part, RetryPromptPart):
            collector.add("error", errors_in(part.model_response()), index, tier=OTHER)


def _collect_user(collector: _Collector, text: str, index: int | None, tier: int = USER) -> None:
    """Everything a user's words (or an earlier summary's) state."""
    collector.add("url", urls_in(text), index, tier=tier)
    collector.add("path", paths_in(text), index, tier=tier)
    collector.add("command", commands_in(text), index, tier=tier)
    collector.add("identifier", identifiers_in(text, prose=True), index, tier=tier)
    collector.add("error", errors_in(text, limit=0), index, tier=tier)
    collector.add("number", numbers_in(text), index, tier=tier)
    collector.add("name", names_in(text), index, tier=tier)


def _collect_summary(collector: _Collector, text: str, index: int | None) -> None:
    """An earlier summary: its verbatim facts keep their kind; its prose is read as the
    user's words are (everything it states), so a chain of compactions keeps every fact an
    earlier one kept, whether its summariser wrote it or the ledger appended it."""
    head, _, facts = text.partition(FACTS_HEADING)
    for line in facts.splitlines():
        match = FACT_LINE.match(line.strip())
        if match:
            kind: Kind = match.group(1)  # type: ignore[assignment]
            collector.add(kind, [match.group(2)], index, tier=CARRIED)
    _collect_user(collector, summary_prose(head), index, CARRIED)


def extract_ledger(
    messages: Sequence[ModelMessage],
    *,
    indices: Sequence[int] | None = None,
    max_items: int | None = None,
) -> Ledger:
    """The ledger of ``messages`` (``indices`` gives each one's input index for the report).

    Unlimited by default; with ``max_items``, the ``max_items`` first of ``ranked``: an
    earlier summary's facts, then the user's, the paths the agent acted on, the rest.
    """
    collector = _Collector()
    for position, message in enumerate(messages):
        index = indices[position] if indices is not None else position
        _collect(collector, message, index)
    items = _drop_contained(list(collector.items.values()))
    omitted = 0
    if max_items is not None and len(items) > max_items:
        keep = {id(item) for item in ranked(items)[: max(max_items, 0)]}
        omitted = len(items) - len(keep)
        items = [item for item in items if id(item) in keep]
    return Ledger(items=items, omitted=omitted)


def _drop_contained(items: list[LedgerItem]) -> list[LedgerItem]:
    """Drop numbers and names already inside a longer item (``8080`` inside a URL)."""
    longer = [i.text for i in items if i.kind not in ("number", "name")]
    joined = "\0".join(longer)  # one search instead of one per longer item

    def inside(text: str) -> bool:
        return text in joined if "\0" not in text else any(text in t for t in longer)

    return [item for item in items if item.kind not in ("number", "name") or not inside(item.text)]


def _normalised(text: str) -> str:
    return " ".join(text.split())


def contains(summary: str, item: LedgerItem) -> bool:
    """Whether a summary states an item verbatim and whole (whitespace-insensitive): not as
    part of a longer token, so ``db-west-3`` is not in ``db-west-30`` nor ``8080`` in ``18080``.
    """
    words = item.text.split()
    if not words:
        return True
    if item.text not in summary and _normalised(item.text) not in _normalised(summary):
        return False
    before = r"(?<![\w-])" if re.match(r"\w", words[0]) else ""
    after = r"(?![\w-]|\.\w)" if re.search(r"\w$", words[-1]) else ""
    body = r"\s+".join(re.escape(word) for word in words)
    return re.search(f"{before}{body}{after}", summary) is not None


def facts_section(items: Sequence[LedgerItem], left_out: int = 0) -> str:
    """The appended section: one ``- kind: text`` line per item, grouped by kind, and how
    many more facts there were (left out for room)."""
    lines = [FACTS_HEADING]
    for kind in KINDS:
        lines.extend(f"- {kind}: {' '.join(i.text.split())}" for i in items if i.kind == kind)
    if left_out:
        lines.append(f"({left_out:,} more facts of these messages left out for room.)")
    return "\n".join(lines)


def reconcile(summary: str, ledger: Ledger, kept: str = "") -> Reconciled:
    """Append every ledger item the summary does not contain; say which it kept by itself,
    and which of the others ``kept`` (the text of the messages kept beside it) states."""
    by_summary = [item for item in ledger.items if contains(summary, item)]
    missing = [item for item in ledger.items if not contains(summary, item)]
    text = summary.rstrip()
    if missing:
        text = f"{text}\n\n{facts_section(missing)}"
    return Reconciled(
        text=text,
        kept_by_summarizer=by_summary,
        added_by_ledger=missing,
        kept_in_messages=[item for item in missing if kept and contains(kept, item)],
    )
