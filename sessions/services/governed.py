"""The governed context of a stored session: what its next model request should carry, and why.

``governed_context`` governs the effective history (log plus records) under the session's
policy and model, with the engine planning from the stored facts and parsing only the messages
it keeps. Evicted outputs are stored as they are met, so the agent (or a person) can read them
back by reference.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from pydantic_ai.messages import ModelMessage

from ctxhub.governance import (
    ContextReport,
    Governed,
    HistoryFigures,
    Policy,
    govern,
    is_summary,
    read_evicted,
)
from ctxhub.governance.tokens import context_window, tokenizer_for
from sessions.history import EffectiveHistory, effective_history, pinned_seqs
from sessions.models import AgentSession, EvictedOutput


def session_policy(session: AgentSession) -> Policy:
    """The session's policy: its stored overrides over the defaults (validated when saved)."""
    return Policy.model_validate(session.policy or {})


def session_window(session: AgentSession) -> int:
    """The context window the session is governed against: its override, else the model's."""
    policy_window = (session.policy or {}).get("context_window")
    if isinstance(policy_window, int) and policy_window > 0:
        return policy_window
    return session.context_window or context_window(session.model)


def session_summarizer(session: AgentSession) -> str:
    """The model that writes the session's summaries: its own choice, else the setting."""
    return session.summarizer or settings.CTXHUB_SUMMARY_MODEL


@dataclass(frozen=True)
class GovernedContext:
    """A session's governed context: the messages to send, the report, and the positions'
    origins in the log (``seq_of``)."""

    session: AgentSession
    history: EffectiveHistory
    governed: Governed
    pinned: list[int]

    @property
    def messages(self) -> list[ModelMessage]:
        return self.governed.messages

    @property
    def report(self) -> ContextReport:
        return self.governed.report

    @property
    def tokens(self) -> int:
        """Tokens the next request carries (system prompt and instructions included)."""
        return self.governed.tokens_after

    def seq_of(self, index: int | None) -> int | None:
        """The log seq of an effective-history index of the report (None: a record's own
        message, or one governance added)."""
        return None if index is None else self.history.seq_at(index)


def governed_context(session: AgentSession, *, policy: Policy | None = None) -> GovernedContext:
    """Govern a stored session: its effective history under its policy, model and pins."""
    history = effective_history(session)
    pins = pinned_seqs(session)
    governed = govern(
        history.messages,
        policy or session_policy(session),
        model=session.model,
        pinned=history.positions(pins),
        facts=history.facts,
        context_window_tokens=session.context_window,
    )
    if governed.evicted:
        _store_evicted(session, history, governed)
    return GovernedContext(session, history, governed, pins)


def _store_evicted(session: AgentSession, history: EffectiveHistory, governed: Governed) -> None:
    """Keep the full texts of evicted outputs (once per reference and session)."""
    new = {ref: text for ref, text in governed.evicted.items() if ref not in history.evicted_refs}
    if not new:
        return
    tokenizer = tokenizer_for(session.model)
    EvictedOutput.objects.bulk_create(
        [
            EvictedOutput(session=session, ref=ref, text=text, tokens=tokenizer.count(text))
            for ref, text in new.items()
        ],
        ignore_conflicts=True,
    )
    history.evicted_refs.update(new)


def read_evicted_output(
    session: AgentSession,
    ref: str,
    *,
    offset: int = 0,
    limit: int = 200,
    grep: str | None = None,
) -> str | None:
    """Numbered lines of an evicted output (see ``ctxhub.governance.read_evicted``); None when
    the session has no output under ``ref``."""
    text = EvictedOutput.objects.filter(session=session, ref=ref).values_list("text", flat=True)
    found = text.first()
    if found is None:
        return None
    return read_evicted(found, ref, offset=offset, limit=limit, grep=grep)


def history_figures(session: AgentSession) -> HistoryFigures:
    """``/history`` of a stored session: its effective history's figures, from stored facts."""
    history = effective_history(session)
    tokenizer = tokenizer_for(session.model)
    window = session_window(session)
    facts = history.facts
    # Only a compaction's own messages can be summaries; they are few and stored inline.
    summaries = sum(
        1
        for position, source in enumerate(history.sources)
        if source.seq is None and is_summary(history.messages[position])
    )
    requests = sum(1 for f in facts if f.request)
    user_turns = sum(1 for f in facts if f.request and f.user_prompt) - summaries
    return HistoryFigures(
        messages=len(facts),
        requests=requests,
        responses=len(facts) - requests,
        user_turns=max(user_turns, 0),
        tool_calls=sum(len(f.call_ids) for f in facts),
        tool_results=sum(len(f.result_ids) for f in facts),
        summaries=summaries,
        tokens=history.tokens,
        window_tokens=window,
        percent_of_window=round(100 * history.tokens / window, 2) if window else 0.0,
        encoding=tokenizer.encoding_name,
        exact=tokenizer.exact,
    )
