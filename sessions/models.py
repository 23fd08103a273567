"""Storage: an append-only log of each session's messages, and records over it.

A stored message is never rewritten or deleted by normal operations: governance works on the
log and writes its own records beside it (compactions, clears, pins, evicted outputs, audit
events). The only columns of a message that may change are its counting cache (tokens and the
engine's facts), which is derived from the payload. A record is never deleted either: undoing
one stamps it undone, so every earlier view of a session can be rebuilt.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any, ClassVar

from django.conf import settings
from django.db import connections, models
from django.db.models import Field
from django.db.models.options import Options
from django.urls import reverse
from django.utils import timezone
from pydantic_ai.messages import ModelMessage

from ctxhub.governance.recall_terms import added_terms
from sessions.fields import WrittenJSONField
from sessions.payloads import message_from_payload


class AppendOnlyError(Exception):
    """Raised when code tries to rewrite or delete a record that is append-only."""


class AgentSession(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_sessions"
    )
    title = models.CharField(max_length=200)
    model = models.CharField(
        max_length=200, help_text="A pydantic-ai model string, e.g. openai:gpt-4o."
    )
    context_window = models.PositiveIntegerField(
        null=True, blank=True, help_text="Overrides the model's default context window."
    )
    policy = models.JSONField(default=dict, blank=True, help_text="Governance policy overrides.")
    summarizer = models.CharField(
        max_length=200,
        blank=True,
        help_text="Model that writes this session's summaries; blank: CTXHUB_SUMMARY_MODEL.",
    )
    revision = models.PositiveBigIntegerField(
        default=0, help_text="Bumped with every record over the log (clear, compaction, undo)."
    )
    chat_model = models.CharField(
        max_length=200,
        blank=True,
        help_text="Model that answers this session's chat; blank: CTXHUB_CHAT_MODEL.",
    )
    auto_compaction_paused = models.TextField(
        blank=True,
        help_text="Why automatic compaction stopped for this session (blank: it runs).",
    )
    tool_definitions = WrittenJSONField(
        default=list,
        blank=True,
        help_text="The tools the session's agent sends with each request: "
        '[{"name", "description", "parameters"}] (see sessions.services.tools).',
    )
    tool_tokens = models.JSONField(
        default=list,
        blank=True,
        help_text="Tokens of each tool definition, counted with `tool_encoding`.",
    )
    tool_encoding = models.CharField(
        max_length=32, blank=True, help_text="The encoding `tool_tokens` were counted with."
    )
    log_tokens = models.BigIntegerField(
        default=0,
        help_text="The sum of its messages' stored token counts, kept by every write of them "
        "(an append, a fork's copy, a recount): the log's size without reading the log.",
    )
    log_messages = models.PositiveIntegerField(
        default=0,
        help_text="How many messages the log holds, which is the next one's seq; kept as "
        "`log_tokens` is. An append takes the session's row lock and both counts in one "
        "statement.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["owner", "-updated_at"])]

    KEPT_BY_STATEMENTS: ClassVar[frozenset[str]] = frozenset(
        {"revision", "log_tokens", "log_messages"}
    )
    """Counts the log's writers keep with statements of their own (an append's, a record's),
    which saving a copy of the session read earlier must not put back."""

    def __str__(self) -> str:
        return self.title

    def save(self, *args: Any, **kwargs: Any) -> None:
        """A new session is saved whole; a stored one but for ``KEPT_BY_STATEMENTS`` (unless
        ``update_fields`` names them): a session read before an append and saved after keeps
        the append's counts, so the next append's seq is still free."""
        if not self._state.adding and not args and kwargs.get("update_fields") is None:
            kwargs["update_fields"] = [
                field.name
                for field in self._meta.concrete_fields
                if not field.primary_key and field.name not in self.KEPT_BY_STATEMENTS
            ]
        super().save(*args, **kwargs)

    def get_absolute_url(self) -> str:
        return reverse("sessions:detail", args=[self.pk])

    @property
    def group_name(self) -> str:
        """The channel-layer group that receives this session's live events."""
        return f"session.{self.pk.hex}"


