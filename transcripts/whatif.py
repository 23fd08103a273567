"""What ctxhub would have done: an imported session's requests replayed under a policy, beside
what the agent recorded.

Each response the agent got was one model request; its recorded usage says what that request
carried (input, cached reads and writes) and what it cost. The replay governs the same log, a
request at a time, with the session's Governor under ``policy`` (ctxhub's own actions instead
of the agent's compactions), and prices what it would have sent, assuming the same answers.

ctxhub counts tokens with its own tokenizer, and a transcript holds neither the system prompt
nor the tool definitions the agent sent. Both are calibrated away on the session's first
requests: the recorded input of each is fitted as ``slope * tokens ctxhub counts in the
agent's context + intercept`` (the intercept is the hidden system prompt and tools), and the
fit predicts the rest: how far it misses on them is shown, so the figures say how much they can
be trusted. The cache ctxhub would have got is the Governor's: the leading messages a request
sends as the previous one sent them (with the hidden prefix) are read from the cache while the
provider held it (the agent's own request read from it, or came within five minutes of the one
before); at Anthropic the rest is written to it.

The agent's compactions are replaced by ctxhub's governance (what the policy does instead), or
kept (``keep_agent_compactions``: the agent goes on compacting itself behind the gateway, and
ctxhub governs what it sends).
"""

from __future__ import annotations

import hashlib
import statistics
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.core.cache import cache
from pydantic_ai.messages import ModelMessage

from ctxhub.governance import Governor, Policy
from ctxhub.governance.facts import MessageFacts
from ctxhub.governance.tokens import tokenizer_for
from ctxhub.pricing import PRICES_VERSION, TokenUsage, model_ref, price
from sessions.models import AgentSession, Compaction
from sessions.payloads import message_from_payload
from sessions.services.governed import session_policy, session_window
from transcripts.models import Format

CALIBRATION_REQUESTS = 10
CACHE_SECONDS = 300
"""How long a provider keeps a prompt cache without a request (Anthropic's default; OpenAI's
is at least as long)."""
REPLAY_CACHE_SECONDS = 7 * 24 * 3600


@dataclass(frozen=True, slots=True)
class Calibration:
    slope: float
    intercept: float
    requests: int
    """How many requests it was fitted on."""

    def tokens(self, counted: int) -> int:
        return max(round(self.slope * counted + self.intercept), 0)


@dataclass(slots=True)
class Side:
    """One request's input and cost, as the agent sent it or as ctxhub would have."""

    input: int
    cache_read: int
    cache_write: int
    cost: Decimal | None


@dataclass(slots=True)
class Row:
    number: int
    """The request's number in the session, from 1."""
    seq: int
    """The response it got."""
    at: datetime | None
    output: int
    agent: Side
    ctxhub: Side
    predicted: int
    """The agent's input as the calibration predicts it from ctxhub's count of its context."""
    agent_compacted: str = ""
    """The agent compacted just before it: manual, auto, or '' (not)."""
    ctxhub_acted: str = ""
    """Why the Governor changed what it had sent, at this request ('' when it did not)."""


@dataclass(slots=True)
class WhatIf:
    session_id: str
    policy: dict[str, Any]
    keep_agent_compactions: bool
    rows: list[Row] = field(default_factory=list)
    calibration: Calibration | None = None
    error_median: float | None = None
    """The calibration's miss on the requests after those it was fitted on: |predicted -
    recorded| / recorded, median and largest."""
    error_max: float | None = None
    problem: str = ""

    def side(self, side: str) -> dict[str, Any]:
        """``side`` (agent or ctxhub) over every request: input, cache read and write, cost."""
        return {
            name: self.total(side, name) for name in ("input", "cache_read", "cache_write", "cost")
        }

    @property
    def output(self) -> int:
        return sum(row.output for row in self.rows)

    def total(self, side: str, name: str) -> Any:
        values = [getattr(getattr(row, side), name) for row in self.rows]
        if name == "cost":
            known = [value for value in values if value is not None]
            return sum(known, Decimal(0)) if known else None
        return sum(values)

    @property
    def saved(self) -> Decimal | None:
        agent, ours = self.total("agent", "cost"), self.total("ctxhub", "cost")
        return None if agent is None or ours is None else agent - ours

    @property
    def saved_share(self) -> float | None:
        agent, saved = self.total("agent", "cost"), self.saved
        return float(saved / agent) if agent and saved is not None else None


