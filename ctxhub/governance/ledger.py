"""The fact ledger: what compactions lose, extracted deterministically so a summary cannot.

Summarisers paraphrase. The things people need back after a compaction are exactly the ones a
paraphrase loses: the file path, the URL, the identifier, the error message, the command, the
number or name the user gave. ``extract_ledger`` lists them from the messages being summarised
(with regular expressions, no model), and ``reconcile`` appends to a summary every item it does
not already contain, verbatim, so no identifier is ever lost to a summariser's whim.

Where each kind is looked for, to keep the ledger about what matters rather than every token
of every file the agent read:

* user prompts: everything (paths, URLs, identifiers, commands, error lines, numbers, names and
  quoted values) — the user's own words are the costliest to lose;
* assistant text: paths, URLs, identifiers, commands;
* tool-call arguments: paths, URLs, commands;
* tool outputs and retry prompts: error messages only;
* an earlier summary: its verbatim facts, plus the paths, URLs and identifiers in its prose.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic_ai.messages import (
    ModelMessage,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from .tokens import as_text

Kind = Literal["path", "url", "identifier", "command", "error", "number", "name"]
KINDS: tuple[Kind, ...] = ("path", "url", "identifier", "command", "error", "number", "name")

FACTS_HEADING = "## Facts kept verbatim"
"""Heading of the section ``reconcile`` appends; parsed back when a summary is summarised."""


_FILE_EXTENSIONS = (
    "py|pyi|js|mjs|cjs|ts|tsx|jsx|md|rst|txt|json|jsonl|toml|yaml|yml|ini|cfg|conf|sql|sh|"
    "bash|zsh|rs|go|java|kt|swift|c|h|cc|cpp|hpp|cs|rb|php|html|htm|css|scss|lock|csv|tsv|xml|"
    "ipynb|proto|tf|dockerfile|env|log|pem|crt"
)
_URL = re.compile(r"\bhttps?://[^\s<>\"'`)\]]+")
_PATH_ROOTED = re.compile(r"(?<![\w/:.@-])(?:~|\.{1,2})?(?:/[\w.@+-]+)+/?")
_PATH_RELATIVE = re.compile(r"(?<![\w/:.@-])[\w.@+-]+(?:/[\w.@+-]+)+/?")
_PATH_BARE = re.compile(rf"(?<![\w/.@-])[\w-]+(?:\.[\w-]+)*\.(?:{_FILE_EXTENSIONS})\b", re.I)
_BACKTICK = re.compile(r"`([^`\n]{2,120})`")
_SNAKE = re.compile(r"\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b")
_CAMEL = re.compile(r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b|\b[a-z]+(?:[A-Z][a-z0-9]+)+\b")
_HEX = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,64}\b")
_UUID = re.compile(
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
)
_TICKET = re.compile(r"\b[A-Z][A-Z0-9]{1,9}-\d+\b|(?<![\w&])#\d+\b")
_NUMBER = re.compile(
    r"(?<![\w.$/-])[$€£]?\d+(?:[.,:]\d+)*(?:\s?(?:%|ms|s|KB|MB|GB|TB|k|tokens|px|USD|EUR))?(?![\w/])"
)
_QUOTED = re.compile(r"\"([^\"\n]{1,80})\"|(?<!\w)'([^'\n]{2,80})'(?!\w)")
_PROMPT_COMMAND = re.compile(r"^\s*\$\s+(\S.{0,200})$", re.M)
_ERROR_LINE = re.compile(
    r"(?:\b[A-Z]\w*(?:Error|Exception|Failure)\b(?::|$)|\berror(?:\[\w+\])?:|\bFAILED\b|"
    r"\bfatal:|\bpanic:|\bTraceback \(most recent call last\))"
)
_FACT_LINE = re.compile(rf"^- ({'|'.join(KINDS)}): (.+)$")
_WORD = re.compile(r"[A-Za-z][\w'-]*")

_COMMANDS = frozenset(
    [
        "git",
        "python",
        "python3",
        "pip",
        "pip3",
        "uv",
        "uvx",
        "pytest",
        "npm",
        "npx",
        "yarn",
        "pnpm",
        "node",
        "deno",
        "bun",
        "make",
        "cmake",
        "docker",
        "docker-compose",
        "kubectl",
        "helm",
        "cargo",
        "rustc",
        "go",
        "curl",
        "wget",
        "ls",
        "cd",
        "cat",
        "grep",
        "rg",
        "sed",
        "awk",
        "bash",
        "sh",
        "zsh",
        "ruff",
        "mypy",
        "black",
        "isort",
        "psql",
        "mysql",
        "redis-cli",
        "celery",
        "brew",
        "apt",
        "apt-get",
        "ssh",
        "scp",
        "rsync",
        "tar",
        "chmod",
        "chown",
        "mkdir",
        "rm",
        "mv",
        "cp",
        "touch",
        "find",
        "export",
        "source",
        "terraform",
        "gh",
        "java",
        "mvn",
        "gradle",
        "dotnet",
    ]
)
_COMMAND_ARGS = frozenset({"command", "cmd", "script", "shell", "commandline", "command_line"})
_PATH_ARGS = frozenset(
    {
        "path",
        "file",
        "filename",
        "file_path",
        "filepath",
        "dir",
        "directory",
        "target",
        "src",
        "dst",
    }
)
_NAME_STOPWORDS = frozenset(
    [
        "I",
        "I'm",
        "I've",
        "I'll",
        "I'd",
        "A",
        "An",
        "The",
        "This",
        "That",
        "These",
        "Those",
        "It",
        "Its",
        "If",
        "In",
        "On",
        "At",
        "For",
        "From",
        "To",
        "And",
        "Or",
        "But",
        "So",
        "Then",
        "Also",
        "Please",
        "Can",
        "Could",
        "Would",
        "Should",
        "Will",
        "We",
        "You",
        "He",
        "She",
        "They",
        "My",
        "Our",
        "Your",
        "Let",
        "Make",
        "Use",
        "Do",
        "Don't",
        "Not",
        "No",
        "Yes",
        "OK",
        "Okay",
        "Is",
        "Are",
        "Was",
        "Were",
        "Be",
        "What",
        "Why",
        "How",
        "When",
        "Where",
        "Which",
        "Who",
        "Here",
        "There",
        "Now",
        "Just",
        "Only",
        "After",
        "Before",
        "Next",
        "First",
        "Last",
        "Thanks",
        "Thank",
        "Hi",
        "Hello",
        "Hey",
    ]
)
_SENTENCE_END = re.compile(r"[.!?:;]\s+|\n+")


class LedgerItem(BaseModel):
    """One fact: its kind, its exact text and the input index of the message it came from."""

    model_config = ConfigDict(frozen=True)

    kind: Kind
    text: str
    index: int | None = None


class Ledger(BaseModel):
    """The facts of the summarised messages, in order of first appearance."""

    model_config = ConfigDict(frozen=True)

    items: list[LedgerItem]
    omitted: int = 0
    """Items left out because the ledger reached its size limit (the oldest, least-user ones)."""

    def texts(self) -> list[str]:
        """The items' texts."""
        return [item.text for item in self.items]

    def __len__(self) -> int:
        return len(self.items)


