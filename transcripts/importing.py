"""Reading transcript files into sessions, from where the last read of each stopped.

A file is known by the agent's id of the session it holds (``TranscriptFile``): importing it
again, from the same folder or another, or uploading it, reads only the lines written since,
so running an import twice adds nothing and ``--follow`` is the same import run as the file
grows. Each read is one transaction: the new messages, compactions and kept lines of every
session the file holds, and where the read stopped, or none of it.

The read stops before the end when the agent may still be writing there (a response whose
last line has not come), unless the file is done (``final``): an import of finished files
reads them whole; following a running agent waits for the group to close.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from django.db import transaction
from django.db.models import Sum
from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart
from pydantic_ai.usage import RequestUsage

from ctxhub.governance.facts import message_facts
from ctxhub.governance.tokens import tokenizer_for
from sessions.models import AgentSession, Compaction, MessageSource
from sessions.payloads import message_from_payload, storable_payload
from sessions.services.collector import collector_paused
from sessions.services.log import append_messages
from sessions.services.records import bump_revision, lock_session
from transcripts import claude_code, codex
from transcripts.models import Format, KeptLine, Transcript, TranscriptFile
from transcripts.reading import (
    Compacted,
    Kept,
    Reading,
    Said,
    Stream,
    Titled,
    digest,
    first_line,
    lines_from,
    parsed_line,
)

log = logging.getLogger(__name__)

READERS: dict[str, ModuleType] = {Format.CLAUDE_CODE: claude_code, Format.CODEX: codex}
HEAD_BYTES = 256 * 1024
"""What is read of a file to tell its format and session (its first lines)."""
TAIL_BYTES = 4096
"""What is kept a digest of before where a read stopped: the file read again must still hold
those bytes there, or it is another file (rewritten, not grown)."""


class NotATranscript(Exception):
    """The file is none of the formats this hub reads."""


@dataclass
class FileImport:
    """What one read of a file did."""

    name: str
    format: str = ""
    sessions: list[AgentSession] = field(default_factory=list)
    """The sessions it added to (new ones first made)."""
    created: int = 0
    messages: int = 0
    compactions: int = 0
    kept: int = 0
    broken: list[tuple[int, str]] = field(default_factory=list)
    problem: str = ""
    """Why nothing was read ('' when it was)."""
    end: int = 0
    """Where the file's next read starts (its size when it was read whole)."""

    @property
    def added(self) -> bool:
        return bool(self.messages or self.compactions or self.kept or self.created)


def detect_format(head: bytes) -> str:
    """The format of a transcript, from its first readable line; NotATranscript otherwise."""
    for line in lines_from(head, 0, 1):
        value = parsed_line(line)
        if not line.text.strip() or isinstance(value, str):
            continue
        if codex.looks_like(value):
            return Format.CODEX
        if claude_code.looks_like(value):
            return Format.CLAUDE_CODE
        break
    raise NotATranscript("not a Claude Code or Codex transcript (JSONL)")


def import_file(
    path: Path, owner: Any, *, format: str | None = None, final: bool = True
) -> FileImport:
    """Reads what is new in the transcript at ``path`` into ``owner``'s sessions."""

    def read_from(offset: int, limit: int = -1) -> bytes:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read(limit)

    with collector_paused():
        return _import(str(path), read_from, owner, format=format, final=final)


def import_bytes(name: str, data: bytes, owner: Any, *, format: str | None = None) -> FileImport:
    """Reads what is new in an uploaded transcript (``data``, the whole file)."""

    def read_from(offset: int, limit: int = -1) -> bytes:
        return data[offset : None if limit < 0 else offset + limit]

    with collector_paused():
        return _import(name, read_from, owner, format=format, final=True)


def transcript_files(paths: Iterable[Path]) -> Iterator[Path]:
    """The transcript files under ``paths`` (files, or folders searched through), in order."""
    for path in paths:
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*.jsonl") if p.is_file())
        elif path.is_file():
            yield path


