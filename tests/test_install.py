"""The installable distribution, as a user gets it.

The wheel is built from the sdist (as ``uv build`` and ``pip install`` of a checkout do) with
the build backend of the dev environment, so no network is needed. It must ship the engine with
its encodings and the client, and nothing of the hub. Installed into a fresh virtual environment
away from the checkout, with the checkout nowhere on ``sys.path`` and Django unconfigured, it must
import, count exactly from its own encodings with no network, run the README's engine example as
written and chat with the offline demo model.
"""

from __future__ import annotations

import json
import os
import re
import site
import subprocess
import sys
import tarfile
import textwrap
import tomllib
import zipfile
from email.parser import HeaderParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
DIST_INFO = f"{PROJECT['name']}-{PROJECT['version']}.dist-info"
HUB_DISTRIBUTIONS = {"django", "channels", "channels-redis", "daphne", "celery", "psycopg"}
# Variables that would put the checkout on the path or configure Django in a child process.
SCRUBBED = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    return {**env, **extra}


def _run(args: list[str], cwd: Path, **extra: str) -> str:
    result = subprocess.run(
        args, cwd=cwd, env=_env(**extra), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"{args[:2]} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _build(hook: str, source: Path, out: Path) -> Path:
    code = f"import sys\nfrom hatchling.build import {hook}\nprint({hook}(sys.argv[1]))"
    name = _run([sys.executable, "-c", code, str(out)], cwd=source).strip().splitlines()[-1]
    return out / name


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    sdist = _build("build_sdist", ROOT, out)
    unpacked = tmp_path_factory.mktemp("sdist")
    with tarfile.open(sdist) as archive:
        archive.extractall(unpacked, filter="data")
    (source,) = unpacked.iterdir()
    return _build("build_wheel", source, out)


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a fresh virtual environment holding the wheel.

    The wheel's dependencies are read from this environment's site-packages, added by a path
    line: the ``.pth`` files there (the checkout's editable install among them) are not read.
    """
    venv = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=venv)
    python = venv / "bin" / "python"
    purelib = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], venv
        ).strip()
    )
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(purelib)
    (purelib / "_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


def test_the_wheel_ships_the_library_and_nothing_else(wheel: Path) -> None:
    library = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "ctxhub").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
    assert {
        "ctxhub/client/__init__.py",
        "ctxhub/client/remote.py",
        "ctxhub/py.typed",
        "ctxhub/governance/encodings/o200k_base.tiktoken",
        "ctxhub/governance/encodings/cl100k_base.tiktoken",
        "ctxhub/governance/offline/demo.py",
    } <= library
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for encoding in ("o200k_base", "cl100k_base"):
            shipped = archive.read(f"ctxhub/governance/encodings/{encoding}.tiktoken")
            source = ROOT / "ctxhub" / "governance" / "encodings" / f"{encoding}.tiktoken"
            assert shipped == source.read_bytes()
        metadata = HeaderParser().parsestr(archive.read(f"{DIST_INFO}/METADATA").decode())
    # Exactly ctxhub/: neither the Django project (config/) nor the sessions app.
    assert {n for n in names if not n.startswith(f"{DIST_INFO}/")} == library
    requirements = metadata.get_all("Requires-Dist") or []
    names_required = {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower() for r in requirements}
    assert {"pydantic-ai-slim", "tiktoken", "httpx"} <= names_required
    assert not names_required & HUB_DISTRIBUTIONS


def test_installed_it_imports_away_from_the_checkout_without_django(
    installed: Path, tmp_path: Path
) -> None:
    code = textwrap.dedent(
        """
        import importlib, importlib.metadata, importlib.util, json, pkgutil, sys
        import ctxhub
        modules = sorted(m.name for m in pkgutil.walk_packages(ctxhub.__path__, "ctxhub."))
        for name in modules:
            importlib.import_module(name)
        print(json.dumps({
            "file": ctxhub.__file__,
            "path": sys.path,
            "modules": modules,
            "loaded": sorted({m.split(".")[0] for m in sys.modules} & {"django", "celery"}),
            "hub": [n for n in ("config", "sessions") if importlib.util.find_spec(n)],
            "version": importlib.metadata.version("ctxhub"),
        }))
        """
    )
    found = json.loads(_run([str(installed), "-c", code], cwd=tmp_path))
    site_packages = installed.parent.parent
    assert Path(found["file"]).is_relative_to(site_packages)
    # Only the dependencies' site-packages may lie inside the checkout (its .venv).
    assert ROOT not in {(tmp_path / p).resolve() for p in found["path"]}
    assert {"ctxhub.client", "ctxhub.governance.offline", "ctxhub.governance.tokens"} <= set(
        found["modules"]
    )
    assert found["loaded"] == []
    assert found["hub"] == []
    assert found["version"] == PROJECT["version"]


# Runs a file's code as a notebook would: top-level ``await`` allowed.
RUNNER = """
import ast, asyncio, sys

async def main():
    namespace = {"__name__": "__main__"}
    for path in sys.argv[1:]:
        code = compile(open(path).read(), path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(code, namespace)
        if asyncio.iscoroutine(result):
            await result
    return namespace

namespace = asyncio.run(main())
"""

# The history the README's example calls `messages`: 30 turns of a tool returning a long log.
HISTORY = """
from pydantic_ai.messages import (
    ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart,
)
messages = []
for i in range(30):
    messages += [
        ModelRequest(parts=[UserPromptPart(f"Fix the nightly build on db-west-3, see OPS-{i}.")]),
        ModelResponse(parts=[ToolCallPart("read_log", {"job": f"n{i}"}, tool_call_id=f"c{i}")]),
        ModelRequest(parts=[ToolReturnPart(
            "read_log", f"error {i}: relation jobs does not exist\\n" * 400, tool_call_id=f"c{i}"
        )]),
        ModelResponse(parts=[TextPart(f"Read log {i}; the migration did not run.")]),
    ]
"""

CHECKS = """
import json
from pydantic_ai import Agent
from ctxhub.governance import ContextGovernor, Policy, count_tokens, is_summary, resolve_model
from ctxhub.governance.offline import demo_toolset
from ctxhub.governance.tokens import ENCODINGS_DIR, tokenizer_for

agent = Agent(resolve_model("offline:demo"), toolsets=[demo_toolset()],
              capabilities=[ContextGovernor(Policy())])
answer = await agent.run("read notes.txt")
report = governed.report
print(json.dumps({
    "encodings": str(ENCODINGS_DIR),
    "exact": [tokenizer_for(m).exact for m in ("openai:gpt-4o", "openai:gpt-4")],
    "hello": count_tokens("hello world", model="openai:gpt-4o"),
    "report": [report.encoding, report.exact, report.fits, report.tokens_after,
               report.tokens_before, report.budget_tokens],
    "sent": count_tokens(governed.messages, model="openai:gpt-4o"),
    "summary": any(is_summary(m) for m in compacted.messages),
    "compacted": [len(messages), len(compacted.messages)],
    "answer": answer.output,
    "read": [p.content for m in answer.all_messages() for p in m.parts
             if p.part_kind == "tool-return"],
}))
"""


def _readme_engine_example() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## The engine in an agent\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README's engine section has no python example"
    return match.group(1)


def test_installed_it_runs_the_readme_engine_example_and_the_offline_models_offline(
    installed: Path, tmp_path: Path
) -> None:
    (tmp_path / "history.py").write_text(HISTORY)
    (tmp_path / "example.py").write_text(_readme_engine_example())
    (tmp_path / "checks.py").write_text(CHECKS)
    (tmp_path / "notes.txt").write_text("The migration 0042 must run before the nightly job.\n")
    (tmp_path / "run.py").write_text(RUNNER)
    output = _run(
        [str(installed), "run.py", "history.py", "example.py", "checks.py"],
        cwd=tmp_path,
        # Building the OpenAI agent of the example needs a key; nothing is ever sent, and a
        # request would go nowhere.
        OPENAI_API_KEY="sk-test",
        OPENAI_BASE_URL="http://127.0.0.1:9/v1",
    )
    found = json.loads(output.strip().splitlines()[-1])
    assert Path(found["encodings"]).is_relative_to(installed.parent.parent)
    assert found["exact"] == [True, True]
    assert found["hello"] == 2
    encoding, exact, fits, after, before, budget = found["report"]
    assert (encoding, exact, fits) == ("o200k_base", True, True)
    assert after == found["sent"] < before
    assert budget > 0
    assert found["summary"] is True
    assert found["compacted"][1] < found["compacted"][0]
    assert found["answer"].startswith("[offline demo model")
    assert found["read"] == [
        "notes.txt: lines 1-1 of 1\nThe migration 0042 must run before the nightly job."
    ]
