"""``offline:demo``: a chat model that needs no API key and gives governance real work.

It answers every message by looking at this repository with two harmless tools — listing a
directory and reading a file, both confined to the repository root — and then reports what it
found. The outputs are real and sometimes large, so someone with no API key can chat and watch
truncation, masking, the window and compaction act on them. A message starting "recall" is
looked up with the ``recall`` tool, when the agent has it (what governance hid, searched).
Every answer says it comes from the offline demo model.

The tools refuse absolute paths, ``..`` escapes, symbolic links leading outside the root and
hidden files (``.env``, ``.git``), and read at most 256 KB of text.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.profiles import ModelProfile
from pydantic_ai.toolsets import FunctionToolset

from ..fact_finders import paths_in
from ..tokens import OFFLINE_WINDOWS

OFFLINE_DEMO = "offline:demo"
LABEL = "[offline demo model — no API key, no network]"
_CHECKOUT = Path(__file__).resolve().parents[3]
DEFAULT_WINDOW = OFFLINE_WINDOWS[OFFLINE_DEMO]
# With a pace, a tool call takes this many times as long as a streamed word.
TOOL_PACE_FACTOR = 10
MAX_READ_BYTES = 256 * 1024
MAX_TOOL_CALLS_PER_TURN = 3
_PUNCTUATION = ",;:!?()[]{}'\"`"
_RECALL = re.compile(r"^\s*recall\b[\s:,]*(.+)", re.IGNORECASE | re.DOTALL)
"""A prompt asking to recall something: ``recall the deploy key``."""
_LIST_WORDS = re.compile(
    r"\b(list|ls|files?|director(y|ies)|folders?|tree|structure|contents?)\b", re.I
)


class PathRefused(ValueError):
    """A demo tool was asked for a path outside the repository or a hidden file."""


def confine(root: Path, path: str) -> Path:
    """``path`` resolved inside ``root``; PathRefused when it would leave it or is hidden."""
    if not path or path.strip() in (".", "./"):
        return root.resolve()
    relative = Path(path.strip())
    if relative.is_absolute():
        raise PathRefused(
            f"{path!r}: absolute paths are refused; give a path inside the repository"
        )
    if any(part == ".." for part in relative.parts):
        raise PathRefused(f"{path!r}: '..' is refused; the tools stay inside the repository")
    if any(part.startswith(".") for part in relative.parts):
        raise PathRefused(f"{path!r}: hidden files and directories are not shown")
    base = root.resolve()
    target = (base / relative).resolve()
    if not target.is_relative_to(base):
        raise PathRefused(f"{path!r}: leads outside the repository")
    return target


def list_files(root: Path, path: str = ".") -> str:
    """Entries of a directory of the repository, directories first, hidden ones left out."""
    try:
        directory = confine(root, path)
    except PathRefused as refused:
        return f"Refused: {refused}"
    if not directory.is_dir():
        return f"Not a directory: {path}"
    entries = sorted(
        (p for p in directory.iterdir() if not p.name.startswith(".")),
        key=lambda p: (not p.is_dir(), p.name),
    )
    lines = [
        f"{p.name}/" if p.is_dir() else f"{p.name} ({p.stat().st_size} bytes)" for p in entries
    ]
    shown = path.strip() or "."
    return f"{shown}: {len(lines)} entries\n" + "\n".join(lines)


def read_file(root: Path, path: str, offset: int = 0, limit: int = 400) -> str:
    """Lines ``offset`` to ``offset + limit`` of a text file of the repository."""
    try:
        target = confine(root, path)
    except PathRefused as refused:
        return f"Refused: {refused}"
    if not target.is_file():
        return f"No such file: {path}"
    data = target.read_bytes()[:MAX_READ_BYTES]
    if b"\x00" in data:
        return f"{path} is a binary file"
    lines = data.decode("utf-8", errors="replace").splitlines()
    offset = max(0, offset)
    limit = max(1, min(limit, 5_000))
    selected = lines[offset : offset + limit]
    header = f"{path}: lines {offset + 1}-{offset + len(selected)} of {len(lines)}"
    return header + "\n" + "\n".join(selected)


def default_root() -> Path:
    """What the demo tools browse by default: ctxhub's repository when it runs from its
    checkout; installed (in site-packages), the directory it is run from."""
    if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "ctxhub").is_dir():
        return _CHECKOUT
    return Path.cwd()


def demo_toolset(root: Path | str | None = None, *, pace: float = 0.0) -> FunctionToolset[Any]:
    """The demo tools, confined to ``root`` (``default_root()`` by default); with a ``pace``
    (seconds per streamed word of the model), each call takes ``TOOL_PACE_FACTOR`` times it,
    as a real tool takes its time."""
    base = Path(root) if root is not None else default_root()
    delay = pace * TOOL_PACE_FACTOR

    async def list_files_tool(path: str = ".") -> str:
        """List a directory of the repository.

        Args:
            path: Directory relative to the repository root; "." for the root.
        """
        await asyncio.sleep(delay)
        return list_files(base, path)

    async def read_file_tool(path: str, offset: int = 0, limit: int = 400) -> str:
        """Read lines of a text file of the repository.

        Args:
            path: File path relative to the repository root.
            offset: First line to return, counting from 0.
            limit: How many lines to return.
        """
        await asyncio.sleep(delay)
        return read_file(base, path, offset, limit)

    toolset: FunctionToolset[Any] = FunctionToolset()
    toolset.add_function(list_files_tool, takes_ctx=False, name="list_files")
    toolset.add_function(read_file_tool, takes_ctx=False, name="read_file")
    return toolset


# --- the model's behaviour --------------------------------------------------------------------


def _turn(messages: list[ModelMessage]) -> tuple[str, list[ModelMessage]]:
    """The latest user prompt and the messages after it.

    A system prompt in the middle of the conversation (the budget note) reaches a function
    model as ``<system>``-tagged user text, in the request it joins: nobody's prompt."""
    for position in range(len(messages) - 1, -1, -1):
        message = messages[position]
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if (
                    isinstance(part, UserPromptPart)
                    and isinstance(part.content, str)
                    and not part.content.startswith(SYSTEM_VOICE)
                ):
                    return part.content, messages[position + 1 :]
    return "", []