def what_if(
    session: AgentSession, policy: Policy | None = None, *, keep_agent_compactions: bool = False
) -> WhatIf:
    """The replay of ``session`` under ``policy`` (the session's own when None), from the
    cache when the log, its records and the policy are those it was made for."""
    policy = policy or session_policy(session)
    last = session.messages.order_by("-seq").values_list("seq", flat=True).first()
    made_for = (
        f"{session.pk}:{session.revision}:{last}:{policy.model_dump_json()}:"
        f"{keep_agent_compactions}:{PRICES_VERSION}"
    )
    key = "whatif:" + hashlib.sha256(made_for.encode()).hexdigest()
    found = cache.get(key)
    if isinstance(found, WhatIf):
        return found
    result = replay(session, policy, keep_agent_compactions=keep_agent_compactions)
    cache.set(key, result, REPLAY_CACHE_SECONDS)
    return result


def replay(
    session: AgentSession, policy: Policy, *, keep_agent_compactions: bool = False
) -> WhatIf:
    """Every recorded request governed in turn under ``policy``: instead of the agent's own
    compactions, or (``keep_agent_compactions``) over them, as when the agent went on
    compacting itself behind the gateway."""
    result = WhatIf(str(session.pk), policy.overrides(), keep_agent_compactions)
    rows = list(
        session.messages.order_by("seq").values_list(
            "seq", "kind", "payload", "facts", "tokens", "encoding"
        )
    )
    if not rows:
        result.problem = "the session holds no messages"
        return result
    encoding = tokenizer_for(session.model).encoding_name
    facts: list[MessageFacts] | None = None
    if all(isinstance(row[3], dict) and row[5] == encoding for row in rows):
        facts = [MessageFacts.from_json(row[3]) for row in rows]  # as stored: nothing counted
    messages = [message_from_payload(row[2]) for row in rows]
    tokens = [row[4] for row in rows]
    agents = list(
        Compaction.objects.filter(
            session=session, undone_at__isnull=True, summarizer__in=Format.values
        ).order_by("last_seq")
    )
    compactions = [(c.last_seq, c.tokens_after, c.trigger) for c in agents]
    requests = _requests(rows, messages, tokens, compactions)
    if not requests:
        result.problem = "no response in it carries the usage its provider reported"
        return result
    calibration = _calibrate(requests[:CALIBRATION_REQUESTS])
    result.calibration = calibration
    misses = [
        abs(calibration.tokens(r.counted) - r.usage.input_tokens) / r.usage.input_tokens
        for r in requests[CALIBRATION_REQUESTS:]
    ]
    if misses:
        result.error_median, result.error_max = statistics.median(misses), max(misses)
    governor = Governor(policy, model=session.model)
    window = session_window(session)
    anthropic = (model_ref(session.model)[0] or "") == "anthropic"
    previous_at: datetime | None = None
    heads = _heads(agents, messages, facts, encoding) if keep_agent_compactions else {}
    for number, request in enumerate(requests, 1):
        end = request.seq
        history, known = messages[:end], facts[:end] if facts is not None else None
        head = max((seq for seq in heads if seq < end), default=None)
        if head is not None:  # the agent's summary (and what it kept) and what came after it
            written, written_facts = heads[head]
            history = [*written, *messages[head + 1 : end]]
            if known is not None and written_facts is not None:
                known = [*written_facts, *known[head + 1 :]]
            else:
                known = None
        governed = governor.govern(history, facts=known, context_window_tokens=window)
        # The leading messages sent as the previous request sent them: the cacheable prefix.
        prefix = governed.prefix_tokens or 0
        ours = calibration.tokens(governed.tokens_after + governed.tool_definition_tokens)
        cached = number > 1 and _cache_alive(request, previous_at)
        read = min(calibration.tokens(prefix), ours) if cached else 0
        write = ours - read if anthropic else 0
        result.rows.append(
            Row(
                number=number,
                seq=request.seq,
                at=request.at,
                output=request.usage.output_tokens,
                agent=Side(
                    request.usage.input_tokens,
                    request.usage.cache_read_tokens,
                    request.usage.cache_write_tokens,
                    _cost(request, request.usage),
                ),
                ctxhub=Side(
                    ours,
                    read,
                    write,
                    _cost(request, TokenUsage(ours, read, write, request.usage.output_tokens)),
                ),
                predicted=calibration.tokens(request.counted),
                agent_compacted=request.compacted,
                ctxhub_acted=governed.acted or "" if number > 1 else "",
            )
        )
        previous_at = request.at
    return result


