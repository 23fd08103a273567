"""Compaction of a stored session: preview, request (a job), and the record a job writes.

A compaction is planned by the engine (``plan_compaction``): the messages the window would drop
are summarised, the head, pins, protected results and the recent tail stay. The plan is a pure
function of the session's state (records revision, newest seq, policy, pins), so a preview and
the job that applies it agree, and the state's fingerprint tells whether the history changed in
between. The job (``sessions.jobs.compaction``) runs the summariser and writes the record; this
module turns the engine's compacted history into that record.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart

from ctxhub.governance import Policy, is_summary, plan_compaction
from ctxhub.governance.compact import no_room
from ctxhub.governance.compaction_plan import MIN_SUMMARY_TOKENS
from ctxhub.governance.counting import MARK
from ctxhub.governance.facts import message_facts
from ctxhub.governance.policy import Threshold
from ctxhub.governance.summaries import SUMMARY_PREFIX
from ctxhub.governance.tokens import Tokenizer, tokenizer_for
from sessions import events
from sessions.figures import compaction_change, nothing_to_compact
from sessions.history import EffectiveHistory, effective_history, pinned_seqs
from sessions.models import (
    ACTIVE_JOB_STATUSES,
    AgentSession,
    CompactionJob,
    JobStatus,
    Message,
)
from sessions.payloads import message_to_payload
from sessions.services.errors import Conflict, Invalid
from sessions.services.governed import (
    governed_context,
    session_policy,
    session_summarizer,
    session_window,
)
from sessions.services.tools import session_tools


@dataclass(frozen=True)
class SessionState:
    """What a compaction plan depends on besides the policy: records, log end and pins."""

    revision: int
    last_seq: int
    pins: tuple[int, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"revision": self.revision, "last_seq": self.last_seq, "pins": list(self.pins)}


def session_state(session: AgentSession) -> SessionState:
    revision = AgentSession.objects.values_list("revision", flat=True).get(pk=session.pk)
    last = Message.objects.filter(session=session).order_by("-seq").values("seq").first()
    return SessionState(revision, -1 if last is None else last["seq"], tuple(pinned_seqs(session)))


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def fingerprint(
    session: AgentSession,
    state: SessionState,
    policy: Policy,
    summarizer: str,
    focus: str,
    keep_from: int | None = None,
) -> str:
    """Identifies one compaction request: the same session, state, policy, summariser, focus
    and kept seq always plan the same covered range, so this is also the job's idempotency
    key."""
    request: dict[str, Any] = {
        "session": str(session.pk),
        "state": state.as_dict(),
        "policy": policy.model_dump(mode="json"),
        "summarizer": summarizer,
        "focus": focus,
    }
    if keep_from is not None:
        request["keep_from"] = keep_from
    return _digest(request)


def keep_threshold(history: EffectiveHistory, keep_from: int | None) -> Threshold | None:
    """The window's keep for "compact everything above this message": the messages from the
    one at seq ``keep_from`` to the end (None: the policy's own keep)."""
    if keep_from is None:
        return None
    position = history.position_of(keep_from)
    if position is None:
        raise Invalid(
            f"message {keep_from} is not in the history the model sees (summarised or cleared)",
            field="keep_from",
        )
    return Threshold(kind="messages", value=max(len(history) - position, 1))


@dataclass(frozen=True)
class CompactionPreview:
    """A dry run: exactly which log messages a compaction would summarise and keep, and what
    the next request would carry."""

    fingerprint: str
    """Pass it back to ``request_compaction`` to apply this plan (refused if stale)."""
    focus: str
    summarizer: str
    state: SessionState
    keep_from: int | None
    first_seq: int | None
    last_seq: int | None
    summarized_seqs: list[int]
    """Log seqs the summary will stand for (those earlier summaries stood for included)."""
    kept_seqs: list[int]
    """Log seqs of the effective history that stay as they are."""
    kept_user_seqs: list[int]
    """Summarised user messages whose words stay verbatim beside the summary."""
    previous_summaries: int
    messages: int
    """Messages the summary will stand for (counting those earlier summaries stood for, and
    the user messages kept verbatim beside it), as its first line will say."""
    unseen: int
    """Of those, the ones the next request does not carry in full now."""
    tokens_before: int
    """Tokens of the effective history now."""
    tokens_kept: int
    """Tokens of what stays (kept messages and kept user words)."""
    summary_tokens_max: int
    """The most the summary may take, its ledger of facts included."""
    sent_now: int
    """Tokens the session's next request carries now (what the x-ray shows)."""
    sent_after_max: int
    """Tokens the next request would carry after it, at most (kept messages, the user's words
    kept and a summary filling its room); ``sent_now`` when nothing is compacted."""
    low_water: int
    """Tokens the next request carries at the Governor's low-water mark."""
    refusal: str | None
    """Why the job will refuse it (what it keeps leaves a summary no room), or None."""
    window_tokens: int
    kept: dict[str, int]
    """Messages it keeps as they are, by zone (head, pinned, tail, sticky)."""
    covered_before: int
    """Messages earlier summaries stand for."""

    @property
    def nothing_to_compact(self) -> bool:
        """Whether no message before the kept tail is left that no summary covers."""
        return not self.summarized_seqs

    @property
    def refused(self) -> bool:
        return self.refusal is not None

    @property
    def shrinks(self) -> bool:
        """Whether the next request would carry less."""
        return not self.nothing_to_compact and self.sent_after_max < self.sent_now

    @property
    def sentence(self) -> str:
        """What it does, in the words of every other place a compaction is described."""
        return compaction_change(
            self.messages,
            self.unseen,
            self.sent_now,
            self.sent_after_max,
            self.low_water,
            at_most=True,
        )

    @property
    def kept_as_they_are(self) -> int:
        """Messages of the effective history that stay and are not summarised (the user
        messages kept verbatim beside the summary are among those it summarises)."""
        return len(set(self.kept_seqs) - set(self.kept_user_seqs))

    @property
    def message(self) -> str:
        """The preview in one sentence: what the model would get, why it would be refused, or
        that there is nothing to compact."""
        if self.nothing_to_compact:
            return nothing_to_compact(self.kept, self.covered_before)
        return self.refusal or self.sentence

    @property
    def tokens_after_estimate(self) -> int:
        return self.tokens_kept + (0 if self.nothing_to_compact else self.summary_tokens_max)


def _covered(history: EffectiveHistory, positions: Sequence[int]) -> tuple[int, int, int, int]:
    """The log range (and the positions range) a compaction of ``positions`` covers: a
    compaction's replacement is taken whole, so the range grows to hold any it touches."""
    spans = {c.id: (c.first_seq, c.last_seq) for c in history.state.compactions}

    def span(position: int) -> tuple[int, int]:
        source = history.sources[position]
        if source.compaction is not None:
            return spans[source.compaction]
        if source.clear is not None:
            # What a clear keeps stands first, pinned, before any range of the log.
            return -1, -1
        assert source.seq is not None
        return source.seq, source.seq

    low_pos, high_pos = min(positions), max(positions)
    low, high = span(low_pos)[0], span(high_pos)[1]
    for position in range(low_pos, high_pos + 1):
        first, last = span(position)
        low, high = min(low, first), max(high, last)
    while low_pos > 0 and span(low_pos - 1)[1] >= low:
        low_pos -= 1
        low = min(low, span(low_pos)[0])
    while high_pos < len(history) - 1 and span(high_pos + 1)[0] <= high:
        high_pos += 1
        high = max(high, span(high_pos)[1])
    return low, high, low_pos, high_pos


def compaction_policy(session: AgentSession) -> Policy:
    """The session's policy with the window it is governed against filled in: a compaction
    plans what to keep by that window (the session's own, else the model's), as governance
    and the automatic trigger measure it."""
    policy = session_policy(session)
    if policy.context_window is None:
        policy = policy.model_copy(update={"context_window": session_window(session)})
    return policy


def preview_compaction(
    session: AgentSession, *, focus: str = "", keep_from: int | None = None
) -> CompactionPreview:
    """What compacting the session now would summarise and keep; nothing is written.

    ``keep_from``: compact everything above the message at this seq (it and what follows
    stay). The compacted history is assembled as the job will assemble it, with a stand-in
    summary, so the seqs listed are exactly those the job's record covers; the figures are the
    job's (``plan_compaction`` with the session's tools and its next request as sent now).
    """
    policy = compaction_policy(session)
    summarizer = session_summarizer(session)
    state = session_state(session)
    history = effective_history(session)
    messages = list(history.messages)
    sent_now = governed_context(session).tokens
    plan = plan_compaction(
        messages,
        policy,
        model=session.model,
        pinned=history.positions(state.pins),
        keep=keep_threshold(history, keep_from),
        tool_tokens=session_tools(session).total,
        sent_now=sent_now,
    )
    key = fingerprint(session, state, policy, summarizer, focus, keep_from)
    tokenizer = tokenizer_for(session.model)
    window = session_window(session)
    if not plan.summarized_indices:
        all_seqs = [s for s in (history.seq_at(p) for p in range(len(history))) if s is not None]
        return CompactionPreview(
            key, focus, summarizer, state, keep_from, None, None, [], all_seqs, [], 0, 0, 0,
            history.tokens, history.tokens, 0, sent_now, sent_now, plan.low_water, None, window,
            plan.kept, plan.covered_before,
        )  # fmt: skip
    stand_in = ModelRequest(
        parts=[UserPromptPart(SUMMARY_PREFIX.format(count=plan.represented))],
        metadata={MARK: {"compaction": "summary"}},
    )
    output = plan.assemble(stand_in)
    replacement = replacement_for(history, messages, output, tokenizer, plan.summarized_indices)
    shown = [history.seq_at(p) for p in range(len(history))]
    replaced = set(replacement.summarized_seqs)
    kept_seqs = [s for s in shown if s is not None and s not in replaced]
    kept_user_seqs = sorted(
        s for p in plan.kept_user_indices if (s := history.seq_at(p)) is not None
    )
    tokens_kept = sum(message_facts(m, tokenizer).tokens for m in output if m is not stand_in)
    return CompactionPreview(
        fingerprint=key,
        focus=focus,
        summarizer=summarizer,
        state=state,
        keep_from=keep_from,
        first_seq=replacement.first_seq,
        last_seq=replacement.last_seq,
        summarized_seqs=replacement.summarized_seqs,
        kept_seqs=kept_seqs,
        kept_user_seqs=kept_user_seqs,
        previous_summaries=len(plan.stripped.summaries),
        messages=plan.represented,
        unseen=min(plan.unseen, plan.represented),
        tokens_before=history.tokens,
        tokens_kept=tokens_kept,
        summary_tokens_max=plan.summary_room,
        sent_now=sent_now,
        sent_after_max=plan.sent_after_max,
        low_water=plan.low_water,
        refusal=no_room(plan) if plan.summary_room < MIN_SUMMARY_TOKENS else None,
        window_tokens=window,
        kept=plan.kept,
        covered_before=plan.covered_before,
    )


@dataclass(frozen=True)
class JobRequest:
    job: CompactionJob
    created: bool
    """False when an identical request already had a job: that job is returned."""


def active_job(session: AgentSession) -> CompactionJob | None:
    return CompactionJob.objects.filter(session=session, status__in=ACTIVE_JOB_STATUSES).first()


def request_compaction(
    session: AgentSession,
    *,
    actor: Any = None,
    focus: str = "",
    expected: str | None = None,
    trigger: str = "manual",
    keep_from: int | None = None,
    reason: str = "",
    detail: str = "",
) -> JobRequest:
    """Queue a compaction job; the same request twice gives the same job.

    ``expected`` is a preview's fingerprint: when the session changed since that preview (an
    append, a record, a pin, a policy change) the request is refused as a conflict. A second
    request while another job of the session is queued or running is refused too, naming it.
    ``keep_from`` compacts everything above the message at that seq. An automatic job says
    why it was queued: ``reason`` (a word) and ``detail`` (a sentence), kept in its plan.
    """
    focus = focus.strip()
    if len(focus) > 2_000:
        raise Invalid("focus is limited to 2,000 characters", field="focus")
    policy = compaction_policy(session)
    summarizer = session_summarizer(session)
    state = session_state(session)
    if keep_from is not None:
        keep_threshold(effective_history(session), keep_from)  # refused here, not in the job
    key = fingerprint(session, state, policy, summarizer, focus, keep_from)
    if expected is not None and expected != key:
        raise Conflict(
            "the session changed since the preview (a message, a record or the policy): "
            "preview again",
            field="expected",
        )
    existing = (
        CompactionJob.objects.filter(session=session, key=key)
        .exclude(status=JobStatus.FAILED)
        .first()
    )
    if existing is not None:
        return JobRequest(existing, created=False)
    try:
        with transaction.atomic():
            job = CompactionJob.objects.create(
                session=session,
                key=key,
                trigger=trigger,
                focus=focus,
                summarizer=summarizer,
                policy=policy.model_dump(mode="json"),
                plan={**state.as_dict(), "keep_from": keep_from, **_why(reason, detail)},
                actor=actor if getattr(actor, "is_authenticated", False) else None,
            )
    except IntegrityError:
        running = active_job(session)
        if running is None:  # it finished in between: the caller may ask again
            raise Conflict("another compaction of this session just finished; retry") from None
        raise Conflict(
            f"a compaction of this session is already {running.status}", job=running
        ) from None
    # The queued event goes out before the worker can announce anything later.
    events.send_on_commit(events.job_progressed, job=job, stage="queued", data={})
    events.send_on_commit(events.job_ready, job=job, countdown=0)
    return JobRequest(job, created=True)


def _why(reason: str, detail: str) -> dict[str, str]:
    return {"reason": reason, "detail": detail} if reason else {}


@dataclass(frozen=True)
class Replacement:
    """A compaction as a record: the log range it covers and what stands in its place."""

    first_seq: int
    last_seq: int
    items: list[dict[str, Any]]
    summarized_seqs: list[int]
    summary_message: dict[str, Any]


def replacement_for(
    history: EffectiveHistory,
    messages: Sequence[ModelMessage],
    out: Sequence[ModelMessage],
    tokenizer: Tokenizer,
    summarized: Collection[int],
) -> Replacement:
    """The record that makes the effective history equal ``out``, the compacted history, whose
    summary replaces the input positions ``summarized`` (the engine's ``summarized_indices``).

    The input and output share their unchanged messages (the same objects), so the changed
    middle is what lies between the common prefix and the common suffix; it is widened to
    whole earlier compactions, whose replacements are replaced whole. A message the compaction
    keeps may come out changed (pair repair completing a request the window keeps): stored
    as it comes out, it is kept, not summarised.
    """
    size = len(messages)
    prefix = 0
    while prefix < min(size, len(out)) and out[prefix] is messages[prefix]:
        prefix += 1
    suffix = 0
    while (
        suffix < min(size, len(out)) - prefix
        and out[len(out) - 1 - suffix] is messages[size - 1 - suffix]
    ):
        suffix += 1
    if prefix + suffix >= size:
        raise Invalid("the compaction changed nothing")
    low, high, low_pos, high_pos = _covered(history, range(prefix, size - suffix))
    middle = out[low_pos : len(out) - (size - 1 - high_pos)]
    kept = {id(messages[p]): p for p in range(low_pos, high_pos + 1)}
    items: list[dict[str, Any]] = []
    summary: dict[str, Any] | None = None
    for message in middle:
        position = kept.get(id(message))
        seq = history.seq_at(position) if position is not None else None
        if position is not None and seq is not None and messages[position] is message:
            items.append({"seq": seq})
            continue
        payload = message_to_payload(message)
        facts = message_facts(message, tokenizer).to_json()
        items.append({"message": payload, "facts": facts, "encoding": tokenizer.encoding_name})
        if is_summary(message):
            summary = payload
    if summary is None:
        raise Invalid("the compacted history holds no summary")
    kept_seqs = {item["seq"] for item in items if "seq" in item}
    kept_seqs |= {
        seq
        for position in range(low_pos, high_pos + 1)
        if position not in summarized and (seq := history.seq_at(position)) is not None
    }
    return Replacement(
        low,
        high,
        items,
        [s for s in range(low, high + 1) if s not in kept_seqs],
        summary,
    )
