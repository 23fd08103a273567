"""Finding facts in text: each kind's finder, over the patterns of ``fact_patterns``."""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator

from .fact_patterns import (
    ASSIGNMENT,
    BACKTICK,
    CAMEL,
    CODED,
    COMMANDS,
    DOMAIN,
    EMAIL,
    ENVIRONMENT,
    ENVIRONMENT_STATED,
    ENVIRONMENT_TARGET,
    ERROR_LINE,
    EXTENSION_NAMES,
    HEX,
    NAME_STOPWORDS,
    NUMBER,
    PATH_BARE,
    PATH_DOTFILE,
    PATH_NAMED,
    PATH_RELATIVE,
    PATH_ROOTED,
    PATH_WINDOWS,
    PROMPT_COMMAND,
    QUOTED,
    SENTENCE_END,
    SNAKE,
    TICKET,
    URL,
    UUID,
    VERSIONED,
    WORD,
)


def _clean(text: str) -> str:
    return text.strip().rstrip(".,;:!?)\"'`")


def _is_path(candidate: str) -> bool:
    """A slash-separated token is a path when it is rooted, has an extension or is deep."""
    if not any(c.isalpha() for c in candidate) or "//" in candidate:
        return False
    if candidate.startswith(("/", "./", "../", "~/")):
        return len(candidate) > 2
    last = candidate.rstrip("/").rsplit("/", 1)[-1]
    return "." in last.strip(".") or candidate.count("/") >= 2


def _path_spans(text: str) -> list[tuple[int, int, str]]:
    """File paths in a text with where they are (start, end, cleaned path); a path inside a
    longer one (``app.py`` of ``C:\\src\\app.py``) is not another path."""
    return _outermost(_path_candidates(text))


