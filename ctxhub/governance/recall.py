"""Recall: the model searches what its governed context no longer carries in full.

Governance hides things to fit the budget: tool outputs masked, cut or evicted, messages the
sliding window dropped, the middle a compaction summarised. Nothing is lost — the run's history
(or the hub's log) still holds every word — but the model cannot see it. ``recall(query,
limit)`` is the tool that lets it look: it searches the passages the last governed request did
not carry verbatim and answers with the best matching excerpts, each with the number of its
message, so the model can quote it or ask for more around it.

This module is the part every backend shares: which parts of a message can be searched and in
what pieces (``part_texts``, ``pieces``), which of them a governed request hid (``hidden``),
the query's terms (``query_terms``), the excerpt of a piece that best answers them
(``excerpt``), the tool's answer (``answer``) and the toolset (``recall_toolset``). ``rank``
orders the pieces found (BM25, then how much of the query one passage names together):
in-process over every hidden piece, in the hub over those PostgreSQL's full-text search (or
SQLite's FTS5 on its embedded default) found. Both search by the terms of ``recall_terms``: a
text's words, the words its identifiers are made of and what its abbreviations stand for, so
"staging database host" finds ``STAGING_DB_HOST=…``.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    RetryPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import FunctionToolset

from .counting import message_cache
from .recall_terms import added_at, added_terms, query_words
from .report import ContextReport

PIECE_CHARS = 1_500
"""A long text is searched in pieces of about this many characters, so a hit in a 100 KB output
ranks on its own passage rather than being diluted by the rest, and an excerpt is found fast."""
PIECE_OVERLAP = 200
"""Each piece reaches this far into the next, so a sentence across a boundary is whole in one."""
EXCERPT_CHARS = 600
"""The excerpt of a hit the tool answers with."""
MOST_RESULTS = 20
"""The most hits one call answers with, whatever ``limit`` asks."""
MOST_TERMS = 32
"""The most words of a query searched for (a query is a few words, not a document)."""
RERANKED = 100
"""How many of the pieces BM25 ranks best are ranked again by the terms they name together."""
NEAR_CHARS = 60
"""Terms starting within this many characters of each other (about a line) are named together."""

_WORD = re.compile(r"\w+", re.UNICODE)
# Too common to tell passages apart; a backend with its own stemming drops its own list.
_STOP = frozenset(
    _WORD.findall(
        "a an and are as at be by for from has have in is it its of on or that the this to was "
        "were will with what which who when where how do does did i you we"
    )
)


@dataclass(frozen=True, slots=True)
class Piece:
    """A searchable piece of one part of one message."""

    seq: int
    """The message's number: its seq in the hub's log, its position in an in-process run."""
    part: int
    """The part's index in its message."""
    offset: int
    """Where the piece starts in the part's text, in characters."""
    kind: str
    """``user``, ``assistant``, ``tool call``, ``tool output``, ``retry`` or ``thinking``."""
    tool_name: str | None
    text: str
    terms: str | None = None
    """What the text is searched by besides its own words (``recall_terms.added_terms``), where
    the caller has it; worked out from the text otherwise."""

    @property
    def searchable(self) -> str:
        """Every term the piece is searched by (``recall_terms.searchable``)."""
        terms = added_terms(self.text) if self.terms is None else self.terms
        return f"{self.text.lower()}\n{terms}"


@dataclass(frozen=True, slots=True)
class Hit:
    """A piece that answers a query, as the tool shows it."""

    seq: int
    part: int
    kind: str
    tool_name: str | None
    fate: str
    """What governance did to it: ``masked``, ``truncated``, ``evicted``, ``dropped``,
    ``summarised``, …"""
    excerpt: str


def part_texts(message: ModelMessage) -> Iterator[tuple[int, str, str | None, str]]:
    """``(part index, kind, tool name, text)`` of each part of ``message`` worth searching.

    System prompts are left out: governance always sends them. A tool call is searched by its
    name and arguments, a non-text tool output by its JSON.
    """
    for index, part in enumerate(message.parts):
        found = _part_text(part)
        if found is not None and found[2].strip():
            yield index, *found