def _import(
    name: str,
    read_from: Callable[[int, int], bytes],
    owner: Any,
    *,
    format: str | None,
    final: bool,
) -> FileImport:
    report = FileImport(name)
    head = read_from(0, HEAD_BYTES)
    try:
        found = detect_format(head)
    except NotATranscript as exc:
        report.problem = str(exc)
        return report
    if format is not None and format != found:
        report.problem = f"a {Format(found).label} transcript, not {Format(format).label}"
        return report
    report.format = found
    reader = READERS[found]
    key = reader.file_key(list(lines_from(head, 0, 1)))
    if key is None:
        report.problem = "no line of it names its session yet"
        return report
    with transaction.atomic():
        known, _ = TranscriptFile.objects.select_for_update().get_or_create(
            owner=owner, format=found, key=key[:200], defaults={"path": name}
        )
        report.end = known.read_bytes
        base = max(known.read_bytes - TAIL_BYTES, 0)
        data = read_from(base, -1)
        before = known.read_bytes - base
        if known.read_bytes and (len(data) < before or digest(data[:before]) != known.tail):
            report.problem = (
                "it no longer holds what was read of it (rewritten, not grown): nothing read"
            )
            return report
        lines = list(lines_from(data[before:], known.read_bytes, known.read_lines + 1))
        reading = reader.read(lines, key, known.state, final=final)
        read = [line for line in lines if reading.hold is None or line.number < reading.hold]
        if not read:
            return report
        _write(reading, known, owner, report)
        end = read[-1].end
        known.tail = digest(data[max(end - TAIL_BYTES, 0) - base : end - base])
        known.read_bytes, known.read_lines = end, read[-1].number
        report.end = end
        known.state = reading.state
        known.path = name
        report.broken = [item for item in reading.broken if item[0] <= known.read_lines]
        known.skipped = [*known.skipped, *map(list, report.broken)][-MAX_SKIPPED:]
        known.save()
    return report


MAX_SKIPPED = 1000
"""The unreadable lines a file keeps the numbers of (the newest)."""


def _write(reading: Reading, known: TranscriptFile, owner: Any, report: FileImport) -> None:
    limit = reading.hold
    for stream in reading.streams.values():
        units = [unit for unit in stream.units if limit is None or first_line(unit) < limit]
        transcript = Transcript.objects.filter(file=known, source=stream.source[:200]).first()
        if transcript is None:
            talked = any(isinstance(unit, Said | Compacted) for unit in units)
            if not talked and stream.source != _own_source(reading):
                continue  # a sub-agent with nothing of its conversation yet: made when there is
            transcript = _new_transcript(known, stream, owner)
            report.created += 1
        session = transcript.session
        report.sessions.append(session)
        if stream.model and session.model == READERS[known.format].DEFAULT_MODEL:
            session.model = stream.model  # the first read held no response to name it
            AgentSession.objects.filter(pk=session.pk).update(model=stream.model)
        _write_units(session, units, known.format, report)
        if stream.title and session.title == _untitled(known.format, stream.source):
            AgentSession.objects.filter(pk=session.pk).update(title=stream.title[:200])


def _own_source(reading: Reading) -> str:
    """The source of the file's own session: the first stream (``read`` makes it first)."""
    return next(iter(reading.streams))


def _untitled(format: str, source: str) -> str:
    return f"{Format(format).label} {source.rsplit('/', 1)[-1][:13]}"


def _new_transcript(known: TranscriptFile, stream: Stream, owner: Any) -> Transcript:
    session = AgentSession.objects.create(
        owner=owner,
        title=(stream.title or _untitled(known.format, stream.source))[:200],
        model=stream.model or READERS[known.format].DEFAULT_MODEL,
    )
    began = next((unit.at for unit in stream.units if isinstance(unit, Said) and unit.at), None)
    if began is not None:  # the session is as old as the agent's, not as its import
        AgentSession.objects.filter(pk=session.pk).update(created_at=began)
    parent = None
    if stream.parent:
        parent = (
            Transcript.objects.filter(file__owner=owner, source=stream.parent[:200])
            .values_list("session", flat=True)
            .first()
        )
    transcript = Transcript.objects.create(
        session=session,
        file=known,
        source=stream.source[:200],
        parent_source=stream.parent[:200],
        parent_id=parent,
    )
    # Sub-agents read before their parent (another file, read first) find it now.
    Transcript.objects.filter(
        file__owner=owner, parent_source=transcript.source, parent__isnull=True
    ).update(parent=session)
    return transcript


def _write_units(session: AgentSession, units: list[Any], format: str, report: FileImport) -> None:
    said: list[ModelMessage] = []

    def flush() -> None:
        if said:
            append_messages(session, said, source=MessageSource.IMPORT, auto_compact=False)
            report.messages += len(said)
            said.clear()

    kept: list[KeptLine] = []
    for unit in units:
        if isinstance(unit, Said):
            said.append(unit.view)
        elif isinstance(unit, Compacted):
            flush()
            report.compactions += _compacted(session, unit, format)
        elif isinstance(unit, Kept):
            kept.append(KeptLine(session=session, line=unit.line, kind=unit.kind, raw=unit.raw))
        elif isinstance(unit, Titled):
            AgentSession.objects.filter(pk=session.pk).update(title=unit.title[:200])
    flush()
    KeptLine.objects.bulk_create(kept, ignore_conflicts=True)
    report.kept += len(kept)