SYSTEM_VOICE = "<system"
"""How pydantic-ai opens a system prompt it sends as user text."""


def _paths(prompt: str) -> list[str]:
    """Paths the prompt names: words with a slash (not URLs), and bare file names.

    Absolute paths are passed on too: the tools refuse them, and the refusal is worth seeing.
    """
    words = (word.strip(_PUNCTUATION) for word in prompt.split())
    slashed = [w for w in words if "/" in w and "://" not in w]
    return list(dict.fromkeys([*slashed, *paths_in(prompt)]))


def _plan(prompt: str, available: set[str]) -> list[tuple[str, dict[str, Any]]]:
    asked = _RECALL.match(prompt)
    if asked and "recall" in available:
        return [("recall", {"query": asked.group(1).strip()[:500]})]
    paths = _paths(prompt)
    if paths:
        steps: list[tuple[str, dict[str, Any]]] = []
        for path in paths[:MAX_TOOL_CALLS_PER_TURN]:
            # A last segment without an extension is taken for a directory.
            is_dir = path.endswith("/") or "." not in path.rstrip("/").rsplit("/", 1)[-1]
            steps.append(
                ("list_files" if is_dir else "read_file", {"path": path.rstrip("/") or "."})
            )
        return steps
    if _LIST_WORDS.search(prompt):
        return [("list_files", {"path": "."})]
    return [("list_files", {"path": "."}), ("read_file", {"path": "README.md", "limit": 60})]


def _results(after: list[ModelMessage]) -> list[ToolReturnPart]:
    return [
        part
        for message in after
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


def _describe(result: ToolReturnPart) -> str:
    text = result.model_response_str()
    if result.tool_name == "recall":  # what was found is the answer, not a preview of it
        return f"- recall: {text[:3_000]}"
    lines = text.splitlines()
    first = lines[0] if lines else ""
    preview = next((ln.strip() for ln in lines[1:] if ln.strip()), "")
    detail = f"; it begins: {preview[:120]}" if preview else ""
    return f"- {result.tool_name}: {first}{detail}"


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The demo model's next response: the next planned tool call, or its report."""
    prompt, after = _turn(messages)
    available = {tool.name for tool in info.function_tools}
    results = _results(after)
    if {"list_files", "read_file"} <= available and len(results) < MAX_TOOL_CALLS_PER_TURN:
        plan = _plan(prompt, available)
        if len(results) < len(plan):
            name, args = plan[len(results)]
            call_id = f"demo_{len(messages)}_{len(results)}"
            return ModelResponse(
                parts=[ToolCallPart(name, args, tool_call_id=call_id)], model_name=OFFLINE_DEMO
            )
    if not available:
        text = (
            f"{LABEL} I can list and read this repository's files when the demo tools are "
            "available; without them I can only echo: " + prompt[:200]
        )
    elif results:
        text = f"{LABEL} Here is what I found:\n" + "\n".join(_describe(r) for r in results)
    else:
        text = f"{LABEL} I had nothing to look up for: {prompt[:200]}"
    return ModelResponse(parts=[TextPart(text)], model_name=OFFLINE_DEMO)


async def respond_stream(
    messages: list[ModelMessage], info: AgentInfo, pace: float = 0.0
) -> AsyncIterator[str | DeltaToolCalls]:
    """The same response, streamed: text word by word (``pace`` seconds apart), or the tool
    call at once."""
    response = respond(messages, info)
    part = response.parts[0]
    if isinstance(part, ToolCallPart):
        yield {
            0: DeltaToolCall(
                name=part.tool_name,
                json_args=json.dumps(part.args_as_dict()),
                tool_call_id=part.tool_call_id,
            )
        }
        return
    assert isinstance(part, TextPart)
    for word in re.findall(r"\S+\s*", part.content):
        if pace:
            await asyncio.sleep(pace)
        yield word


def demo_model(window: int = DEFAULT_WINDOW, *, pace: float = 0.0) -> FunctionModel:
    """The offline demo chat model, named ``offline:demo``; pair it with ``demo_toolset()``.

    ``pace`` spaces its streamed words (seconds), so an answer can be watched as it arrives
    and stopped halfway, as a real model's can.
    """

    async def stream(
        messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        async for chunk in respond_stream(messages, info, pace):
            yield chunk

    return FunctionModel(
        respond,
        stream_function=stream,
        model_name=OFFLINE_DEMO,
        profile=ModelProfile(
            supports_json_schema_output=True,
            supports_json_object_output=True,
            context_window=window,
        ),
    )
