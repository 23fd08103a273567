"""The words recall searches by: what a text says, in the words a model would ask with.

A fact a tool printed is often spelled as an identifier: ``STAGING_DB_HOST=db-stg-4.internal``,
``"stagingDatabaseHost": …``, ``cfg.payments.retry_limit``. A model looking for it asks for "the
staging database host". So besides its own words (``\\w+``, lowercased), a text is searched by
what its identifiers are made of — snake_case, camelCase and dotted names split into words — and
by what its abbreviations stand for (``db`` is also ``database``; ``stg`` also ``staging``).

A query is read the same way, with one difference: an abbreviation in a query is searched by
what it stands for only, since every text that holds the abbreviation also holds its expansion
(so ``db`` in a query finds ``database`` as well as ``DB_HOST``, and a match is not counted
twice).

The hub's full-text search indexes a piece's ``added_terms`` beside its text, so PostgreSQL,
SQLite and the in-memory ranking find the same pieces for the same words.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Iterator
from functools import lru_cache

ABBREVIATIONS: dict[str, tuple[str, ...]] = {
    "acct": ("account",),
    "addr": ("address",),
    "cert": ("certificate",),
    "cfg": ("config",),
    "conf": ("config",),
    "configuration": ("config",),
    "creds": ("credentials",),
    "db": ("database",),
    "dest": ("destination",),
    "dev": ("development",),
    "dir": ("directory",),
    "dst": ("destination",),
    "env": ("environment",),
    "err": ("error",),
    "filename": ("file", "name"),
    "hostname": ("host", "name"),
    "img": ("image",),
    "k8s": ("kubernetes",),
    "max": ("maximum",),
    "mem": ("memory",),
    "msg": ("message",),
    "num": ("number",),
    "passwd": ("password",),
    "pg": ("postgres",),
    "pkg": ("package",),
    "postgresql": ("postgres",),
    "prod": ("production",),
    "pwd": ("password",),
    "qty": ("quantity",),
    "repo": ("repository",),
    "req": ("request",),
    "resp": ("response",),
    "stg": ("staging",),
    "svc": ("service",),
    "tmp": ("temporary",),
    "username": ("user", "name"),
    "ver": ("version",),
}
"""What an abbreviation (or a word run together) stands for, chosen where one reading is far
the commonest in configuration, code and logs: ``min`` (minimum or minutes), ``ms``, ``sec``,
``auth`` (authentication or authorisation) or ``temp`` are not expanded."""

_WORD = re.compile(r"\w+")
# Where an identifier's words meet: underscores, a lower-case letter before a capital, a
# capital before a capitalised word (``HTTPServer``). Not a digit before a capital: log
# timestamps (``2026-11-05T05:00``) are not made of words.
_PARTS = re.compile(r"_+|(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


@lru_cache(maxsize=65_536)
def expansion(word: str) -> tuple[str, ...]:
    """What ``word`` stands for besides itself (lowercased): what it abbreviates, and the
    words of an identifier made of words, each expanded. (Texts repeat their words, code its
    identifiers: each is worked out once.)"""
    lower = word.lower()
    found = list(ABBREVIATIONS.get(lower, ()))
    parts = [part.lower() for part in _PARTS.split(word) if part]
    if parts != [lower]:
        for part in parts:
            found.extend(ABBREVIATIONS.get(part, (part,)))
    return tuple(found)


def added_terms(text: str) -> str:
    """The terms ``text`` is searched by besides its own words, as many times as it states
    them, as one text to index."""
    return " ".join(
        term
        for word, times in Counter(_WORD.findall(text)).items()
        for term in expansion(word) * times
    )


def added_at(text: str, wanted: Collection[str]) -> list[tuple[int, str]]:
    """``(position, term)`` of each of the ``wanted`` terms ``text`` is searched by besides its
    own words, at the word it comes from."""
    found: list[tuple[int, str]] = []
    for word in set(_WORD.findall(text)):
        terms = [term for term in expansion(word) if term in wanted]
        if terms:
            for match in re.finditer(rf"(?<!\w){re.escape(word)}(?!\w)", text):
                found.extend((match.start(), term) for term in terms)
    return found


def query_words(query: str) -> Iterator[str]:
    """The terms a query searches for, in order, with repeats: each word (an abbreviation by
    what it stands for only) and what it is made of."""
    for match in _WORD.finditer(query):
        word = match.group()
        lower = word.lower()
        if lower not in ABBREVIATIONS:
            yield lower
        yield from expansion(word)
