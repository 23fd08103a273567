"""The governed context of a stored session: what its next model request should carry, and why.

``governed_context`` governs the effective history (log plus records) under the session's
policy and model, with the engine planning from the stored facts and parsing only the messages
it keeps. Evicted outputs are stored as they are met, so the agent (or a person) can read them
back by reference.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from typing import Any

from django.conf import settings
from django.db import connection
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from ctxhub.governance import (
    Acted,
    ContextReport,
    Governed,
    Governor,
    HistoryFigures,
    Policy,
    is_summary,
    read_evicted,
)
from ctxhub.governance.tokens import context_window, tokenizer_for
from sessions import snapshots, telemetry
from sessions.history import EffectiveHistory, effective_history, is_remembered, pinned_seqs
from sessions.models import AgentSession, EvictedOutput
from sessions.services.collector import collector_paused
from sessions.services.continuing import (
    Continuation,
    SentJSON,
    SentShape,
    continued_request,
    message_item,
    remember,
    remember_whole,
    sent_shape,
)
from sessions.services.errors import Invalid
from sessions.services.sending import Sent, StoredState, action_words, record_sent, stored_state
from sessions.services.tools import session_tools

log = logging.getLogger(__name__)


def session_policy(session: AgentSession) -> Policy:
    """The session's policy: its stored overrides over the defaults (validated when saved)."""
    return Policy.model_validate(session.policy or {})


def session_window(session: AgentSession) -> int:
    """The context window the session is governed against: its policy's, else ``base_window``."""
    policy_window = (session.policy or {}).get("context_window")
    if isinstance(policy_window, int) and policy_window > 0:
        return policy_window
    return base_window(session)


def base_window(session: AgentSession) -> int:
    """The window a policy without one of its own governs against: the session's override,
    else its model's."""
    return session.context_window or context_window(session.model)


def no_room(policy: Policy, window: int) -> str | None:
    """Why a policy and window leave the history no room (every request would be over budget
    and every compaction would fail), or None when they leave some."""
    if policy.history_budget(window) > 0:
        return None
    return (
        f"a window of {window} tokens leaves no room for history under this policy (it "
        f"reserves {policy.reserved_output_tokens} tokens for the answer and a "
        f"{policy.safety_margin:.0%} safety margin); the least window is "
        f"{policy.least_window()} tokens"
    )


def ensure_room(policy: Policy, window: int, *, field: str) -> None:
    """Refuse a policy and window that leave the history no room; ``field`` names what was
    changed."""
    reason = no_room(policy, window)
    if reason is not None:
        raise Invalid(f"{field}: {reason}", field=field)


def session_summarizer(session: AgentSession) -> str:
    """The model that writes the session's summaries: its own choice, else the setting."""
    return session.summarizer or settings.CTXHUB_SUMMARY_MODEL