class MessageKind(models.TextChoices):
    REQUEST = "request", "request"
    RESPONSE = "response", "response"


class MessageSource(models.TextChoices):
    AGENT = "agent", "agent run"
    API = "api", "REST API"
    CHAT = "chat", "dashboard chat"
    DEMO = "demo", "demo data"
    GATEWAY = "gateway", "gateway"
    IMPORT = "import", "agent's transcript"


class MessageQuerySet(models.QuerySet["Message"]):
    # Only the counting cache may change: it is derived from the payload.
    CACHE_FIELDS: ClassVar[frozenset[str]] = frozenset(
        {"tokens", "encoding", "tokens_exact", "facts"}
    )

    def update(self, **kwargs: Any) -> int:
        if not set(kwargs) <= self.CACHE_FIELDS:
            raise AppendOnlyError(f"messages are append-only; cannot update {sorted(kwargs)}")
        return super().update(**kwargs)

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError("messages are append-only; they are never deleted")


class Message(models.Model):
    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="messages")
    seq = models.PositiveIntegerField(help_text="Position in the session's log, from 0.")
    kind = models.CharField(max_length=8, choices=MessageKind.choices)
    payload = WrittenJSONField(help_text="One pydantic-ai ModelMessage, as its JSON form.")
    tokens = models.PositiveIntegerField()
    encoding = models.CharField(max_length=32)
    tokens_exact = models.BooleanField(default=True)
    facts = models.JSONField(
        null=True,
        blank=True,
        help_text="What governance needs to plan without parsing the payload, for `encoding`.",
    )
    reported_input_tokens = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="A response's input tokens as its provider reported them (from the payload).",
    )
    content_hash = models.CharField(max_length=64, db_index=True)
    source = models.CharField(max_length=8, choices=MessageSource.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = MessageQuerySet.as_manager()

    class Meta:
        ordering = ["session", "seq"]
        constraints = [
            models.UniqueConstraint(
                fields=["session", "seq"], name="message_seq_unique_per_session"
            )
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.kind}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AppendOnlyError("messages are append-only; a stored message is never rewritten")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError("messages are append-only; they are never deleted")

    @property
    def message(self) -> ModelMessage:
        """The payload as a pydantic-ai message."""
        return message_from_payload(self.payload)


class Undoable(models.Model):
    """A record over the log that can be undone: undoing stamps it, nothing is deleted."""

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="+")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_name = models.CharField(
        max_length=150,
        blank=True,
        help_text="Who acted, as the hub a record was imported from named them (its people are "
        "not this hub's); blank for a record made here.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    undone_at = models.DateTimeField(null=True, blank=True)
    undone_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    # Once written, only the undo stamp may be set.
    MUTABLE_FIELDS: ClassVar[frozenset[str]] = frozenset({"undone_at", "undone_by"})

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            fields = set(kwargs.get("update_fields") or ())
            if not fields or not fields <= self.MUTABLE_FIELDS:
                raise AppendOnlyError(
                    f"{type(self).__name__} records are append-only; only their undo stamp changes"
                )
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError(f"{type(self).__name__} records are never deleted; undo them")

    @property
    def active(self) -> bool:
        return self.undone_at is None


class Compaction(Undoable):
    """A summary standing in for a range of the log; the messages themselves stay.

    ``replacement`` is what the effective history shows instead of the seqs
    ``first_seq..last_seq``, in order: ``{"seq": n}`` for a message of the log kept as it is (a
    pin, a protected result, the head), ``{"message": payload, "facts": ...}`` for one the
    compaction wrote (the summary, the user's own words kept verbatim).
    """

    CONTENT_FIELDS: ClassVar[tuple[str, ...]] = (
        "first_seq",
        "last_seq",
        "replacement",
        "summary",
        "summary_message",
        "ledger",
        "outcome",
        "error",
        "summarizer",
        "policy",
        "focus",
        "summarized_seqs",
        "tokens_before",
        "tokens_after",
        "messages_before",
        "messages_after",
        "started_at",
        "finished_at",
        "trigger",
        "usage",
    )
    """What a compaction says, besides whose it is and what it relates to (its session, job,
    actor, the one it supersedes): what a copy (a fork) or a file (an export) carries."""

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="compactions")
    job = models.OneToOneField(
        "CompactionJob", null=True, blank=True, on_delete=models.PROTECT, related_name="compaction"
    )
    first_seq = models.PositiveIntegerField()
    last_seq = models.PositiveIntegerField()
    replacement = WrittenJSONField()
    summary = models.TextField(help_text="The summary text (also inside `summary_message`).")
    summary_message = WrittenJSONField(help_text="The summary as a stored pydantic-ai message.")
    ledger = models.JSONField(default=list, help_text="The fact ledger: every item kept.")
    outcome = models.CharField(max_length=16, help_text="summarized, or fallback (the marker).")
    error = models.TextField(blank=True, help_text="Why the summariser failed, on a fallback.")
    summarizer = models.CharField(max_length=200)
    policy = models.JSONField(help_text="The policy the compaction ran under.")
    focus = models.TextField(blank=True)
    summarized_seqs = models.JSONField(help_text="Every log seq the summary stands for.")
    tokens_before = models.PositiveIntegerField(help_text="Effective history before.")
    tokens_after = models.PositiveIntegerField(help_text="Effective history after.")
    messages_before = models.PositiveIntegerField()
    messages_after = models.PositiveIntegerField()
    supersedes = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="superseded_by"
    )
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    trigger = models.CharField(
        max_length=8,
        blank=True,
        help_text="manual or auto, for a compaction the agent made itself (read from its "
        "transcript, ``summarizer`` naming the agent); blank for ctxhub's (its job says).",
    )
    usage = models.JSONField(
        default=dict,
        blank=True,
        help_text="The usage of the model call that wrote the summary, as pydantic-ai's "
        "RequestUsage, where the agent recorded it (read from its transcript).",
    )

    class Meta:
        ordering = ["session", "-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(first_seq__lte=models.F("last_seq")),
                name="compaction_range_ordered",
            )
        ]

    def __str__(self) -> str:
        state = "undone" if self.undone_at else "active"
        return f"{self.session_id} #{self.first_seq}..#{self.last_seq} ({state})"


