"""What counts as a fact in text, as patterns and word lists: paths, URLs, identifiers,
commands, errors, numbers and names (see ``ledger``)."""

from __future__ import annotations

import re
from typing import Literal

Kind = Literal["path", "url", "identifier", "command", "error", "number", "name"]
KINDS: tuple[Kind, ...] = ("path", "url", "identifier", "command", "error", "number", "name")

FACTS_HEADING = "## Facts kept verbatim"
"""Heading of the section ``reconcile`` appends; parsed back when a summary is summarised."""


FILE_EXTENSIONS = (
    "py|pyi|pyx|js|mjs|cjs|ts|tsx|jsx|vue|svelte|md|mdx|rst|txt|json|jsonl|toml|yaml|yml|ini|"
    "cfg|conf|sql|sh|bash|zsh|ps1|bat|rs|go|java|kt|kts|scala|swift|dart|lua|c|h|cc|cpp|hpp|cs|"
    "rb|gemspec|php|html|htm|css|scss|lock|csv|tsv|xml|ipynb|proto|graphql|gql|prisma|tf|"
    "tfvars|hcl|nix|gradle|properties|plist|mk|j2|jinja|dockerfile|env|log|pem|crt|patch|diff|"
    "db|sqlite|sqlite3|parquet|pkl|whl|jar|zip|gz|tgz|png|jpg|jpeg|gif|svg|pdf|bak|orig"
)
URL = re.compile(r"\bhttps?://[^\s<>\"'`)\]]+")
PATH_ROOTED = re.compile(r"(?<![\w/:.@-])(?:~|\.{1,2})?(?:/[\w.@+-]+)+/?")
PATH_RELATIVE = re.compile(r"(?<![\w/:.@-])[\w.@+-]+(?:/[\w.@+-]+)+/?")
PATH_BARE = re.compile(rf"(?<![\w/.@-])[\w-]+(?:\.[\w-]+)*\.(?:{FILE_EXTENSIONS})\b", re.I)
PATH_WINDOWS = re.compile(r"(?<![\w/\\])[A-Za-z]:[\\/](?:[\w.@+-]+[\\/]?)*")
KNOWN_FILES = (
    "Makefile|makefile|GNUmakefile|Dockerfile|Containerfile|Jenkinsfile|Vagrantfile|Procfile|"
    "Gemfile|Rakefile|Brewfile|Podfile|Pipfile|Justfile|justfile|Caddyfile|Tiltfile|Earthfile|"
    "Snakefile|Guardfile|Berksfile|Dangerfile|Fastfile|Taskfile|Doxyfile|README|LICENSE|LICENCE|"
    "COPYING|CHANGELOG|CODEOWNERS"
)
PATH_NAMED = re.compile(rf"(?<![\w/.@-])(?:{KNOWN_FILES})(?:\.[\w-]+)*(?![\w/-])")
PATH_DOTFILE = re.compile(r"(?<![\w/.@~\\-])\.[a-z][\w-]*(?:\.[\w-]+)*(?![\w/-])")
EXTENSION_NAMES = frozenset(FILE_EXTENSIONS.split("|")) - {"env"}
BACKTICK = re.compile(r"`([^`\n]{2,120})`")
SNAKE = re.compile(r"\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b")
CAMEL = re.compile(r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b|\b[a-z]+(?:[A-Z][a-z0-9]+)+\b")
HEX = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,64}\b")
UUID = re.compile(
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
)
TICKET = re.compile(r"\b[A-Z][A-Z0-9]{1,9}-\d+\b|(?<![\w&])#\d+\b")
CODED = re.compile(
    # A token mixing letters and digits (checked by ``_coded``): a host or service name
    # (db-west-3, us-east-1, db-7.internal:5432), a ticket (CVE-2024-3094), a version (v2.3.1,
    # go1.22) or an image tag (redis:7-alpine); or a version starting with its number (1.4.0-rc2).
    r"(?<![\w.@/:=+-])(?=[\w.:+-]*\d)"
    r"(?:[A-Za-z][A-Za-z0-9]*(?:[._+-][A-Za-z0-9]+)*(?::[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*)?"
    r"|\d+(?:\.\d+)+(?:[-+][A-Za-z0-9]+(?:\.[A-Za-z0-9]+)*|[a-z]+\d*))"
    r"(?![\w@/]|[.:+-][A-Za-z0-9])"
)
SOFTWARE = (
    "python|node|nodejs|deno|bun|java|jdk|go|golang|ruby|rust|php|perl|dotnet|typescript|"
    "postgres|postgresql|mysql|mariadb|redis|mongodb|mongo|sqlite|elasticsearch|kafka|nginx|"
    "django|flask|fastapi|rails|react|vue|angular|nextjs|celery|pydantic|numpy|pandas|"
    "kubernetes|k8s|helm|terraform|docker|ubuntu|debian|alpine|centos|rhel|fedora|macos|ios|"
    "android|windows|gcc|clang|llvm|cuda|openssl"
)
VERSIONED = re.compile(
    # A product and its version: python 3.12, Postgres 16.2, node 20, Ubuntu 22.04.
    rf"(?<![\w.-])(?=[A-Za-z0-9]+[ \t]+v?\d)(?:(?i:{SOFTWARE})[ \t]+v?\d+(?:\.\d+)*"
    r"|[A-Z][a-z][A-Za-z]*[ \t]+v?\d+(?:\.\d+)+)(?:[-+]?[A-Za-z][A-Za-z0-9]*)?(?![\w-]|\.\d)"
)
ASSIGNMENT = re.compile(
    r"(?<![\w.$/])-{0,2}[A-Za-z_][\w.-]*=(?:\"[^\"\n]{0,80}\"|'[^'\n]{0,80}'|[^\s,;'\"`()\[\]{}<>]+)"
)
EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
DOMAIN = re.compile(
    r"(?<![\w.@/-])(?:localhost|[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*"
    r"\.(?:com|org|net|io|dev|cloud|internal|local|localdomain|lan|corp|intra|svc|eu|uk|de))"
    r"(?::\d+)?(?![\w-]|\.\w)"
)
ENVIRONMENT = re.compile(
    # Always an environment: production, staging and their short forms.
    r"(?<![\w-])(?:production|staging|prod|preprod|pre-prod|preproduction|pre-production|stg|uat)"
    r"(?![\w-])",
    re.I,
)
ENVIRONMENT_STATED = re.compile(
    # A word that is an environment only when said to be one: "the dev cluster", "env: qa".
    r"(?<![\w-])(?:dev|development|test|testing|qa|sandbox|demo|local|canary|integration|perf|"
    r"beta|preview|live)[ \t]+(?:env|envs|environment|environments|cluster|server|servers|"
    r"instance|stack|tier|namespace|deployment|database|db)(?![\w-])"
    r"|(?<![\w-])(?:env|environment)[ \t]*:[ \t]*[A-Za-z][\w-]*",
    re.I,
)
ENVIRONMENT_TARGET = re.compile(
    # "deploy to qa", "run it on dev": a short environment name after a preposition.
    r"\b(?:to|on|in|into|from)[ \t]+(?:the[ \t]+)?(dev|qa|sandbox|canary)(?![\w-])",
    re.I,
)
NUMBER = re.compile(
    r"(?<![\w.$/-])\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?(?![\w/-])|"
    r"(?<![\w.$/-])[$€£]?\d+(?:[.,:]\d+)*(?:\s?(?:%|ms|s|KB|MB|GB|TB|k|tokens|px|USD|EUR))?(?![\w/])"
)
QUOTED = re.compile(r"\"([^\"\n]{1,80})\"|(?<!\w)'([^'\n]{2,80})'(?!\w)")
PROMPT_COMMAND = re.compile(r"^\s*\$\s+(\S.{0,200})$", re.M)
ERROR_LINE = re.compile(
    r"(?:\b[A-Z]\w*(?:Error|Exception|Failure)\b(?::|$)|\berror(?:\[\w+\])?:|\bFAILED\b|"
    r"\bfatal:|\bpanic:|\bTraceback \(most recent call last\))"
)
FACT_LINE = re.compile(rf"^- ({'|'.join(KINDS)}): (.+)$")
WORD = re.compile(r"[A-Za-z][\w'-]*")

COMMANDS = frozenset(
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
COMMAND_ARGS = frozenset({"command", "cmd", "script", "shell", "commandline", "command_line"})
PATH_ARGS = frozenset(
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
PATH_ARG_SUFFIXES = ("path", "paths", "file", "files", "filename", "filenames", "dir", "dirs")
NAME_STOPWORDS = frozenset(
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
SENTENCE_END = re.compile(r"[.!?:;]\s+|\n+")
