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
* an earlier summary: its verbatim facts, plus the paths, URLs and identifiers in its prose.

Paths are rooted, relative, Windows (``C:\\x``) or bare names with a file extension, well-known
extensionless files (``Makefile``, ``Dockerfile``, ``LICENSE``) and dotfiles (``.env``), whatever
their case and wherever they sit in a sentence. A fact is in a summary only when stated whole:
``db-west-3`` is not kept by ``db-west-30``. With a size limit, the user's facts go last, then
the paths the agent acted on; among the rest, and if need be among those, lower-value kinds
(names, then numbers, errors, commands …) go before higher ones, older before newer.
"""

from __future__ import annotations

import re
from bisect import bisect_right
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
    "py|pyi|pyx|js|mjs|cjs|ts|tsx|jsx|vue|svelte|md|mdx|rst|txt|json|jsonl|toml|yaml|yml|ini|"
    "cfg|conf|sql|sh|bash|zsh|ps1|bat|rs|go|java|kt|kts|scala|swift|dart|lua|c|h|cc|cpp|hpp|cs|"
    "rb|gemspec|php|html|htm|css|scss|lock|csv|tsv|xml|ipynb|proto|graphql|gql|prisma|tf|"
    "tfvars|hcl|nix|gradle|properties|plist|mk|j2|jinja|dockerfile|env|log|pem|crt|patch|diff|"
    "db|sqlite|sqlite3|parquet|pkl|whl|jar|zip|gz|tgz|png|jpg|jpeg|gif|svg|pdf|bak|orig"
)
_URL = re.compile(r"\bhttps?://[^\s<>\"'`)\]]+")
_PATH_ROOTED = re.compile(r"(?<![\w/:.@-])(?:~|\.{1,2})?(?:/[\w.@+-]+)+/?")
_PATH_RELATIVE = re.compile(r"(?<![\w/:.@-])[\w.@+-]+(?:/[\w.@+-]+)+/?")
_PATH_BARE = re.compile(rf"(?<![\w/.@-])[\w-]+(?:\.[\w-]+)*\.(?:{_FILE_EXTENSIONS})\b", re.I)
_PATH_WINDOWS = re.compile(r"(?<![\w/\\])[A-Za-z]:[\\/](?:[\w.@+-]+[\\/]?)*")
_KNOWN_FILES = (
    "Makefile|makefile|GNUmakefile|Dockerfile|Containerfile|Jenkinsfile|Vagrantfile|Procfile|"
    "Gemfile|Rakefile|Brewfile|Podfile|Pipfile|Justfile|justfile|Caddyfile|Tiltfile|Earthfile|"
    "Snakefile|Guardfile|Berksfile|Dangerfile|Fastfile|Taskfile|Doxyfile|README|LICENSE|LICENCE|"
    "COPYING|CHANGELOG|CODEOWNERS"
)
_PATH_NAMED = re.compile(rf"(?<![\w/.@-])(?:{_KNOWN_FILES})(?:\.[\w-]+)*(?![\w/-])")
_PATH_DOTFILE = re.compile(r"(?<![\w/.@~\\-])\.[a-z][\w-]*(?:\.[\w-]+)*(?![\w/-])")
_EXTENSION_NAMES = frozenset(_FILE_EXTENSIONS.split("|")) - {"env"}
_BACKTICK = re.compile(r"`([^`\n]{2,120})`")
_SNAKE = re.compile(r"\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b")
_CAMEL = re.compile(r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b|\b[a-z]+(?:[A-Z][a-z0-9]+)+\b")
_HEX = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,64}\b")
_UUID = re.compile(
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
)
_TICKET = re.compile(r"\b[A-Z][A-Z0-9]{1,9}-\d+\b|(?<![\w&])#\d+\b")
_CODED = re.compile(
    # A token mixing letters and digits (checked by ``_coded``): a host or service name
    # (db-west-3, us-east-1, db-7.internal:5432), a ticket (CVE-2024-3094), a version (v2.3.1,
    # go1.22) or an image tag (redis:7-alpine); or a version starting with its number (1.4.0-rc2).
    r"(?<![\w.@/:=+-])(?=[\w.:+-]*\d)"
    r"(?:[A-Za-z][A-Za-z0-9]*(?:[._+-][A-Za-z0-9]+)*(?::[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*)?"
    r"|\d+(?:\.\d+)+(?:[-+][A-Za-z0-9]+(?:\.[A-Za-z0-9]+)*|[a-z]+\d*))"
    r"(?![\w@/]|[.:+-][A-Za-z0-9])"
)
_SOFTWARE = (
    "python|node|nodejs|deno|bun|java|jdk|go|golang|ruby|rust|php|perl|dotnet|typescript|"
    "postgres|postgresql|mysql|mariadb|redis|mongodb|mongo|sqlite|elasticsearch|kafka|nginx|"
    "django|flask|fastapi|rails|react|vue|angular|nextjs|celery|pydantic|numpy|pandas|"
    "kubernetes|k8s|helm|terraform|docker|ubuntu|debian|alpine|centos|rhel|fedora|macos|ios|"
    "android|windows|gcc|clang|llvm|cuda|openssl"
)
_VERSIONED = re.compile(
    # A product and its version: python 3.12, Postgres 16.2, node 20, Ubuntu 22.04.
    rf"(?<![\w.-])(?=[A-Za-z0-9]+[ \t]+v?\d)(?:(?i:{_SOFTWARE})[ \t]+v?\d+(?:\.\d+)*"
    r"|[A-Z][a-z][A-Za-z]*[ \t]+v?\d+(?:\.\d+)+)(?:[-+]?[A-Za-z][A-Za-z0-9]*)?(?![\w-]|\.\d)"
)
_ASSIGNMENT = re.compile(
    r"(?<![\w.$/])-{0,2}[A-Za-z_][\w.-]*=(?:\"[^\"\n]{0,80}\"|'[^'\n]{0,80}'|[^\s,;'\"`()\[\]{}<>]+)"
)
_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_DOMAIN = re.compile(
    r"(?<![\w.@/-])(?:localhost|[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*"
    r"\.(?:com|org|net|io|dev|cloud|internal|local|localdomain|lan|corp|intra|svc|eu|uk|de))"
    r"(?::\d+)?(?![\w-]|\.\w)"
)
_ENVIRONMENT = re.compile(
    # Always an environment: production, staging and their short forms.
    r"(?<![\w-])(?:production|staging|prod|preprod|pre-prod|preproduction|pre-production|stg|uat)"
    r"(?![\w-])",
    re.I,
)
_ENVIRONMENT_STATED = re.compile(
    # A word that is an environment only when said to be one: "the dev cluster", "env: qa".
    r"(?<![\w-])(?:dev|development|test|testing|qa|sandbox|demo|local|canary|integration|perf|"
    r"beta|preview|live)[ \t]+(?:env|envs|environment|environments|cluster|server|servers|"
    r"instance|stack|tier|namespace|deployment|database|db)(?![\w-])"
    r"|(?<![\w-])(?:env|environment)[ \t]*:[ \t]*[A-Za-z][\w-]*",
    re.I,
)
_ENVIRONMENT_TARGET = re.compile(
    # "deploy to qa", "run it on dev": a short environment name after a preposition.
    r"\b(?:to|on|in|into|from)[ \t]+(?:the[ \t]+)?(dev|qa|sandbox|canary)(?![\w-])",
    re.I,
)
_NUMBER = re.compile(
    r"(?<![\w.$/-])\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?(?![\w/-])|"
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
        "paths",
        "file",
        "files",
        "filename",
        "filenames",
        "file_path",
        "filepath",
        "dir",
        "dirs",
        "directory",
        "directories",
        "folder",
        "target",
        "src",
        "dst",
        "source",
        "destination",
        "dest",
        "cwd",
        "workdir",
        "working_dir",
        "root",
    }
)
_PATH_ARG_SUFFIXES = ("path", "paths", "file", "files", "filename", "filenames", "dir", "dirs")
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
    """Items left out because the ledger reached its size limit: never a user's fact or a path
    the agent acted on while others remain; the lower-value kinds and the oldest first."""

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
    urls = [m.span() for m in _URL.finditer(text)]

    def in_url(span: tuple[int, int]) -> bool:
        return any(start <= span[0] < end for start, end in urls)

    for pattern in (_PATH_ROOTED, _PATH_RELATIVE, _PATH_WINDOWS, _PATH_BARE, _PATH_NAMED):
        for match in pattern.finditer(text):
            candidate = _clean(match.group())
            if in_url(match.span()):
                continue
            if pattern is _PATH_WINDOWS:
                if len(candidate) <= 3:
                    continue
            elif pattern not in (_PATH_BARE, _PATH_NAMED) and not _is_path(candidate):
                continue
            yield match.start(), match.start() + len(candidate), candidate
    for match in _PATH_DOTFILE.finditer(text):
        candidate = _clean(match.group())
        extension = candidate[1:].lower() in _EXTENSION_NAMES
        if len(candidate) > 2 and not extension and not in_url(match.span()):
            yield match.start(), match.start() + len(candidate), candidate


def paths_in(text: str) -> Iterator[str]:
    """File paths in a text: rooted, relative, Windows, bare file names with a known extension,
    well-known extensionless files (``Makefile``, ``LICENSE``) and dotfiles (``.env``)."""
    for _, _, path in _path_spans(text):
        yield path


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


def _coded(token: str) -> bool:
    return any(c.isdigit() for c in token) and any(c.isalpha() for c in token)


def identifiers_in(text: str, *, prose: bool) -> Iterator[str]:
    """Identifiers: backticked spans and, in prose, what people type in passing (snake_case,
    CamelCase, hashes, UUIDs, tickets, hosts, domains, e-mails, versions, settings and
    environments). Each once and whole: a match inside a longer one, a URL or a path is not
    another identifier."""
    found: list[tuple[int, int, str]] = []
    for match in _BACKTICK.finditer(text):
        span = match.group(1).strip()
        if span and not _is_command(span) and "\n" not in span:
            found.append((match.start(1), match.end(1), span))
    if prose:
        taken = [m.span() for m in _URL.finditer(text)]
        taken += [(start, end) for start, end, _ in _path_spans(text)]
        found.extend(_outside(_prose_identifiers(text), taken))
    for _, _, candidate in _outermost(found):
        yield candidate


def _prose_identifiers(text: str) -> Iterator[tuple[int, int, str]]:
    for pattern in (_UUID, _HEX, _TICKET, _SNAKE, _CAMEL, _EMAIL, _DOMAIN, _ENVIRONMENT):
        for match in pattern.finditer(text):
            yield match.start(), match.end(), match.group()
    for match in _CODED.finditer(text):
        if _coded(match.group()):
            yield match.start(), match.end(), match.group()
    for match in _VERSIONED.finditer(text):
        if match.group().split()[0] not in _NAME_STOPWORDS:
            yield match.start(), match.end(), match.group()
    for match in _ASSIGNMENT.finditer(text):
        value = _clean(match.group())
        if not value.endswith("="):
            yield match.start(), match.start() + len(value), value
    for match in _ENVIRONMENT_STATED.finditer(text):
        yield match.start(), match.end(), match.group()
    for match in _ENVIRONMENT_TARGET.finditer(text):
        yield match.start(1), match.end(1), match.group(1)


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
        run: list[re.Match[str]] = []
        for number, word in enumerate(_WORD.finditer(sentence)):
            token = word.group()
            capital = token[0].isupper() and not token.isupper() and token not in _NAME_STOPWORDS
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


class _Collector:
    def __init__(self) -> None:
        self.items: dict[str, LedgerItem] = {}
        self.user: set[str] = set()
        self.acted: set[str] = set()

    def add(
        self,
        kind: Kind,
        texts: Iterable[str],
        index: int | None,
        *,
        user: bool,
        acted: bool = False,
    ) -> None:
        for raw in texts:
            text = raw.strip()
            if len(text) < 2 or len(text) > 240:
                continue
            if text not in self.items:
                self.items[text] = LedgerItem(kind=kind, text=text, index=index)
            if user:
                self.user.add(text)
            if acted:
                self.acted.add(text)


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
    return key in _PATH_ARGS or key.endswith(tuple(f"_{s}" for s in _PATH_ARG_SUFFIXES))


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
                    collector.add("path", paths_in(value), index, user=False, acted=True)
                elif _is_path_arg(key) and "\n" not in value and "://" not in value:
                    collector.add("path", [value.strip()], index, user=False, acted=True)
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

    Unlimited by default; with ``max_items``, the user's own facts are kept first, then the
    paths the agent acted on, then the rest; within each, higher-value kinds (in ``KINDS``
    order: paths first, names last) before lower ones, and newer before older.
    """
    collector = _Collector()
    for position, message in enumerate(messages):
        index = indices[position] if indices is not None else position
        _collect(collector, message, index)
    items = _drop_contained(list(collector.items.values()))
    omitted = 0
    if max_items is not None and len(items) > max_items:
        rank = {id(item): n for n, item in enumerate(items)}

        def value(item: LedgerItem) -> tuple[int, int, int]:
            tier = 0 if item.text in collector.user else 1 if item.text in collector.acted else 2
            return tier, KINDS.index(item.kind), -rank[id(item)]

        keep = {id(item) for item in sorted(items, key=value)[: max(max_items, 0)]}
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
