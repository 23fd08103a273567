"""Recall over a stored session: the model searches what its governed context no longer carries
in full.

Every logged message is cut into searchable pieces as it is appended (``store_pieces``, the
engine's ``recall.pieces``), each stored with the terms it is searched by besides its own words
(the engine's ``recall_terms``: the words of its identifiers, what its abbreviations stand for),
and the database indexes text and terms for full-text search (migrations 0010 and 0011):
PostgreSQL's ``to_tsvector('english', …)``, stored beside each piece under a GIN index, or
SQLite's FTS5 on the embedded default. A query's terms are the engine's too, so the hub finds
what the in-memory search finds: "staging database host" finds ``STAGING_DB_HOST=…``.

``recall`` governs the session as its next request would be sent and keeps the messages and
parts that request hides (dropped by the window, summarised by a compaction, masked, cut,
evicted, deduplicated). For each word of the query the database returns the best pieces of
those and how many it matches in all; the union is ranked by BM25 with those counts (so a rare
name outranks a word every log line has) and each hit answers with an excerpt. What a clear hid
is left out: the user chose to start again from there.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import connection
from pydantic_ai.messages import ModelMessage

from ctxhub.governance.recall import (
    Hit,
    Piece,
    clamp,
    excerpt,
    fate_of,
    hidden,
    pieces,
    query_terms,
    rank,
)
from sessions.history.effective import record_state
from sessions.models import AgentSession, MessagePiece
from sessions.services.governed import governed_context

PER_TERM = 50
"""How many of the pieces matching each word of a query the database returns, best first: all
of them for the rare words that tell passages apart, the best for common ones."""
TERMS_SEARCHED = 12
"""The most words of a query searched for, one database query each."""

# One query per word: the pieces of the hidden seqs it matches, best first, with how many it
# matches in all (the word's document frequency, for ranking the union by BM25).
_POSTGRES = """
    SELECT count(*) OVER (), seq, part, "offset", kind, tool_name, text, terms
    FROM agent_sessions_messagepiece, plainto_tsquery('english', %s) AS query
    WHERE session_id = %s
      AND seq = ANY(%s)
      AND search @@ query
    ORDER BY ts_rank_cd(search, query, 1) DESC, seq DESC
    LIMIT %s
"""
# bm25() cannot be called where a window function is computed: the matches are ranked first.
_SQLITE = """
    WITH matched AS MATERIALIZED (
        SELECT p.seq, p.part, p."offset", p.kind, p.tool_name, p.text, p.terms,
               bm25(agent_sessions_messagepiece_fts) AS score
        FROM agent_sessions_messagepiece_fts
        JOIN agent_sessions_messagepiece AS p ON p.id = agent_sessions_messagepiece_fts.rowid
        WHERE agent_sessions_messagepiece_fts MATCH %s
          AND p.session_id = %s
          AND p.seq IN (SELECT value FROM json_each(%s))
    )
    SELECT count(*) OVER (), seq, part, "offset", kind, tool_name, text, terms
    FROM matched
    ORDER BY score, seq DESC
    LIMIT %s
"""


def store_pieces(session: AgentSession, messages: Iterable[tuple[int, ModelMessage]]) -> None:
    """Store the searchable pieces of ``(seq, message)`` pairs just logged (in the append's
    transaction, so a message is never logged without them)."""
    MessagePiece.objects.insert(
        session,
        (
            (p.seq, p.part, p.offset, p.kind, p.tool_name or "", p.text)
            for seq, message in messages
            for p in pieces(seq, message)
        ),
    )


@dataclass(frozen=True, slots=True)
class Hidden:
    """What the session's next request hides, by log seq."""

    messages: dict[int, str]
    """Seqs left out whole, with their fate."""
    parts: dict[tuple[int, int], str]
    """Parts changed, by ``(seq, part)``, with their fate."""

    @property
    def seqs(self) -> list[int]:
        return sorted({*self.messages, *(seq for seq, _ in self.parts)})

    def fate(self, piece: Piece) -> str | None:
        return fate_of(piece, self.messages, self.parts)


def hidden_now(session: AgentSession) -> Hidden:
    """What the session's next request, as governed now, does not carry in full."""
    context = governed_context(session)
    dropped, parts = hidden(context.report, context.seq_of)
    shown = {seq for seq in context.seqs if seq is not None}
    for compaction in record_state(session).compactions:
        for seq in range(compaction.first_seq, compaction.last_seq + 1):
            if seq not in shown:
                dropped.setdefault(seq, "summarised")
    return Hidden(dropped, parts)


def recall(session: AgentSession, query: str, limit: int = 5) -> list[Hit]:
    """The passages hidden from the session's next request that answer ``query`` best, at most
    ``limit`` (one per part), best first."""
    terms = query_terms(query)[:TERMS_SEARCHED]
    if not terms:
        return []
    found = hidden_now(session)
    seqs = found.seqs
    if not seqs:
        return []
    candidates: dict[tuple[int, int, int], Piece] = {}
    frequency: dict[str, int] = {}
    matched: dict[str, set[tuple[int, int, int]]] = {}
    for term in terms:
        count, pieces_found = _search(session, term, seqs)
        frequency[term] = count
        keys = matched[term] = set()
        for piece in pieces_found:
            if found.fate(piece) is not None:
                key = (piece.seq, piece.part, piece.offset)
                candidates.setdefault(key, piece)
                keys.add(key)
    # The words' frequencies are counted over the hidden pieces, the documents over all of the
    # session's: near enough for BM25's weights, without a second list of every hidden seq.
    documents = session.pieces.count() if candidates else 0
    ranked = rank(
        list(candidates.values()),
        terms,
        clamp(limit),
        frequency=frequency,
        documents=documents,
        matched=matched,
    )
    return [
        Hit(p.seq, p.part, p.kind, p.tool_name, found.fate(p) or "", excerpt(p.text, terms))
        for p in ranked
    ]


def _search(session: AgentSession, term: str, seqs: list[int]) -> tuple[int, list[Piece]]:
    """How many pieces of ``seqs`` match ``term`` by the database's own full-text search, and
    the best of them."""
    within: object
    if connection.vendor == "postgresql":
        sql, query, within = _POSTGRES, term, seqs
    else:
        sql, query, within = _SQLITE, '"' + term.replace('"', '""') + '"', json.dumps(seqs)
    session_id = MessagePiece._meta.get_field("session").get_db_prep_value(session.pk, connection)
    with connection.cursor() as cursor:
        cursor.execute(sql, [query, session_id, within, PER_TERM])
        rows = cursor.fetchall()
    count = rows[0][0] if rows else 0
    return count, [
        Piece(seq, part, offset, kind, tool_name or None, text, terms)
        for _, seq, part, offset, kind, tool_name, text, terms in rows
    ]
