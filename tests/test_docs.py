"""The README and docs/ as a newcomer reads them: every example runs as written, offline.

Every fenced block says its language. ``python``, ``sh``, ``bash`` and ``console`` blocks run,
each in a directory of its own, with no API key and no network beyond this machine (the
Python runner refuses any other address); a block that a line ``It prints:`` follows must
print exactly the ``text`` block after it. A marker comment on the line before a block changes
what happens to it:

- ``<!-- docs-test: hub -->``: it runs against a live hub (the production web server on the
  test database), given as ``CTXHUB_URL`` with a key as ``CTXHUB_KEY``;
- ``<!-- docs-test: skip (why) -->``: it is not run (it installs, serves until stopped, or
  needs Docker); the scripts and ``manage.py`` commands and options it names must exist.

Links between the pages must reach a file and, with an anchor, a heading in it.
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN = {"python", "sh", "bash", "console"}
SHOWN = {"text", "yaml", "toml", "caddy", "nginx"}
MARKER = re.compile(r"^<!-- docs-test: (?P<what>skip|hub)(?: \((?P<why>[^)]+)\))? -->$")
# What a shell example may read from the checkout (copied into its directory).
CHECKOUT_FILES = [".env.example", "docker-compose.yml", "deploy/Caddyfile"]
LOCAL = ("127.0.0.1", "localhost", "::1")

# Runs one example: top-level ``await`` allowed (as at the prompt of ``python -m asyncio``),
# and no connection to anything but this machine.
RUNNER = f"""
import ast, asyncio, inspect, socket, sys

LOCAL = {LOCAL!r}
_getaddrinfo = socket.getaddrinfo
_connect = socket.socket.connect

def getaddrinfo(host, *args, **kwargs):
    name = host.decode() if isinstance(host, bytes) else host
    if name not in (None, "", *LOCAL):
        raise OSError(f"the docs' examples run offline; refused to look up {{name}}")
    return _getaddrinfo(host, *args, **kwargs)

def connect(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in LOCAL:
        raise OSError(f"the docs' examples run offline; refused to connect to {{address[0]}}")
    return _connect(self, address)

socket.getaddrinfo = getaddrinfo
socket.socket.connect = connect

path = sys.argv[1]
code = compile(open(path).read(), path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
namespace = {{"__name__": "__main__"}}
if code.co_flags & inspect.CO_COROUTINE:
    asyncio.run(eval(code, namespace))
else:
    exec(code, namespace)
"""


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    code: str
    marker: str  # "", "skip" or "hub"
    why: str
    prints: str | None  # what the page says it prints

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _blocks(page: Path) -> list[Block]:
    lines = page.read_text().split("\n")
    found: list[tuple[int, str, list[str], str, str]] = []
    position = 0
    while position < len(lines):
        line = lines[position]
        if not line.startswith("```"):
            position += 1
            continue
        lang = line[3:].strip()
        before = next((lines[p] for p in range(position - 1, -1, -1) if lines[p].strip()), "")
        marker = MARKER.match(before.strip())
        end = position + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        assert end < len(lines), f"{page.name}:{position + 1}: a code block is never closed"
        found.append(
            (
                position + 1,
                lang,
                lines[position + 1 : end],
                marker["what"] if marker else "",
                (marker["why"] or "") if marker else "",
            )
        )
        position = end + 1
    blocks = []
    for index, (line, lang, code, what, why) in enumerate(found):
        prints = None
        if index + 1 < len(found):
            next_line = found[index + 1][0]
            between = [text.strip() for text in lines[line : next_line - 1] if text.strip()]
            if between and between[-1] == "It prints:" and found[index + 1][1] == "text":
                prints = "\n".join(found[index + 1][2]) + "\n"
        blocks.append(Block(page, line, lang, "\n".join(code) + "\n", what, why, prints))
    return blocks


BLOCKS = [block for page in PAGES for block in _blocks(page)]


def _selected(marker: str) -> list[Any]:
    return [
        pytest.param(block, id=block.name)
        for block in BLOCKS
        if block.lang in RUN and block.marker == marker
    ]


def _env(**extra: str) -> dict[str, str]:
    """This environment with no API key, no Django settings and no path into the checkout."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.endswith(("_API_KEY", "_API_TOKEN"))
        and name not in {"DJANGO_SETTINGS_MODULE", "PYTHONPATH", "PYTHONSTARTUP", "VIRTUAL_ENV"}
    }
    # A provider's client that slipped through would find nothing there.
    env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}