class Reconciled(BaseModel):
    """A summary with the ledger's missing items appended, and which items were where."""

    model_config = ConfigDict(frozen=True)

    text: str
    kept_by_summarizer: list[LedgerItem]
    added_by_ledger: list[LedgerItem]


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


def paths_in(text: str) -> Iterator[str]:
    """File paths in a text (rooted, relative or bare file names with a known extension)."""
    urls = [m.span() for m in _URL.finditer(text)]

    def in_url(span: tuple[int, int]) -> bool:
        return any(start <= span[0] < end for start, end in urls)

    for pattern in (_PATH_ROOTED, _PATH_RELATIVE, _PATH_BARE):
        for match in pattern.finditer(text):
            candidate = _clean(match.group())
            if in_url(match.span()):
                continue
            if pattern is _PATH_BARE or _is_path(candidate):
                yield candidate


def urls_in(text: str) -> Iterator[str]:
    """URLs in a text, trailing punctuation removed."""
    for match in _URL.finditer(text):
        yield match.group().rstrip(".,;:!?")


def _is_command(span: str) -> bool:
    first = span.split(maxsplit=1)[0] if span.split() else ""
    return first in _COMMANDS or first.startswith("./")


def commands_in(text: str) -> Iterator[str]:
    """Shell commands: backticked spans starting with a known program, and ``$ …`` lines."""
    for match in _BACKTICK.finditer(text):
        if _is_command(match.group(1).strip()):
            yield match.group(1).strip()
    for match in _PROMPT_COMMAND.finditer(text):
        yield match.group(1).strip()