def _part_text(part: Any) -> tuple[str, str | None, str] | None:
    if isinstance(part, UserPromptPart):
        if isinstance(part.content, str):
            return "user", None, part.content
        texts = [item for item in part.content if isinstance(item, str)]
        return "user", None, "\n".join(texts)
    if isinstance(part, ToolReturnPart):
        return "tool output", part.tool_name, _as_text(part.content)
    if isinstance(part, RetryPromptPart):
        return "retry", part.tool_name, _as_text(part.content)
    if isinstance(part, TextPart):
        return "assistant", None, part.content
    if isinstance(part, ToolCallPart):
        args = part.args if isinstance(part.args, str) else _as_text(part.args or {})
        return "tool call", part.tool_name, f"{part.tool_name}({args})"
    if isinstance(part, ThinkingPart):
        return "thinking", None, part.content
    return None


def _as_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    try:
        return json.dumps(content, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(content)


def pieces(seq: int, message: ModelMessage) -> Iterator[Piece]:
    """The searchable pieces of ``message``, numbered ``seq``."""
    for part, kind, tool_name, text in part_texts(message):
        for offset, piece in split(text):
            yield Piece(seq, part, offset, kind, tool_name, piece)


def split(text: str) -> Iterator[tuple[int, str]]:
    """``(offset, piece)`` of a text cut into overlapping pieces, at a line or word break
    where there is one near the cut."""
    start = 0
    while True:
        end = start + PIECE_CHARS
        if end >= len(text):
            yield start, text[start:]
            return
        cut = text.rfind("\n", start + PIECE_CHARS // 2, end)
        if cut < 0:
            cut = text.rfind(" ", start + PIECE_CHARS // 2, end)
        if cut < 0:
            cut = end
        yield start, text[start : min(len(text), cut + PIECE_OVERLAP)]
        start = cut


# --- what a governed request hid ----------------------------------------------------------------


def hidden(
    report: ContextReport, seqs: Callable[[int], int | None]
) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    """What the governed request ``report`` describes left out or changed, by message number.

    ``seqs`` maps a position of the governed history to its message number (None for a message
    with no number: a summary, a notice). Returns the messages left out whole (their number to
    their fate) and the parts changed (``(number, part)`` to their fate). A message the history
    did not hold at all (summarised, or before it) is the caller's to add.
    """
    messages: dict[int, str] = {}
    parts: dict[tuple[int, int], str] = {}
    for message in report.messages:
        if message.index is None:
            continue
        seq = seqs(message.index)
        if seq is None:
            continue
        if not message.kept:
            messages[seq] = "dropped"
            continue
        for index, part in enumerate(message.parts):
            if part.action not in ("kept", "moved", "synthesized"):
                parts[(seq, index)] = part.action
    return messages, parts


def fate_of(
    piece: Piece, messages: dict[int, str], parts: dict[tuple[int, int], str]
) -> str | None:
    """What governance did to ``piece``'s part, or None when it was sent in full."""
    return messages.get(piece.seq) or parts.get((piece.seq, piece.part))


# --- searching ----------------------------------------------------------------------------------


def query_terms(query: str) -> list[str]:
    """The distinct terms of a query worth searching for, lowercased, in order (see
    ``recall_terms``)."""
    terms = list(dict.fromkeys(query_words(query)))
    worth = [term for term in terms if term not in _STOP]
    return (worth or terms)[:MOST_TERMS]


def _occurrences(terms: Sequence[str]) -> re.Pattern[str]:
    """A pattern matching each of ``terms`` as a whole word."""
    return re.compile(r"\b(?:" + "|".join(map(re.escape, terms)) + r")\b")


def _matches(text: str, terms: Sequence[str]) -> list[tuple[int, str]]:
    """``(position, term)`` of every occurrence of ``terms`` in ``text`` (its added terms at the
    word they come from), in order."""
    own = [(m.start(), m.group()) for m in _occurrences(terms).finditer(text.lower())]
    return sorted([*own, *added_at(text, set(terms))])


def rank(
    candidates: Sequence[Piece],
    terms: Sequence[str],
    limit: int,
    *,
    frequency: dict[str, int] | None = None,
    documents: int | None = None,
    matched: dict[str, set[tuple[int, int, int]]] | None = None,
) -> list[Piece]:
    """The ``limit`` pieces that best answer ``terms``, one per part, best first: by BM25, the
    best hundred again by the weight of the terms one passage of each names together.

    In memory, ``candidates`` are every piece searched and the terms' frequencies are counted
    here. A database that found the candidates gives the frequencies it counted over every
    piece it searched (``frequency``, ``documents``) and the pieces each term matched by its
    own stemming (``matched``, by ``(seq, part, offset)``), which count as one occurrence where
    the plain words do not show it.
    """
    if not terms or not candidates:
        return []
    occurrences = _occurrences(terms)
    counted = [Counter(occurrences.findall(p.searchable)) for p in candidates]
    for term, keys in (matched or {}).items():
        for piece, counts in zip(candidates, counted, strict=True):
            if not counts[term] and (piece.seq, piece.part, piece.offset) in keys:
                counts[term] = 1
    if frequency is None:
        frequency = Counter(term for counts in counted for term in counts)
    documents = documents or len(candidates)
    idf = {
        term: math.log(1 + (documents - found + 0.5) / (found + 0.5))
        for term in terms
        for found in [min(frequency.get(term, 1), documents)]
    }
    lengths = [max(1, len(p.text) // 6) for p in candidates]  # about six characters a word
    average = sum(lengths) / len(lengths)
    scored: list[tuple[float, int]] = []
    for i, counts in enumerate(counted):
        score = 0.0
        for term, n in counts.items():
            if n:
                score += idf[term] * n * 2.2 / (n + 1.2 * (0.25 + 0.75 * lengths[i] / average))
        if score > 0:
            scored.append((score, i))
    # Among equals the newer message first: a later statement is the likelier to be current.
    scored.sort(key=lambda s: (-s[0], -candidates[s[1]].seq, s[1]))
    # BM25 weighs a piece's words wherever they stand; the best of them are weighed again by
    # how much of the query one passage of them names together ("dev:\n  repo:\n    port: …"
    # rather than "dev" at the top, "repo" in the middle and "port" in every log line).
    best = [(score + _together(candidates[i].text, idf), i) for score, i in scored[:RERANKED]]
    best.sort(key=lambda s: (-s[0], -candidates[s[1]].seq, s[1]))
    return best_per_part([candidates[i] for _, i in [*best, *scored[RERANKED:]]], limit)


def _together(text: str, idf: dict[str, float]) -> float:
    """The weight (by ``idf``) of the query's terms that one stretch of ``text`` no longer than
    ``NEAR_CHARS`` names, at its best."""
    matches = _matches(text, list(idf))
    best = 0.0
    left = 0
    for right in range(len(matches)):
        while matches[right][0] - matches[left][0] > NEAR_CHARS:
            left += 1
        best = max(best, sum(idf[term] for term in {term for _, term in matches[left : right + 1]}))
    return best


def best_per_part(ranked: Sequence[Piece], limit: int) -> list[Piece]:
    """The first ``limit`` of ``ranked`` pieces, one per part (a part's overlapping pieces
    would repeat each other)."""
    taken: list[Piece] = []
    parts: set[tuple[int, int]] = set()
    for piece in ranked:
        if (piece.seq, piece.part) not in parts:
            parts.add((piece.seq, piece.part))
            taken.append(piece)
            if len(taken) == limit:
                break
    return taken


def excerpt(text: str, terms: Sequence[str], size: int = EXCERPT_CHARS) -> str:
    """The stretch of ``text`` of about ``size`` characters holding the most distinct terms
    (then the most matches), widened to word breaks; marked with … where it was cut."""
    if len(text) <= size:
        return text.strip()
    matches = _matches(text, terms)
    best_start, best = 0, (0, 0)
    left = 0
    for right in range(len(matches)):
        while matches[right][0] - matches[left][0] > size * 2 // 3:
            left += 1
        window = matches[left : right + 1]
        score = (len({w for _, w in window}), len(window))
        if score > best:
            best, best_start = score, window[0][0]
    start = max(0, best_start - size // 4)
    if start:
        space = text.rfind(" ", max(0, start - 40), start)
        start = space + 1 if space >= 0 else start
    end = min(len(text), start + size)
    if end < len(text):
        space = text.find(" ", end, end + 40)
        end = space if space >= 0 else end
    return f"{'…' if start else ''}{text[start:end].strip()}{'…' if end < len(text) else ''}"


def answer(query: str, hits: Sequence[Hit]) -> str:
    """What the tool returns to the model."""
    if not hits:
        return (
            f"Nothing hidden from your context matches {query!r}: what governance left out "
            "does not mention it (what you can see is there in full)."
        )
    blocks = [f"{len(hits)} passage{'s' if len(hits) != 1 else ''} hidden from your context:"]
    for hit in hits:
        what = f"{hit.kind} of {hit.tool_name}" if hit.tool_name else hit.kind
        blocks.append(f"#{hit.seq} {what} ({hit.fate}):\n{hit.excerpt}")
    return "\n\n".join(blocks)


def clamp(limit: int) -> int:
    return max(1, min(MOST_RESULTS, limit))


def mention(tool_name: str) -> str:
    """The sentence a notice or a summary ends with, so the model knows it can look."""
    return f"Search what is no longer shown with {tool_name}(query)."


def search_history(
    history: Sequence[ModelMessage],
    fates: Callable[[Piece], str | None],
    query: str,
    limit: int,
) -> list[Hit]:
    """The hits for ``query`` among the pieces of ``history`` (numbered by position) that
    ``fates`` says governance hid, searched in memory."""
    terms = query_terms(query)
    found: list[tuple[Piece, str]] = []
    for seq, message in enumerate(history):
        for piece in _with_terms(message):
            piece = replace(piece, seq=seq)
            fate = fates(piece)
            if fate is not None:
                found.append((piece, fate))
    fate_by_piece = {id(piece): fate for piece, fate in found}
    return [
        Hit(p.seq, p.part, p.kind, p.tool_name, fate_by_piece[id(p)], excerpt(p.text, terms))
        for p in rank([piece for piece, _ in found], terms, clamp(limit))
    ]


def _with_terms(message: ModelMessage) -> list[Piece]:
    """The pieces of ``message`` (numbered 0) with their terms, worked out once per message: a
    run's recall calls search the same history again and again."""
    cache = message_cache(message)
    found: list[Piece] | None = cache.get("recall pieces")
    if found is None:
        found = [replace(p, terms=added_terms(p.text)) for p in pieces(0, message)]
        cache["recall pieces"] = found
    return found


# --- the tool -----------------------------------------------------------------------------------


def recall_toolset(
    search: Callable[[RunContext[Any], str, int], Awaitable[str]], name: str
) -> FunctionToolset[Any]:
    """A toolset with the recall tool, named ``name``, answering with ``search(ctx, query,
    limit)``."""

    async def recall(ctx: RunContext[Any], query: str, limit: int = 5) -> str:
        """Search earlier parts of this conversation that are no longer shown in full: tool
        outputs masked, cut short or stored aside, and messages dropped or summarised to fit
        the context window. Returns the matching passages, each with its message number.

        Args:
            query: A few words the passage you are looking for contains (names, numbers,
                identifiers work best).
            limit: How many passages to return, at most 20.
        """
        return await search(ctx, query, clamp(limit))

    toolset: FunctionToolset[Any] = FunctionToolset()
    toolset.add_function(recall, takes_ctx=True, name=name)
    return toolset