def _run(block: Block, cwd: Path, **extra: str) -> str:
    for name in CHECKOUT_FILES:
        (cwd / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, cwd / name)
    if block.lang == "python":
        (cwd / "example.py").write_text(block.code)
        (cwd / "_run_example.py").write_text(RUNNER)
        args = [sys.executable, "_run_example.py", "example.py"]
    else:
        args = ["bash", "-euo", "pipefail", "-c", block.code]
    result = subprocess.run(
        args, cwd=cwd, env=_env(**extra), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, (
        f"the example at {block.name} failed:\n{result.stdout}\n{result.stderr}"
    )
    if block.prints is not None:
        assert result.stdout == block.prints, f"{block.name} printed what its page does not say"
    return result.stdout


def test_every_block_says_its_language_and_a_skipped_one_why() -> None:
    assert BLOCKS
    for block in BLOCKS:
        assert block.lang in RUN | SHOWN, f"{block.name}: a block of language {block.lang!r}"
        if block.marker == "skip":
            assert block.why, f"{block.name}: a skipped block says why"


@pytest.mark.parametrize("block", _selected(""))
def test_the_example_runs_offline_as_written(block: Block, tmp_path: Path) -> None:
    _run(block, tmp_path)
    if block.lang == "python" and _awaits(block.code):
        # What the page says of top-level await: pasted at `python -m asyncio`'s prompt, it runs.
        pasted = subprocess.run(
            [sys.executable, "-m", "asyncio"],
            input=block.code,
            cwd=tmp_path,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "Error" not in pasted.stderr, pasted.stderr
        for line in (block.prints or "").splitlines():
            assert line in pasted.stdout + pasted.stderr


def _awaits(code: str) -> bool:
    compiled = compile(code, "example", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    return bool(compiled.co_flags & inspect.CO_COROUTINE)


def test_the_readme_opens_with_the_quick_start() -> None:
    """The first screen: the two commands, the login and a screenshot that exists."""
    first_screen = "\n".join((ROOT / "README.md").read_text().split("\n")[:40])
    assert "scripts/run.sh" in first_screen
    assert "scripts/test.sh" in first_screen
    assert "demo / demo" in first_screen
    shots = re.findall(r"!\[[^\]]*\]\((docs/screenshots/[^)]+\.png)\)", first_screen)
    assert shots
    assert all((ROOT / shot).is_file() for shot in shots)


def test_ci_and_the_scripts_run_the_commands_the_readme_gives() -> None:
    readme = [block for block in BLOCKS if block.page.name == "README.md" and block.lang == "sh"]
    commands = [line.split("#")[0].split() for block in readme for line in block.code.splitlines()]
    run = next(words for words in commands if words and words[0].endswith("scripts/run.sh"))
    test = next(words for words in commands if words and words[0].endswith("scripts/test.sh"))
    assert run == ["scripts/run.sh"]
    assert test == ["scripts/test.sh"]
    assert re.search(r"^exec scripts/test\.sh$", (ROOT / ".ci" / "run").read_text(), re.M)
    for script in ("run.sh", "test.sh"):
        assert os.access(ROOT / "scripts" / script, os.X_OK)
    assert "Usage: scripts/run.sh [PORT]" in (ROOT / "scripts" / "run.sh").read_text()


def _shell_commands(block: Block) -> Iterator[list[str]]:
    for line in block.code.replace("\\\n", " ").splitlines():
        try:
            yield shlex.split(line, comments=True)
        except ValueError:  # a line of a quoted string running over several lines
            yield line.split()


def test_the_commands_the_docs_name_exist() -> None:
    """Every script and ``manage.py`` command (with its options) a shell block names, run or
    not, is there."""
    from django.core.management import get_commands, load_command_class

    commands = get_commands()
    for block in BLOCKS:
        if block.lang not in RUN:
            continue
        for words in _shell_commands(block):
            for word in words:
                if re.fullmatch(r"(\./)?scripts/[\w.-]+", word):
                    assert (ROOT / word).is_file(), f"{block.name}: no {word}"
            if "manage.py" not in words:
                continue
            name, *rest = words[words.index("manage.py") + 1 :]
            assert name in commands, f"{block.name}: no command manage.py {name}"
            parser = load_command_class(commands[name], name).create_parser("manage.py", name)
            known = {option for action in parser._actions for option in action.option_strings}
            for word in rest:
                if word in {"&&", "||", "|", ";"}:
                    break
                if word.startswith("-"):
                    option = word.split("=")[0]
                    assert option in known, f"{block.name}: manage.py {name} has no {option}"


def _slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def test_links_between_the_pages_arrive() -> None:
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(\s*([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            assert linked.exists(), f"{page.name}: a link to {target} reaches nothing"
            if anchor:
                assert anchor in _anchors(linked), f"{page.name}: no heading for {target}"


def test_compose_reads_the_env_file_the_docs_make(tmp_path: Path) -> None:
    """The production page's ``.env`` is what compose reads, with no SECRET_KEY given; and
    its TLS override and Caddyfile make a valid stack."""
    tool = shutil.which("docker-compose")
    if tool is None:
        pytest.fail("docker-compose not found: scripts/test.sh installs it")
    page = [block for block in BLOCKS if block.page.name == "production.md"]
    (make_env,) = [block for block in page if "cp .env.example .env" in block.code]
    _run(make_env, tmp_path)
    assert re.search(r"^SECRET_KEY=\S{40,}$", (tmp_path / ".env").read_text(), re.M)
    env = {k: v for k, v in _env().items() if k != "SECRET_KEY"}

    def config(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [tool, "config", *args], cwd=tmp_path, env=env, capture_output=True, text=True
        )

    assert config("-q").returncode == 0, config("-q").stderr
    (override,) = [block for block in page if block.lang == "yaml"]
    (tmp_path / "docker-compose.override.yml").write_text(override.code)
    caddyfile = next(block for block in page if block.lang == "caddy")
    (tmp_path / "Caddyfile.tls").write_text(caddyfile.code)
    merged = config()
    assert merged.returncode == 0, merged.stderr
    assert "Caddyfile.tls:/etc/caddy/Caddyfile:ro" in merged.stdout
    assert "deploy/Caddyfile" not in merged.stdout


@pytest.fixture(scope="module")
def hub(django_db_setup: None) -> Iterator[str]:
    from tests.conftest import ARTIFACTS
    from tests.processes import asgi_server, celery_worker

    with (
        asgi_server(ARTIFACTS / "logs" / "web-docs.log") as url,
        celery_worker(ARTIFACTS / "logs" / "worker-docs.log"),  # the compaction jobs
    ):
        yield url


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("block", _selected("hub"))
def test_the_example_runs_against_a_hub(
    block: Block, hub: str, django_user_model: Any, tmp_path: Path
) -> None:
    from sessions.api.keys import create_key

    user = django_user_model.objects.create_user("reader", password="reader-password")
    key = create_key(user, name="docs", scopes=["read", "write", "govern"])[1]
    _run(block, tmp_path, CTXHUB_URL=hub, CTXHUB_KEY=key)