def identifiers_in(text: str, *, prose: bool) -> Iterator[str]:
    """Identifiers: backticked spans, and in prose snake_case, CamelCase, hashes, UUIDs, tickets."""
    for match in _BACKTICK.finditer(text):
        span = match.group(1).strip()
        if span and not _is_command(span) and "\n" not in span:
            yield span
    if not prose:
        return
    for pattern in (_UUID, _HEX, _TICKET, _SNAKE, _CAMEL):
        for match in pattern.finditer(text):
            yield match.group()


def errors_in(text: str, *, limit: int = 3) -> list[str]:
    """Error lines (the last ``limit`` of a text), each cut to 240 characters."""
    found: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and _ERROR_LINE.search(stripped) and not stripped.startswith("Traceback"):
            found.append(stripped[:240])
    return found[-limit:] if limit else found


def numbers_in(text: str) -> Iterator[str]:
    """Numbers with their unit (ports, counts, sizes, money, versions, dates)."""
    for match in _NUMBER.finditer(text):
        yield match.group().strip()


def names_in(text: str) -> Iterator[str]:
    """Capitalised words inside sentences (names, products, places) and quoted values."""
    for match in _QUOTED.finditer(text):
        value = (match.group(1) or match.group(2) or "").strip()
        if value:
            yield value
    for sentence in _SENTENCE_END.split(text):
        words = list(_WORD.finditer(sentence))
        run: list[str] = []
        for number, word in enumerate(words):
            token = word.group()
            capital = token[0].isupper() and not token.isupper() and token not in _NAME_STOPWORDS
            if number > 0 and capital:
                run.append(token)
                continue
            if run:
                yield " ".join(run)
            run = []
        if run:
            yield " ".join(run)


class _Collector:
    def __init__(self) -> None:
        self.items: dict[str, LedgerItem] = {}
        self.user: set[str] = set()

    def add(self, kind: Kind, texts: Iterable[str], index: int | None, *, user: bool) -> None:
        for raw in texts:
            text = raw.strip()
            if len(text) < 2 or len(text) > 240:
                continue
            if text not in self.items:
                self.items[text] = LedgerItem(kind=kind, text=text, index=index)
            if user:
                self.user.add(text)


def _arg_strings(args: Mapping[str, Any] | None) -> Iterator[tuple[str, str]]:
    if not args:
        return
    for key, value in args.items():
        if isinstance(value, str):
            yield key.lower(), value
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, str):
                    yield key.lower(), item


SUMMARY_PREFIXES = (
    "[Summary of ",
    "[Compacted conversation summary]",
    "[Earlier conversation trimmed",
)
"""How the summaries and markers compaction writes begin (000: co-cli's formats)."""


def is_summary_text(text: str) -> bool:
    """Whether a text is one of the summaries or markers compaction writes."""
    return text.startswith(SUMMARY_PREFIXES)


