"""What the gateway keeps beside a session: how its client's requests thread into it, and each
message as the client wrote it; and the provider keys it holds for its users, encrypted."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from sessions.models import AgentSession


class Mode(models.TextChoices):
    OBSERVE = "observe", "observe: the upstream gets the client's request as sent"
    GOVERN = "govern", "govern: the upstream gets the session Governor's request"


class GatewaySession(models.Model):
    """A session whose messages came through the gateway."""

    session = models.OneToOneField(
        AgentSession, on_delete=models.CASCADE, primary_key=True, related_name="gateway"
    )
    wire = models.CharField(max_length=24, help_text="The wire format its client speaks.")
    mode = models.CharField(max_length=8, choices=Mode.choices)
    client_session = models.CharField(
        max_length=200,
        blank=True,
        db_index=True,
        help_text="The client's own marker of its session (a header, Claude Code's user_id).",
    )
    parent = models.ForeignKey(
        AgentSession,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="gateway_children",
        help_text="The session of the same client session it branched from (a sub-agent's).",
    )
    tip = models.CharField(
        max_length=64, db_index=True, help_text="The chain hash of its newest message."
    )
    branched_at = models.IntegerField(
        null=True,
        blank=True,
        help_text="The parent's message it went on from, its log a copy up to there (a retry, "
        "or the conversation rewound or edited); empty: a session of its own beside the parent "
        "(a sub-agent's, or the conversation rewritten).",
    )

    def __str__(self) -> str:
        return f"{self.wire} session {self.session_id}"


class RawMessage(models.Model):
    """One message of a gateway session as its client wrote it (the stored truth; the log's
    payload is pydantic-ai's view of it), with its chain hash. Text, not JSON: PostgreSQL's
    jsonb would re-sort its keys."""

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="raw_messages")
    seq = models.PositiveIntegerField()
    raw = models.TextField()
    chain = models.CharField(max_length=64)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="raw_message_seq_unique")
        ]
        # A request that continues no session's end is looked up by its messages' hashes
        # among every session's (``gateway.threads._branched``).
        indexes = [models.Index(fields=["chain"], name="raw_message_chain_hash")]

    def __str__(self) -> str:
        return f"#{self.seq} of {self.session_id}"


class Exchange(models.Model):
    """One request through the gateway and how it ended."""

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="exchanges")
    governed = models.BooleanField(help_text="Whether the upstream got the Governor's request.")
    stream = models.BooleanField()
    new_messages = models.PositiveIntegerField(help_text="Messages the request added to the log.")
    status = models.PositiveSmallIntegerField(
        null=True, help_text="The upstream's HTTP status (null: no answer)."
    )
    response_seq = models.IntegerField(null=True, help_text="The seq of the response stored.")
    error = models.TextField(blank=True)
    unfinished = models.TextField(
        blank=True,
        help_text="What the model had answered when its stream was cut short (not in the log).",
    )
    usage = models.JSONField(default=dict, blank=True, help_text="The usage the upstream reported.")
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"exchange {self.pk} of {self.session_id}"


class Provider(models.TextChoices):
    ANTHROPIC = "anthropic", "Anthropic"
    OPENAI = "openai", "OpenAI"


class ProviderKey(models.Model):
    """A user's API key for a provider, which the gateway sends upstream for a client that
    authenticates with its ctxhub key alone (``gateway.provider_keys``). Only its ciphertext
    is stored; ``hint`` is what may be shown of it."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="provider_keys"
    )
    provider = models.CharField(max_length=16, choices=Provider.choices)
    encrypted = models.TextField(help_text="The key, encrypted (Fernet, CTXHUB_SECRETS_KEY).")
    hint = models.CharField(max_length=40, help_text="Enough of the key to recognise it.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "provider"], name="provider_key_one_per_owner")
        ]

    def __str__(self) -> str:
        return f"{self.provider} key {self.hint} of {self.owner_id}"