def _outermost(spans: Iterable[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """The spans inside no other one, in order of position (of identical spans, the first)."""
    kept: list[tuple[int, int, str]] = []
    reach = -1
    for start, end, text in sorted(spans, key=lambda span: (span[0], -span[1])):
        if end > reach:
            kept.append((start, end, text))
            reach = end
    return kept


def _outside(
    spans: Iterable[tuple[int, int, str]], taken: Iterable[tuple[int, int]]
) -> Iterator[tuple[int, int, str]]:
    """The spans not inside a ``taken`` one."""
    merged: list[list[int]] = []
    for start, end in sorted(taken):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    starts = [start for start, _ in merged]
    for span in spans:
        at = bisect_right(starts, span[0]) - 1
        if at < 0 or merged[at][1] < span[1]:
            yield span


def _path_candidates(text: str) -> Iterator[tuple[int, int, str]]:
    urls = [m.span() for m in URL.finditer(text)]

    def in_url(span: tuple[int, int]) -> bool:
        return any(start <= span[0] < end for start, end in urls)

    for pattern in (PATH_ROOTED, PATH_RELATIVE, PATH_WINDOWS, PATH_BARE, PATH_NAMED):
        for match in pattern.finditer(text):
            candidate = _clean(match.group())
            if in_url(match.span()):
                continue
            if pattern is PATH_WINDOWS:
                if len(candidate) <= 3:
                    continue
            elif pattern not in (PATH_BARE, PATH_NAMED) and not _is_path(candidate):
                continue
            yield match.start(), match.start() + len(candidate), candidate
    for match in PATH_DOTFILE.finditer(text):
        candidate = _clean(match.group())
        extension = candidate[1:].lower() in EXTENSION_NAMES
        if len(candidate) > 2 and not extension and not in_url(match.span()):
            yield match.start(), match.start() + len(candidate), candidate


def paths_in(text: str) -> Iterator[str]:
    """File paths in a text: rooted, relative, Windows, bare file names with a known extension,
    well-known extensionless files (``Makefile``, ``LICENSE``) and dotfiles (``.env``)."""
    for _, _, path in _path_spans(text):
        yield path


def urls_in(text: str) -> Iterator[str]:
    """URLs in a text, trailing punctuation removed."""
    for match in URL.finditer(text):
        yield match.group().rstrip(".,;:!?")


def _is_command(span: str) -> bool:
    first = span.split(maxsplit=1)[0] if span.split() else ""
    return first in COMMANDS or first.startswith("./")


def commands_in(text: str) -> Iterator[str]:
    """Shell commands: backticked spans starting with a known program, and ``$ …`` lines."""
    for match in BACKTICK.finditer(text):
        if _is_command(match.group(1).strip()):
            yield match.group(1).strip()
    for match in PROMPT_COMMAND.finditer(text):
        yield match.group(1).strip()


def _coded(token: str) -> bool:
    return any(c.isdigit() for c in token) and any(c.isalpha() for c in token)


def identifiers_in(text: str, *, prose: bool) -> Iterator[str]:
    """Identifiers: backticked spans and, in prose, what people type in passing (snake_case,
    CamelCase, hashes, UUIDs, tickets, hosts, domains, e-mails, versions, settings and
    environments). Each once and whole: a match inside a longer one, a URL or a path is not
    another identifier."""
    found: list[tuple[int, int, str]] = []
    for match in BACKTICK.finditer(text):
        span = match.group(1).strip()
        if span and not _is_command(span) and "\n" not in span:
            found.append((match.start(1), match.end(1), span))
    if prose:
        taken = [m.span() for m in URL.finditer(text)]
        taken += [(start, end) for start, end, _ in _path_spans(text)]
        found.extend(_outside(_prose_identifiers(text), taken))
    for _, _, candidate in _outermost(found):
        yield candidate


def _prose_identifiers(text: str) -> Iterator[tuple[int, int, str]]:
    for pattern in (UUID, HEX, TICKET, SNAKE, CAMEL, EMAIL, DOMAIN, ENVIRONMENT):
        for match in pattern.finditer(text):
            yield match.start(), match.end(), match.group()
    for match in CODED.finditer(text):
        if _coded(match.group()):
            yield match.start(), match.end(), match.group()
    for match in VERSIONED.finditer(text):
        if match.group().split()[0] not in NAME_STOPWORDS:
            yield match.start(), match.end(), match.group()
    for match in ASSIGNMENT.finditer(text):
        value = _clean(match.group())
        if not value.endswith("="):
            yield match.start(), match.start() + len(value), value
    for match in ENVIRONMENT_STATED.finditer(text):
        yield match.start(), match.end(), match.group()
    for match in ENVIRONMENT_TARGET.finditer(text):
        yield match.start(1), match.end(1), match.group(1)


def errors_in(text: str, *, limit: int = 3) -> list[str]:
    """Error lines (the last ``limit`` of a text), each cut to 240 characters."""
    found: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and ERROR_LINE.search(stripped) and not stripped.startswith("Traceback"):
            found.append(stripped[:240])
    return found[-limit:] if limit else found


def numbers_in(text: str) -> Iterator[str]:
    """Numbers with their unit (ports, counts, sizes, money, versions, dates)."""
    for match in NUMBER.finditer(text):
        yield match.group().strip()


def names_in(text: str) -> Iterator[str]:
    """Capitalised words inside sentences (names, products, places) and quoted values."""
    for match in QUOTED.finditer(text):
        value = (match.group(1) or match.group(2) or "").strip()
        if value:
            yield value
    for sentence in SENTENCE_END.split(text):
        run: list[re.Match[str]] = []
        for number, word in enumerate(WORD.finditer(sentence)):
            token = word.group()
            capital = token[0].isupper() and not token.isupper() and token not in NAME_STOPWORDS
            # A run is verbatim: its words are separated by spaces only, nothing else.
            joined = not run or not sentence[run[-1].end() : word.start()].strip(" \t")
            if number > 0 and capital and joined:
                run.append(word)
                continue
            if run:
                yield sentence[run[0].start() : run[-1].end()]
            run = [word] if number > 0 and capital else []
        if run:
            yield sentence[run[0].start() : run[-1].end()]
