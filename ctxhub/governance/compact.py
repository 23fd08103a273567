"""Compaction: the middle of a history summarised by a model, with nothing important lost.

``await compact(messages, policy, summarizer=model)`` returns the compacted history, the summary
and a report. What is kept and what is summarised is decided by the engine itself: the history
is governed with the sliding window forced on (every other mechanism off), so the head (the
first run, as co-cli finds it), pinned messages, system prompts, the latest result of each
protected tool, turn-aborted markers and the recent tail survive exactly as ``govern`` would
keep them, cut only at safe points; what the window would drop is what gets summarised.

* The summariser is a pydantic-ai ``Agent`` with no tools. The conversation reaches it as a
  transcript between tags in the user message, with instructions (sent as instructions, not in
  the transcript) to treat it as data; closing tags inside the data are defused. Its answer is
  poured into a fixed structure (``draft.py``: goal, decisions, files and identifiers, errors
  and fixes, pending tasks, current state) whatever shape it came in, so no instruction
  smuggled into a tool output can change what a summary looks like.
* The transcript is cut into chunks that fit the summariser's own window; several chunks are
  summarised one by one and their summaries summarised again, so a session at 99 % of its
  window compacts with a summariser whose window is no larger.
* A previous summary is fed to the summariser as the start of the transcript and removed from
  the history: summaries merge, they never stack.
* The user's own messages from the summarised part stay verbatim, newest first under a token
  cap (20,000 by default, as AgenticLoop RFC 005 keeps them).
* The fact ledger (``ledger.py``) appends every path, URL, identifier, error, command, number
  and name the summary dropped.
* A summary larger than what it replaces is refused (inflation guard): the history is returned
  unchanged. Any summariser failure puts co-cli's static marker (with the ledger) in its place.

Compaction never mutates its input; messages it changes are rebuilt with
``dataclasses.replace``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)
from pydantic_ai.models import Model

from .compaction_plan import (
    DEFAULT_USER_MESSAGES_TOKENS,
    Form,
    plan_compaction,
    stamp,
)
from .counting import MARK
from .draft import render_draft
from .facts import count_tokens, message_facts
from .governor import govern
from .ledger import LedgerItem, extract_ledger, reconcile
from .policy import Policy, Threshold
from .steps.window import notice_omitted
from .summaries import (
    ACKNOWLEDGEMENT,
    COMPACT_PREFIX,
    MARKER,
    SUMMARY_PREFIX,
    messages_represented,
)
from .summarise import (
    DEFAULT_SUMMARY_TOKENS,
    ChunkCallback,
    model_name,
    render_message,
    request_worked_on,
    summarize,
)
from .tokens import tokenizer_for

Outcome = Literal["summarized", "fallback", "refused", "nothing_to_compact"]


class CompactionReport(BaseModel):
    """What a compaction did, for the dashboard, the API and the audit log."""

    model_config = ConfigDict(frozen=True)

    outcome: Outcome
    """``summarized``; ``fallback`` (the marker replaced the middle); ``refused`` (inflation
    guard, history unchanged); ``nothing_to_compact``."""
    error: str | None = None
    form: Form
    summarizer: str
    model: str | None
    focus: str | None = None
    tokens_before: int
    tokens_after: int
    sent_before: int
    """Tokens the next request carried before, governed as a fresh Governor would."""
    sent_after: int
    """Tokens the next request carries after (``sent_before`` when nothing changed)."""
    messages_before: int
    messages_after: int
    summarized_indices: list[int]
    """Input indices of the messages the summary (or marker) replaces."""
    summarized_messages: int
    """Messages the summary stands for, counting those earlier summaries stood for."""
    kept_user_indices: list[int]
    previous_summaries: int
    chunks: int
    rounds: int
    summary_tokens: int
    replaced_tokens: int
    ledger: list[LedgerItem]
    ledger_omitted: int
    kept_by_summarizer: list[str]
    added_by_ledger: list[str]
    duration_ms: float


@dataclass(frozen=True)
class Compacted:
    """The compacted history, the summary text (None when nothing was compacted) and a report."""

    messages: list[ModelMessage]
    summary: str | None
    report: CompactionReport


async def compact(
    messages: Sequence[ModelMessage],
    policy: Policy | None = None,
    *,
    summarizer: Model | str,
    model: str | None = None,
    pinned: frozenset[int] | set[int] = frozenset(),
    focus: str | None = None,
    keep: Threshold | None = None,
    user_messages_tokens: int = DEFAULT_USER_MESSAGES_TOKENS,
    summarizer_window: int | None = None,
    summary_tokens: int = DEFAULT_SUMMARY_TOKENS,
    form: Form = "inline",
    on_chunk: ChunkCallback | None = None,
) -> Compacted:
    """Summarise the middle of a history with ``summarizer`` (a pydantic-ai model or its name).

    ``model`` names the chat model, whose tokenizer and window size the result; ``pinned`` holds
    input indices that survive verbatim; ``focus`` tells the summariser what matters most.
    ``keep`` is how much recent history stays verbatim (default: the policy's window keep, else
    10 % of the window). ``form="two_message"`` summarises everything but pins and protected
    tools into the ``/compact`` form of co-cli: a request holding the system prompt, the kept
    user messages and the summary, then an acknowledgement. ``on_chunk(round, done, total)``
    is told each time the summariser finishes a chunk.
    """
    started = time.perf_counter()
    policy = policy or Policy()
    tokenizer = tokenizer_for(model)
    two = form == "two_message"
    plan = plan_compaction(
        messages,
        policy,
        model=model,
        pinned=pinned,
        keep=keep,
        form=form,
        user_messages_tokens=user_messages_tokens,
    )
    stripped, partition, middle, users = plan.stripped, plan.partition, plan.middle, plan.users
    history = plan.history
    summarizer_name = model_name(summarizer)
    sent_before = _sent(messages, messages, policy, model, pinned)

    def report(**values: Any) -> CompactionReport:
        base: dict[str, Any] = {
            "form": form,
            "summarizer": summarizer_name,
            "model": model,
            "focus": focus,
            "tokens_before": count_tokens(messages, model=model),
            "sent_before": sent_before,
            "sent_after": sent_before,
            "messages_before": len(messages),
            "summarized_indices": [],
            "summarized_messages": 0,
            "kept_user_indices": [],
            "previous_summaries": len(stripped.summaries),
            "chunks": 0,
            "rounds": 0,
            "summary_tokens": 0,
            "replaced_tokens": 0,
            "ledger": [],
            "ledger_omitted": 0,
            "kept_by_summarizer": [],
            "added_by_ledger": [],
            "duration_ms": round((time.perf_counter() - started) * 1000, 3),
        }
        base.update(values)
        return CompactionReport(**base)

    if not middle:
        unchanged = list(messages)
        return Compacted(
            unchanged,
            None,
            report(
                outcome="nothing_to_compact",
                tokens_after=count_tokens(unchanged, model=model),
                messages_after=len(unchanged),
            ),
        )

    represented = sum(messages_represented(s) for s in stripped.summaries) + sum(
        notice_omitted(m) or 1 for _, m in middle
    )
    summaries_as_messages = [
        ModelRequest(parts=[UserPromptPart(text)]) for text in stripped.summaries
    ]
    ledger = extract_ledger(
        [*summaries_as_messages, *(m for _, m in middle)],
        indices=[*stripped.summary_indices[: len(summaries_as_messages)], *(i for i, _ in middle)],
    )
    items = [render_message(m) for m in summaries_as_messages]
    items += request_worked_on(messages, middle, tokenizer)
    items += [text for _, m in middle if (text := render_message(m))]

    outcome: Outcome = "summarized"
    error: str | None = None
    chunks = rounds = 0
    try:
        result = await summarize(
            items,
            summarizer,
            focus=focus,
            window=summarizer_window,
            summary_tokens=summary_tokens,
            on_chunk=on_chunk,
        )
    except Exception as exc:  # any failure of the summariser: fall back to the marker
        outcome, error = "fallback", f"{type(exc).__name__}: {exc}"
        body = MARKER.format(count=represented)
        reconciled = reconcile("", ledger)
        text = f"{body}\n\n{reconciled.text}" if ledger.items else body
    else:
        chunks, rounds = result.chunks, result.rounds
        reconciled = reconcile(render_draft(result.draft), ledger)
        prefix = COMPACT_PREFIX if two else SUMMARY_PREFIX.format(count=represented)
        text = f"{prefix}\n{reconciled.text}"

    note = {"compaction": "summary" if outcome == "summarized" else "marker"}
    when = stamp([m for _, m in middle])
    summary_part = UserPromptPart(text, timestamp=when) if when else UserPromptPart(text)
    summary_tokens_used = message_facts(ModelRequest(parts=[summary_part]), tokenizer).tokens
    if summary_tokens_used > DEFAULT_SUMMARY_TOKENS:
        # A longer summary (the ledger's facts) leaves less room for user messages verbatim.
        plan = plan.with_users_for(summary_tokens_used, user_messages_tokens, tokenizer)
        users = plan.users
    kept_users = [m for _, m in users]
    if two:
        user_parts = [p for m in kept_users for p in m.parts]
        first = ModelRequest(
            parts=[*stripped.system_parts, *user_parts, summary_part],
            metadata={MARK: {**note, "messages": represented}},
        )
        sticky = [
            m
            for m in partition.messages[:-1]
            if notice_omitted(m) is None or any(m is h for h in history)
        ]
        output = [first, ModelResponse(parts=[TextPart(ACKNOWLEDGEMENT)]), *sticky]
    else:
        summary_message = ModelRequest(
            parts=[summary_part], metadata={MARK: {**note, "messages": represented}}
        )
        output = plan.assemble(summary_message)
    kept_user_tokens = sum(message_facts(m, tokenizer).tokens for m in kept_users)

    previous_tokens = sum(
        message_facts(messages[i], tokenizer).tokens for i in stripped.summary_indices
    )
    replaced = (
        sum(message_facts(m, tokenizer).tokens for _, m in middle)
        + previous_tokens
        - kept_user_tokens
    )
    details: dict[str, Any] = {
        "error": error,
        "summarized_indices": sorted({*(i for i, _ in middle), *stripped.summary_indices}),
        "summarized_messages": represented,
        "kept_user_indices": [i for i, _ in users],
        "chunks": chunks,
        "rounds": rounds,
        "summary_tokens": summary_tokens_used,
        "replaced_tokens": replaced,
        "ledger": ledger.items,
        "ledger_omitted": ledger.omitted,
        "kept_by_summarizer": [i.text for i in reconciled.kept_by_summarizer],
        "added_by_ledger": [i.text for i in reconciled.added_by_ledger],
    }
    if summary_tokens_used >= replaced:
        unchanged = list(messages)
        details["error"] = (
            f"inflation guard: the summary takes {summary_tokens_used} tokens, more than the "
            f"{replaced} it would replace"
        )
        return Compacted(
            unchanged,
            text,
            report(
                outcome="refused",
                tokens_after=count_tokens(unchanged, model=model),
                messages_after=len(unchanged),
                **details,
            ),
        )
    return Compacted(
        output,
        text,
        report(
            outcome=outcome,
            tokens_after=count_tokens(output, model=model),
            sent_after=_sent(output, messages, policy, model, pinned),
            messages_after=len(output),
            **details,
        ),
    )


def _sent(
    history: Sequence[ModelMessage],
    original: Sequence[ModelMessage],
    policy: Policy,
    model: str | None,
    pinned: frozenset[int] | set[int],
) -> int:
    """Tokens the next request carries for ``history`` (the original or its compaction, in
    which the messages pinned in ``original`` are the same objects)."""
    pinned_ids = {id(original[i]) for i in pinned if 0 <= i < len(original)}
    pins = frozenset(p for p, m in enumerate(history) if id(m) in pinned_ids)
    return govern(history, policy, model=model, pinned=pins).tokens_after