class Clear(Undoable):
    """``/clear``: the effective history starts at ``from_seq``; everything before stays stored."""

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="clears")
    from_seq = models.PositiveIntegerField()

    class Meta:
        ordering = ["session", "-created_at"]

    def __str__(self) -> str:
        return f"{self.session_id} clear from #{self.from_seq}"


class Pin(Undoable):
    """A message that governance must keep verbatim; unpinning stamps ``undone_at``."""

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="pins")
    seq = models.PositiveIntegerField()

    class Meta:
        ordering = ["session", "seq"]
        constraints = [
            models.UniqueConstraint(
                fields=["session", "seq"],
                condition=models.Q(undone_at__isnull=True),
                name="one_active_pin_per_message",
            )
        ]

    def __str__(self) -> str:
        return f"{self.session_id} pin #{self.seq}"


class EvictedOutput(models.Model):
    """The full text of a tool output governance replaced by a preview, read back by ``ref``."""

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="evicted")
    ref = models.CharField(max_length=64)
    text = models.TextField()
    tokens = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "ref"], name="evicted_ref_unique")
        ]

    def __str__(self) -> str:
        return f"{self.session_id} {self.ref}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AppendOnlyError("evicted outputs are kept as they were stored")
        super().save(*args, **kwargs)


class MessagePieceQuerySet(models.QuerySet["MessagePiece"]):
    def bulk_create(
        self, objs: Iterable[MessagePiece], *args: Any, **kwargs: Any
    ) -> list[MessagePiece]:
        pieces = list(objs)
        for piece in pieces:
            piece.terms = added_terms(piece.text)
        return super().bulk_create(pieces, *args, **kwargs)

    def insert(self, session: AgentSession, pieces: Iterable[PieceRow]) -> None:
        """Write pieces of ``session`` (with their terms) in one statement run for them all:
        the ORM's ``bulk_create`` compiles its SQL anew for every few hundred rows, which cost
        an import of many messages more than the writing itself."""
        connection = connections[self.db]
        meta = self.model._meta
        session_id = meta.get_field("session").get_db_prep_save(session.pk, connection)
        rows = [(session_id, *piece, added_terms(piece[-1])) for piece in pieces]
        if not rows:
            return
        name = connection.ops.quote_name
        columns = ", ".join(name(_column(meta, field)) for field in _PIECE_FIELDS)
        with connection.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {name(meta.db_table)} ({columns}) "
                f"VALUES ({', '.join(['%s'] * len(_PIECE_FIELDS))})",
                rows,
            )