@dataclass(frozen=True, slots=True)
class _Request:
    seq: int
    at: datetime | None
    usage: TokenUsage
    model: str
    provider: str | None
    counted: int
    """ctxhub's count of the agent's own context for it (its compactions applied)."""
    compacted: str


def _cache_alive(request: _Request, previous_at: datetime | None) -> bool:
    """Whether the provider still held the previous request's prefix: the agent's request read
    from the cache, or came soon enough after the one before."""
    if request.usage.cache_read_tokens > 0:
        return True
    if request.at is None or previous_at is None:
        return False
    return (request.at - previous_at).total_seconds() <= CACHE_SECONDS


def _requests(
    rows: list[Any],
    messages: list[ModelMessage],
    tokens: list[int],
    compactions: list[tuple[int, int, str]],
) -> list[_Request]:
    """The responses that recorded their usage, each as the request it answered."""
    before = [0]
    for count in tokens:
        before.append(before[-1] + count)
    found: list[_Request] = []
    latest: tuple[int, int, str] | None = None
    pending = ""
    upcoming = iter(compactions)
    following = next(upcoming, None)
    for (seq, kind, payload, *_), message in zip(rows, messages, strict=True):
        while following is not None and following[0] < seq:
            latest, pending = following, following[2] or "yes"
            following = next(upcoming, None)
        if kind != "response" or seq == 0:
            continue
        usage = _usage(payload.get("usage"))
        if usage is None:
            continue
        # The agent's own context: its latest summary and what came after it.
        counted = before[seq] if latest is None else latest[1] + before[seq] - before[latest[0] + 1]
        found.append(
            _Request(
                seq=seq,
                at=getattr(message, "timestamp", None),
                usage=usage,
                model=str(payload.get("model_name") or ""),
                provider=payload.get("provider_name"),
                counted=counted,
                compacted=pending,
            )
        )
        pending = ""
    return found


def _usage(value: Any) -> TokenUsage | None:
    if not isinstance(value, dict):
        return None

    def count(name: str) -> int:
        item = value.get(name)
        return item if isinstance(item, int) and not isinstance(item, bool) and item > 0 else 0

    total = count("input_tokens")
    if total == 0:
        return None  # a response the agent made up (an error shown as one): no request
    read = min(count("cache_read_tokens"), total)
    write = min(count("cache_write_tokens"), total - read)
    hour = min(count("cache_write_1h_tokens"), write)
    return TokenUsage(total, read, write, count("output_tokens"), hour)


def _calibrate(requests: list[_Request]) -> Calibration:
    """The least-squares line through (ctxhub's count, recorded input) of ``requests``;
    through the origin when they give no slope."""
    xs = [float(r.counted) for r in requests]
    ys = [float(r.usage.input_tokens) for r in requests]
    if len(xs) >= 2 and len(set(xs)) >= 2:
        mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
        spread = sum((x - mean_x) ** 2 for x in xs)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
        if slope > 0:
            return Calibration(slope, mean_y - slope * mean_x, len(xs))
    total_x = sum(xs)
    return Calibration(sum(ys) / total_x if total_x else 1.0, 0.0, len(xs))


def _cost(request: _Request, usage: TokenUsage) -> Decimal | None:
    if not request.model:
        return None
    priced = price(request.model, usage, provider=request.provider, at=request.at)
    return priced.total if priced is not None else None


def _heads(
    compactions: list[Compaction],
    messages: list[ModelMessage],
    facts: list[MessageFacts] | None,
    encoding: str,
) -> dict[int, tuple[list[ModelMessage], list[MessageFacts] | None]]:
    """By the last seq each stands for, what the agent's compactions put in its place: the
    messages kept and written, with their facts where every one has them for ``encoding``."""
    heads: dict[int, tuple[list[ModelMessage], list[MessageFacts] | None]] = {}
    for compaction in compactions:
        written: list[ModelMessage] = []
        written_facts: list[MessageFacts] | None = []
        for item in compaction.replacement:
            if "seq" in item:
                written.append(messages[item["seq"]])
                found = facts[item["seq"]] if facts is not None else None
            else:
                written.append(message_from_payload(item["message"]))
                stored = item.get("facts")
                usable = isinstance(stored, dict) and item.get("encoding") == encoding
                found = MessageFacts.from_json(stored) if usable else None
            if written_facts is not None and found is not None:
                written_facts.append(found)
            else:
                written_facts = None
        heads[compaction.last_seq] = (written, written_facts)
    return heads