def _collect(collector: _Collector, message: ModelMessage, index: int | None) -> None:
    for part in message.parts:
        if isinstance(part, UserPromptPart):
            text = part.content if isinstance(part.content, str) else as_text(part.content)
            if is_summary_text(text):
                _collect_summary(collector, text, index)
                continue
            collector.add("url", urls_in(text), index, user=True)
            collector.add("path", paths_in(text), index, user=True)
            collector.add("command", commands_in(text), index, user=True)
            collector.add("identifier", identifiers_in(text, prose=True), index, user=True)
            collector.add("error", errors_in(text, limit=0), index, user=True)
            collector.add("number", numbers_in(text), index, user=True)
            collector.add("name", names_in(text), index, user=True)
        elif isinstance(part, TextPart):
            text = part.content
            collector.add("url", urls_in(text), index, user=False)
            collector.add("path", paths_in(text), index, user=False)
            collector.add("command", commands_in(text), index, user=False)
            collector.add("identifier", identifiers_in(text, prose=False), index, user=False)
        elif isinstance(part, ToolCallPart):
            try:
                args = part.args_as_dict()
            except ValueError:
                args = {}
            for key, value in _arg_strings(args):
                if key in _COMMAND_ARGS:
                    collector.add("command", [value.strip()], index, user=False)
                elif key in _PATH_ARGS and "\n" not in value:
                    collector.add("path", [value.strip()], index, user=False)
                else:
                    collector.add("url", urls_in(value), index, user=False)
                    collector.add("path", paths_in(value), index, user=False)
        elif isinstance(part, ToolReturnPart):
            collector.add("error", errors_in(part.model_response_str()), index, user=False)
        elif isinstance(part, RetryPromptPart):
            collector.add("error", errors_in(part.model_response()), index, user=False)


def _collect_summary(collector: _Collector, text: str, index: int | None) -> None:
    """An earlier summary: its verbatim facts keep their kind; its prose gives paths and URLs."""
    head, _, facts = text.partition(FACTS_HEADING)
    for line in facts.splitlines():
        match = _FACT_LINE.match(line.strip())
        if match:
            kind: Kind = match.group(1)  # type: ignore[assignment]
            collector.add(kind, [match.group(2)], index, user=True)
    collector.add("url", urls_in(head), index, user=False)
    collector.add("path", paths_in(head), index, user=False)
    collector.add("command", commands_in(head), index, user=False)
    collector.add("identifier", identifiers_in(head, prose=False), index, user=False)


def extract_ledger(
    messages: Sequence[ModelMessage],
    *,
    indices: Sequence[int] | None = None,
    max_items: int | None = None,
) -> Ledger:
    """The ledger of ``messages`` (``indices`` gives each one's input index for the report).

    Unlimited by default; with ``max_items``, the user's own facts first, then the newest.
    """
    collector = _Collector()
    for position, message in enumerate(messages):
        index = indices[position] if indices is not None else position
        _collect(collector, message, index)
    items = _drop_contained(list(collector.items.values()))
    omitted = 0
    if max_items is not None and len(items) > max_items:
        rank = {id(item): n for n, item in enumerate(items)}
        # The user's facts first, then the most recent: old tool errors matter least.
        chosen = sorted(items, key=lambda i: (i.text not in collector.user, -rank[id(i)]))
        keep = {id(item) for item in chosen[:max_items]}
        omitted = len(items) - max_items
        items = [item for item in items if id(item) in keep]
    return Ledger(items=items, omitted=omitted)


def _drop_contained(items: list[LedgerItem]) -> list[LedgerItem]:
    """Drop numbers and names already inside a longer item (``8080`` inside a URL)."""
    longer = [i.text for i in items if i.kind not in ("number", "name")]
    return [
        item
        for item in items
        if item.kind not in ("number", "name") or not any(item.text in t for t in longer)
    ]


def _normalised(text: str) -> str:
    return " ".join(text.split())


def contains(summary: str, item: LedgerItem) -> bool:
    """Whether a summary states an item verbatim (whitespace-insensitive)."""
    if item.text in summary:
        return True
    return _normalised(item.text) in _normalised(summary)


def facts_section(items: Sequence[LedgerItem]) -> str:
    """The appended section: one ``- kind: text`` line per item, grouped by kind."""
    lines = [FACTS_HEADING]
    for kind in KINDS:
        lines.extend(f"- {kind}: {' '.join(i.text.split())}" for i in items if i.kind == kind)
    return "\n".join(lines)


def reconcile(summary: str, ledger: Ledger) -> Reconciled:
    """Append every ledger item the summary does not contain; say which it kept by itself."""
    kept = [item for item in ledger.items if contains(summary, item)]
    missing = [item for item in ledger.items if not contains(summary, item)]
    text = summary.rstrip()
    if missing:
        text = f"{text}\n\n{facts_section(missing)}"
    return Reconciled(text=text, kept_by_summarizer=kept, added_by_ledger=missing)