type PieceRow = tuple[int, int, int, str, str, str]
"""A piece as ``MessagePieceQuerySet.insert`` writes it: seq, part, offset, kind, tool name
(empty for none) and text."""

_PIECE_FIELDS = ("session", "seq", "part", "offset", "kind", "tool_name", "text", "terms")


def _column(meta: Options[Any], name: str) -> str:
    field = meta.get_field(name)
    assert isinstance(field, Field)
    assert field.column is not None
    return field.column


class MessagePiece(models.Model):
    """A searchable piece of one part of a logged message, for ``recall``
    (``sessions/services/recall.py``): written with the message, never changed.

    The full-text index over ``text`` and ``terms`` is the database's own, made by migrations
    0010 and 0011: in PostgreSQL a generated ``search`` column (``to_tsvector('english', text
    || ' ' || terms)``) under a GIN index, in SQLite an FTS5 table over both kept by triggers.
    ``terms`` are derived from the text whenever a piece is written (``save`` and
    ``bulk_create``), so no writer can leave them out.
    """

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="pieces")
    seq = models.PositiveIntegerField()
    part = models.PositiveIntegerField(help_text="The part's index in its message.")
    offset = models.PositiveIntegerField(help_text="Where the piece starts in the part's text.")
    kind = models.CharField(max_length=16)
    tool_name = models.CharField(max_length=200, blank=True)
    text = models.TextField()
    terms = models.TextField(
        blank=True,
        default="",
        help_text=(
            "What the text is searched by besides its own words: the words of its identifiers "
            "and what its abbreviations stand for (ctxhub.governance.recall_terms)."
        ),
    )

    objects = MessagePieceQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["session", "seq"], name="piece_session_seq")]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq}.{self.part}@{self.offset}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.terms = added_terms(self.text)
        super().save(*args, **kwargs)


class GovernedSnapshot(models.Model):
    """A session's last governed context, for processes that have not governed it (derived
    data, rewritten freely; see ``sessions.snapshots``)."""

    session = models.OneToOneField(
        AgentSession, primary_key=True, on_delete=models.CASCADE, related_name="snapshot"
    )
    key = models.CharField(max_length=64)
    messages = models.TextField(help_text="The governed messages, as pydantic-ai JSON.")
    report = models.TextField(help_text="The ContextReport, as JSON.")
    seqs = models.TextField(help_text="The log seq of each position of the effective history.")
    # The figures lists of sessions show, readable without parsing the report.
    # (Null in snapshots written before these figures were kept: such a snapshot is redone.)
    tokens = models.PositiveIntegerField(null=True, help_text="Tokens the request carries.")
    budget = models.PositiveIntegerField(null=True, help_text="Tokens the history may take.")
    room = models.PositiveIntegerField(
        null=True,
        help_text="Tokens a request may carry in all: the window less the answer's reserve and "
        "the margin (what the fleet orders its fullest sessions by).",
    )
    last_seq = models.IntegerField(null=True, help_text="The newest seq it governed.")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.session_id} snapshot {self.key[:12]}"