class GovernedContext:
    """A session's governed context: the messages to send, the report, and the log seq of
    each position of the effective history (``seq_of``). Governed now (``result``), read
    from a snapshot, or continued from the last request sent (``sessions.services.continuing``:
    its messages and report are JSON, parsed only when read)."""

    def __init__(
        self,
        session: AgentSession,
        messages: list[ModelMessage] | None,
        seqs: list[int | None],
        pinned: list[int],
        *,
        governed: Governed | None = None,
        report: ContextReport | None = None,
        sent: SentJSON | None = None,
        figures: ContextReport | None = None,
        prefix_tokens: int | None = None,
    ) -> None:
        self.session = session
        self.seqs = seqs
        self.pinned = pinned
        self._messages = messages
        self._governed = governed
        self._report = report
        self._sent = sent
        self._figures = figures
        self._prefix_tokens = prefix_tokens
        self._items: list[bytes] | None = None
        self._report_json: bytes | None = None

    @classmethod
    def continued(cls, session: AgentSession, found: Continuation) -> GovernedContext:
        return cls(
            session,
            None,
            json.loads(found.json.seqs),
            found.pins,
            sent=found.json,
            figures=found.figures,
            prefix_tokens=found.prefix_tokens,
        )

    @property
    def messages(self) -> list[ModelMessage]:
        if self._messages is None:
            assert self._sent is not None
            self._messages = ModelMessagesTypeAdapter.validate_json(self._sent.messages_json())
        return self._messages

    def sent_message(self, position: int) -> ModelMessage:
        """The message sent at ``position``, read alone from a continued context (as the
        gateway reads the few governance rewrote)."""
        if self._messages is None and self._sent is not None:
            return self._sent.message(position)
        return self.messages[position]

    @property
    def governed(self) -> Governed:
        """The engine's result (a context read from a snapshot or continued has none)."""
        assert self._governed is not None
        return self._governed

    @property
    def result(self) -> Governed | None:
        """The engine's result; None for a context read from a snapshot or continued."""
        return self._governed

    @property
    def source(self) -> str:
        """Where it came from: ``governed``, ``snapshot`` or ``continued``."""
        if self._governed is not None:
            return "governed"
        return "continued" if self._sent is not None else "snapshot"

    @property
    def report(self) -> ContextReport:
        """The report (built or parsed on first access)."""
        if self._report is None:
            if self._governed is not None:
                self._report = self._governed.report
            else:
                assert self._sent is not None
                self._report = ContextReport.model_validate_json(self._sent.report_json())
        return self._report

    @property
    def figures(self) -> ContextReport:
        """The report's figures and steps (its message reports only where ``report`` is
        built or read: a continued context's holds the new messages' alone)."""
        return self._figures if self._figures is not None else self.report

    @property
    def acted(self) -> Acted | None:
        return None if self._governed is None else self._governed.acted

    @property
    def prefix_tokens(self) -> int | None:
        if self._governed is not None:
            return self._governed.prefix_tokens
        return self._prefix_tokens

    @property
    def tokens(self) -> int:
        """Tokens the next request carries: its messages (system prompt and instructions
        included) and the tool definitions sent beside them, as the x-ray adds them up."""
        if self._governed is not None:
            return self._governed.tokens_after + self._governed.tool_definition_tokens
        figures = self.figures
        return figures.tokens_after + figures.tool_definition_tokens

    def sent_shapes(self) -> list[SentShape]:
        """The shape of each message sent, in order (without parsing a continued context's
        report)."""
        if self._sent is not None and self._report is None:
            return self._sent.sent_shapes()
        return [sent_shape(entry) for entry in self.report.messages if entry.kept]

    def message_items(self) -> list[bytes]:
        """Each message's JSON (written once: a request sent whole is kept for the next as
        these items too)."""
        if self._items is None:
            if self._sent is not None:
                self._items = self._sent.items
            else:
                self._items = [message_item(message) for message in self.messages]
        return self._items

    def messages_json(self) -> bytes:
        """The messages as JSON, the array the API answers with."""
        return b"[" + b",".join(self.message_items()) + b"]"

    def report_json(self) -> bytes:
        """The report as JSON (what the API answers with; written once, as the messages)."""
        if self._report_json is None:
            if self._sent is not None and self._report is None:
                self._report_json = self._sent.report_json()
            else:
                report = self.report
                self._report_json = report.__pydantic_serializer__.to_json(report)
        return self._report_json

    def seq_of(self, index: int | None) -> int | None:
        """The log seq of an effective-history index of the report (None: a record's own
        message, or one governance added)."""
        return None if index is None else self.seqs[index]


def governed_context(
    session: AgentSession, *, policy: Policy | None = None, model: str | None = None
) -> GovernedContext:
    """The session's next request as its Governor would send it now: its effective history
    under its policy and model, continuing from the state its last request left. Nothing is
    recorded and no state moves (``send_context`` is for a request being sent). ``policy`` or
    ``model`` show what another policy or model (counted with its tokenizer) would send, as a
    new start.

    A process that governed the session before carries its work over (see
    ``sessions.history``); one that has not reads the snapshot a previous governance left, if
    nothing that decides the result changed since (and builds its own carried state in the
    background, so the request after the next append is governed warm); otherwise the session
    is governed cold and the snapshot written for the next process.
    """
    with telemetry.governing(session, sent=False, model=model) as span, collector_paused():
        context = _context(session, policy, model)[0]
        telemetry.governed(
            span,
            context,
            model=model or session.model,
            preview=policy is not None or model is not None,
        )
    return context


