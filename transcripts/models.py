"""What ctxhub keeps of the transcripts it read: which file each session came from and how far
it was read (so reading it again adds only what the agent wrote since), and the lines it kept
as they were."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from sessions.models import AgentSession


class Format(models.TextChoices):
    CLAUDE_CODE = "claude-code", "Claude Code"
    CODEX = "codex", "Codex CLI"


class TranscriptFile(models.Model):
    """One transcript file of a user, known by what it holds (its agent's session id), not by
    where it lies: the same file read from another folder, or uploaded, continues this one."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="transcript_files"
    )
    format = models.CharField(max_length=16, choices=Format.choices)
    key = models.CharField(
        max_length=200, help_text="The agent's id of the session the file holds (its first line's)."
    )
    path = models.TextField(help_text="Where it was last read from (a path, or an upload's name).")
    read_bytes = models.BigIntegerField(
        default=0, help_text="How much of the file is in: the next read starts there."
    )
    read_lines = models.PositiveIntegerField(default=0, help_text="The lines of it read.")
    tail = models.CharField(
        max_length=64,
        blank=True,
        help_text="A digest of the last line read: the file read again must still hold it there.",
    )
    state = models.JSONField(
        default=dict, blank=True, help_text="What the reader carries from one line to the next."
    )
    skipped = models.JSONField(
        default=list, blank=True, help_text="The lines that could not be read: line and why."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "format", "key"], name="transcript_file_one_per_session"
            )
        ]

    def __str__(self) -> str:
        return f"{self.format} {self.key}"

    @property
    def short_path(self) -> str:
        """Its name and the folder it is in: what tells transcripts apart in a list."""
        return "/".join(self.path.replace("\\", "/").split("/")[-2:])


class Transcript(models.Model):
    """A session read from a transcript: the file it is in, the agent's id for it, and the
    session it was a sub-agent of."""

    session = models.OneToOneField(
        AgentSession, on_delete=models.CASCADE, primary_key=True, related_name="transcript"
    )
    file = models.ForeignKey(TranscriptFile, on_delete=models.CASCADE, related_name="transcripts")
    source = models.CharField(
        max_length=200, help_text="The agent's id of it (a sub-agent's: its parent's and its own)."
    )
    parent_source = models.CharField(
        max_length=200, blank=True, help_text="The agent's id of the session it is a sub-agent of."
    )
    parent = models.ForeignKey(
        AgentSession,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="transcript_children",
        help_text="The session it is a sub-agent of, once that one is read too.",
    )

    class Meta:
        indexes = [models.Index(fields=["source"], name="transcript_source")]

    def __str__(self) -> str:
        return f"{self.source} ({self.session_id})"


class KeptLine(models.Model):
    """A line of a transcript that holds no message of the conversation, kept as it was (a
    type the reader does not know, a bookkeeping line of the agent's) and shown raw."""

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="kept_lines")
    line = models.PositiveIntegerField(help_text="Its line number in the file, from 1.")
    kind = models.CharField(max_length=100, help_text="Its type, as the line names it.")
    raw = models.TextField()

    class Meta:
        ordering = ["session", "line"]
        constraints = [models.UniqueConstraint(fields=["session", "line"], name="kept_line_once")]

    def __str__(self) -> str:
        return f"line {self.line} ({self.kind}) of {self.session_id}"