class SessionGovernor(models.Model):
    """The state of a session's ``Governor`` (``ctxhub.governance.Governor.state``): what the
    requests it sent decided. Every process continues from it, so each sends the next request
    as one Governor would, and a restart resets nothing."""

    session = models.OneToOneField(
        AgentSession, primary_key=True, on_delete=models.CASCADE, related_name="governor"
    )
    key = models.CharField(
        max_length=64, help_text="Of the policy, model and window the state was made under."
    )
    state = models.JSONField()
    version = models.PositiveBigIntegerField(
        help_text="Requests sent so far: a process writes only over the version it read."
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.session_id} governor v{self.version}"


class SentRequest(models.Model):
    """A model request the session's Governor sent (an agent's ``/context``, a chat turn): what
    it carried, what it kept of the request before (a provider's prompt cache serves that part)
    and the action that changed what was sent before, if one did. Append-only."""

    session = models.ForeignKey(
        AgentSession, on_delete=models.CASCADE, related_name="sent_requests"
    )
    number = models.PositiveBigIntegerField(help_text="1 for the session's first request.")
    last_seq = models.IntegerField(help_text="The newest log seq it carried (-1: none).")
    tokens = models.PositiveIntegerField(
        help_text="Tokens of its messages, system prompt and instructions included."
    )
    tool_tokens = models.PositiveIntegerField(help_text="Tokens of the tool definitions.")
    history_tokens = models.PositiveIntegerField(
        help_text="Tokens of the effective history it was governed from."
    )
    prefix_tokens = models.PositiveIntegerField(
        null=True, help_text="Leading tokens sent as the request before sent them (None: unknown)."
    )
    window_tokens = models.PositiveIntegerField()
    budget_tokens = models.PositiveIntegerField()
    acted = models.CharField(
        max_length=16, blank=True, help_text="Why it changed what was sent before, if it did."
    )
    action = models.TextField(blank=True, help_text="What changed, in words.")
    state = models.JSONField(
        null=True, help_text="The Governor state it was governed from (None: a new start)."
    )
    key = models.CharField(
        max_length=64, help_text="Of the policy, model and window it was governed under."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["number"]
        constraints = [
            models.UniqueConstraint(fields=["session", "number"], name="sent_request_unique")
        ]

    def __str__(self) -> str:
        return f"{self.session_id} request {self.number}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AppendOnlyError("sent requests are kept as they were sent")
        super().save(*args, **kwargs)


class JobStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


ACTIVE_JOB_STATUSES = (JobStatus.QUEUED, JobStatus.RUNNING)


class CompactionJob(models.Model):
    """A requested compaction: the row is the truth, the broker message only a wake-up call.

    A worker claims the job (``deliveries`` counts every claim, so a job that kills its worker
    stops after a few), beats ``heartbeat_at`` while it works and finishes it in the same
    transaction that writes the compaction. The sweeper re-queues a job whose worker died or
    whose broker message was lost.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="jobs")
    key = models.CharField(max_length=64, help_text="Idempotency key of the request.")
    trigger = models.CharField(max_length=8, help_text="manual or auto")
    status = models.CharField(
        max_length=8, choices=JobStatus.choices, default=JobStatus.QUEUED, db_index=True
    )
    focus = models.TextField(blank=True)
    summarizer = models.CharField(max_length=200)
    policy = models.JSONField(help_text="The session policy when the job was requested.")
    plan = models.JSONField(help_text="What the request saw: the seqs to summarise and the state.")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    deliveries = models.PositiveIntegerField(default=0, help_text="Times a worker claimed it.")
    retries = models.PositiveIntegerField(default=0, help_text="Retries after transient errors.")
    progress = models.JSONField(default=dict, blank=True, help_text="The latest progress event.")
    outcome = models.CharField(max_length=24, blank=True)
    error = models.TextField(blank=True)
    result = models.JSONField(default=dict, blank=True, help_text="Tokens before and after.")
    created_at = models.DateTimeField(auto_now_add=True)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    run_after = models.DateTimeField(null=True, blank=True, help_text="Retry not before.")
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["session"],
                condition=models.Q(status__in=["queued", "running"]),
                name="one_active_job_per_session",
            )
        ]
        indexes = [models.Index(fields=["session", "key"])]

    def __str__(self) -> str:
        return f"{self.session_id} {self.trigger} compaction job ({self.status})"

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_JOB_STATUSES


class TurnStatus(models.TextChoices):
    RUNNING = "running"
    DONE = "done"
    STOPPED = "stopped"
    FAILED = "failed"
    LOST = "lost"


class ChatTurn(models.Model):
    """One prompt typed in the dashboard chat and the agent run that answers it.

    The messages the run produces go to the log as they complete; this row holds what the log
    cannot: the turn's state, its error, and what is in flight (``live``: the response being
    streamed and the tools running), so a page that (re)connects mid-turn shows it. At most
    one turn of a session runs at a time (a database constraint, whatever the process), and
    ``control_channel`` reaches the process that runs it, to stop it.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="turns")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    prompt = models.TextField()
    model = models.CharField(max_length=200, help_text="The model that answered.")
    status = models.CharField(
        max_length=8, choices=TurnStatus.choices, default=TurnStatus.RUNNING, db_index=True
    )
    error = models.TextField(blank=True)
    live = models.JSONField(default=dict, blank=True, help_text="What is in flight.")
    requests = models.PositiveIntegerField(default=0, help_text="Model requests made so far.")
    first_seq = models.PositiveIntegerField(null=True, blank=True)
    last_seq = models.PositiveIntegerField(null=True, blank=True)
    control_channel = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    heartbeat_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["session"],
                condition=models.Q(status="running"),
                name="one_running_turn_per_session",
            )
        ]

    def __str__(self) -> str:
        return f"{self.session_id} chat turn ({self.status})"

    @property
    def running(self) -> bool:
        return self.status == TurnStatus.RUNNING