def usage_json(usage: RequestUsage | None) -> dict[str, Any]:
    """A usage as stored beside a compaction: its counts that are not zero."""
    if usage is None:
        return {}
    counts = dataclasses.asdict(usage)
    return {name: value for name, value in counts.items() if value}


def _compacted(session: AgentSession, unit: Compacted, format: str) -> int:
    """The agent's compaction as a record over the log: its summary stands for everything
    before it (and so supersedes the agent's previous one), but for the user's prompts the
    agent keeps beside it. Before any message, the summary is where the conversation starts:
    it is the log's first message."""
    summary = ModelRequest(parts=[UserPromptPart(unit.summary)], timestamp=unit.at)
    last = session.messages.order_by("-seq").values_list("seq", flat=True).first()
    if last is None:
        append_messages(session, [summary], source=MessageSource.IMPORT, auto_compact=False)
        return 0
    lock_session(session)
    tokenizer = tokenizer_for(session.model)
    facts = message_facts(summary, tokenizer)
    previous = (
        Compaction.objects.filter(session=session, undone_at__isnull=True)
        .order_by("-last_seq", "-created_at")
        .first()
    )
    since = previous.last_seq + 1 if previous is not None else 0
    tokens_since = (
        session.messages.filter(seq__gte=since).aggregate(total=Sum("tokens"))["total"] or 0
    )
    kept = _prompts_kept(session, last, unit.prompts_kept)
    payload = storable_payload(summary)
    replacement: list[dict[str, Any]] = [
        {"seq": seq} if copy is None else _written(copy, tokenizer) for seq, copy, _ in kept
    ]
    replacement.append(_written(payload, tokenizer))
    kept_seqs = {seq for seq, copy, _ in kept if copy is None}
    Compaction.objects.create(
        session=session,
        first_seq=0,
        last_seq=last,
        replacement=replacement,
        summary=unit.summary,
        summary_message=payload,
        outcome="summarized",
        summarizer=format,
        policy={},
        summarized_seqs=[seq for seq in range(last + 1) if seq not in kept_seqs],
        tokens_before=(previous.tokens_after if previous else 0) + tokens_since,
        tokens_after=facts.tokens + sum(tokens for *_, tokens in kept),
        messages_before=(previous.messages_after if previous else 0) + last + 1 - since,
        messages_after=len(replacement),
        supersedes=previous,
        started_at=unit.at,
        finished_at=unit.at,
        trigger=unit.trigger,
        usage=usage_json(unit.usage),
    )
    bump_revision(session)
    return 1


def _written(payload: dict[str, Any], tokenizer: Any) -> dict[str, Any]:
    """A message a compaction wrote, as its replacement holds one."""
    facts = message_facts(message_from_payload(payload), tokenizer)
    return {"message": payload, "facts": facts.to_json(), "encoding": tokenizer.encoding_name}


def _prompts_kept(
    session: AgentSession, last: int, budget: int
) -> list[tuple[int, dict[str, Any] | None, int]]:
    """The user's prompts up to ``last`` a compaction keeps: the newest first while they fit
    in ``budget`` tokens, in log order, each as its seq, the text-only copy the agent keeps
    of it when it held more than text (an image), and its tokens."""
    if budget <= 0:
        return []
    kept: list[tuple[int, dict[str, Any] | None, int]] = []
    spent = 0
    tokenizer = tokenizer_for(session.model)
    rows = session.messages.filter(seq__lte=last, kind="request").order_by("-seq")
    for seq, payload, tokens in rows.values_list("seq", "payload", "tokens").iterator():
        parts = payload.get("parts") or []
        if not parts or any(part.get("part_kind") != "user-prompt" for part in parts):
            continue
        texts = [part["content"] for part in parts if isinstance(part.get("content"), str)]
        copy = None
        if len(texts) < len(parts):  # not only text: the agent keeps its text
            if not texts:
                continue
            written = ModelRequest(parts=[UserPromptPart(text) for text in texts])
            tokens = message_facts(written, tokenizer).tokens
            copy = storable_payload(written)
        if spent + tokens > budget:
            break
        kept.append((seq, copy, tokens))
        spent += tokens
    return sorted(kept, key=lambda item: item[0])