def send_context(session: AgentSession) -> GovernedContext:
    """The context of a model request being sent now (an agent's ``/context``, a chat turn):
    the session's Governor continues from its stored state, and the request and the state it
    leaves are recorded (``sessions.services.sending``). A process that lost the race to
    another sending for the same session governs again from that one's state."""
    with telemetry.governing(session, sent=True) as span:
        context, number = _send(session)
        telemetry.governed(span, context, model=session.model, sent=True, number=number)
    return context


def _send(session: AgentSession) -> tuple[GovernedContext, int | None]:
    """The context sent, and its number among the session's requests (None: not recorded,
    other processes kept winning the race). It is continued from the last request sent when
    the engine can (``sessions.services.continuing``), and governed whole otherwise."""
    policy = session_policy(session)
    tools = session_tools(session).total
    for _ in range(SEND_ATTEMPTS):
        stored = stored_state(session)
        found = continued_request(session, stored, policy, tools)
        if found is not None:
            context = GovernedContext.continued(session, found)
            _store_evicted(session, found.evicted, set())  # the new messages' alone
            sent = Sent(context.figures, None, found.prefix_tokens, found.last_seq)
            if record_sent(session, stored, found.state, sent):
                remember(session, found.entry)
                return context, stored.version + 1
            continue
        with collector_paused():
            context, whole, state, history = _context(session, None, None, send=True, stored=stored)
            assert whole is not None
            assert state is not None
            assert history is not None
            governed = context.governed
            words = action_words(context.report, context.seq_of) if governed.acted else ""
            sent = Sent(
                context.report,
                governed.acted,
                governed.prefix_tokens,
                max((seq for seq in context.seqs if seq is not None), default=-1),
                words,
            )
            if record_sent(session, whole, state, sent):
                remember_whole(session, whole.version + 1, state, context, history)
                return context, whole.version + 1
    log.warning("session %s: sent without recording, %d writers raced", session.pk, SEND_ATTEMPTS)
    return context, None


SEND_ATTEMPTS = 5
"""Tries at recording a request sent while other processes send for the same session."""


def refresh_snapshot(session: AgentSession) -> None:
    """Govern the session as it is now and store the snapshot a process that comes to it cold
    reads (``sessions.snapshots``)."""
    with collector_paused():
        context, stored, _, _ = _context(session, None, None)
    assert stored is not None
    key = snapshots.key(session, context.pinned, stored.version)
    snapshots.write(session, key, context.messages, context.report, context.seqs)


def _context(
    session: AgentSession,
    policy: Policy | None,
    model: str | None,
    *,
    send: bool = False,
    stored: StoredState | None = None,
) -> tuple[GovernedContext, StoredState | None, dict[str, Any] | None, EffectiveHistory | None]:
    """The governed context, the stored state it continued from (None for another policy or
    model; ``stored``: as the caller just read it), and, when ``send``, the state the request
    leaves and the history governed."""
    wait_for_warm_up(session)
    key = None
    other_model = model if model not in (None, session.model) else None
    own = policy is None and other_model is None
    stored = (stored or stored_state(session)) if own else None
    # Snapshots are for a process that holds nothing of the session, under its own policy.
    if stored is not None and not send and not is_remembered(session):
        pins = pinned_seqs(session)
        key = snapshots.key(session, pins, stored.version)
        found = snapshots.read(session, key)
        if found is not None:
            messages, report, seqs = found
            _warm_up_later(session)
            context = GovernedContext(session, messages, seqs, pins, report=report)
            return context, stored, None, None
    history = effective_history(session)
    pins = list(history.state.pins)
    governor = history.governor(policy or session_policy(session), other_model or session.model)
    governed = _govern(session, history, governor, stored, other_model)
    _store_evicted(session, governed.evicted, history.evicted_refs)
    seqs = [source.seq for source in history.sources]
    context = GovernedContext(session, governed.messages, seqs, pins, governed=governed)
    if key is not None:
        snapshots.write(session, key, context.messages, context.report, context.seqs)
    if not send:
        return context, stored, None, None
    return context, stored, governor.state(), history