class ApiKey(models.Model):
    """A key an external agent authenticates with (``Authorization: Bearer <key>``).

    Only the key's SHA-256 is stored: the key is shown once, when it is made. ``prefix``
    finds the row; the digest is compared in constant time. Revoking stamps ``revoked_at``.
    """

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    digest = models.CharField(max_length=64)
    scopes = models.JSONField(help_text="Any of read, write, govern.")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class IdempotentRequest(models.Model):
    """The answer to a request made with an ``Idempotency-Key``: a retry gets it again."""

    api_key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    fingerprint = models.CharField(max_length=64, help_text="Method, path and body, hashed.")
    status = models.PositiveSmallIntegerField()
    body = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["api_key", "key"], name="idempotency_key_per_api_key")
        ]

    def __str__(self) -> str:
        return f"{self.api_key_id} {self.key}"


class AuditEvent(models.Model):
    """Who did what to a session, when, and the governed tokens before and after. Immutable,
    but for ``tokens_after``: a change is measured once it is committed (not under the session
    lock), and the figure is filled in once (``measured_after``). On PostgreSQL the database
    holds to it too, whatever the ORM is asked (a trigger, migration 0015): an event is deleted
    only with its session (``sessions.deletion``)."""

    session = models.ForeignKey(
        AgentSession, null=True, blank=True, on_delete=models.CASCADE, related_name="audit_events"
    )
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    verb = models.CharField(max_length=64)
    tokens_before = models.PositiveIntegerField(null=True, blank=True)
    tokens_after = models.PositiveIntegerField(null=True, blank=True)
    data = models.JSONField(default=dict, blank=True)
    # Given, not stamped, by an import: an event keeps the time it happened on its hub.
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.verb} by {self.actor_id} at {self.created_at:%Y-%m-%d %H:%M:%S}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AppendOnlyError("audit events are immutable")
        super().save(*args, **kwargs)

    def measured_after(self, tokens: int) -> None:
        """Fill in the governed tokens after the change, if they are not yet."""
        filled = AuditEvent.objects.filter(pk=self.pk, tokens_after__isnull=True).update(
            tokens_after=tokens
        )
        if filled:
            self.tokens_after = tokens

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError("audit events are immutable")