def _govern(
    session: AgentSession,
    history: EffectiveHistory,
    governor: Governor,
    stored: StoredState | None,
    other_model: str | None = None,
) -> Governed:
    """Govern the history from the stored state (another policy or model: as a new start)."""
    governor.adopt(None if stored is None else stored.state)
    tools = session_tools(session, other_model)  # counted when set, for the session's model
    return governor.govern(
        history.messages,
        pinned=history.positions(history.state.pins),
        tool_definitions=tools.definitions,
        tool_tokens=tools.total,
        # Stored counts are the session model's: another model's are counted afresh.
        facts=history.facts if other_model is None else None,
        context_window_tokens=session.context_window,
    )


WARM_UP_DELAY_SECONDS = 2.0
"""A warm-up starts this long after the snapshot was served, unless a caller needs it sooner:
it holds the interpreter for a while, and the request that read the snapshot (a page, say)
should finish first."""


class _WarmUp(threading.Thread):
    """Builds a session's carried state in the background after a snapshot served it."""

    def __init__(self, session: AgentSession) -> None:
        super().__init__(name=f"warm-up-{session.pk}", daemon=True)
        self.session = session
        self.now = threading.Event()

    def run(self) -> None:
        self.now.wait(WARM_UP_DELAY_SECONDS)
        try:
            with collector_paused():
                history = effective_history(self.session)
                governor = history.governor(session_policy(self.session), self.session.model)
                governed = _govern(self.session, history, governor, stored_state(self.session))
                _ = governed.report
        except Exception:  # only a warm-up: the next call governs cold and says why if it fails
            log.exception("warming up session %s failed", self.session.pk)
        finally:
            connection.close()
            with _WARMING_LOCK:
                _WARMING.pop(self.session.pk, None)


# Sessions whose carried state a thread is building after they were served from a snapshot.
_WARMING: dict[Any, _WarmUp] = {}
_WARMING_LOCK = threading.Lock()


def _warm_up_later(session: AgentSession) -> None:
    with _WARMING_LOCK:
        if session.pk in _WARMING:
            return
        thread = _WarmUp(session)
        _WARMING[session.pk] = thread
    thread.start()


def wait_for_warm_up(session: AgentSession, timeout: float | None = None) -> None:
    """Have a pending warm-up of the session in this process run now, and wait for it (a call
    during it would otherwise govern cold beside it)."""
    thread = _WARMING.get(session.pk)
    if thread is not None and thread is not threading.current_thread():
        thread.now.set()
        thread.join(timeout)


def _store_evicted(session: AgentSession, evicted: dict[str, str], known: set[str]) -> None:
    """Keep the full texts of evicted outputs (once per reference and session); ``known``:
    the references known to be stored, updated."""
    new = {ref: text for ref, text in evicted.items() if ref not in known}
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
    known.update(new)


# What ``eviction_ref`` makes; anything else (a NUL character, a path) names nothing stored.
EVICTED_REF = re.compile(r"ev_[0-9a-f]{1,64}")


def read_evicted_output(
    session: AgentSession,
    ref: str,
    *,
    offset: int = 0,
    limit: int = 200,
    grep: str | None = None,
) -> str | None:
    """Numbered lines of an evicted output (see ``ctxhub.governance.read_evicted``); None when
    the session has no output under ``ref`` (or ``ref`` is no reference at all)."""
    if not EVICTED_REF.fullmatch(ref):
        return None
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
    user_turns = sum(1 for f in facts if f.request and f.user_prompt)
    return HistoryFigures(
        messages=len(facts),
        requests=requests,
        responses=len(facts) - requests,
        user_turns=user_turns,
        tool_calls=sum(len(f.call_ids) for f in facts),
        tool_results=sum(len(f.result_ids) for f in facts),
        summaries=summaries,
        tokens=history.tokens,
        window_tokens=window,
        percent_of_window=round(100 * history.tokens / window, 2) if window else 0.0,
        encoding=tokenizer.encoding_name,
        exact=tokenizer.exact,
    )
