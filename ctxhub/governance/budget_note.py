"""The budget note (``Policy.awareness.budget_note``, opt-in): the model is told its context
window, the tokens its history takes and what the governor does next, as Claude's context
awareness and pydantic-ai-harness's near-limit warning tell theirs.

The note is a ``SystemPromptPart`` in a request of its own that governance writes (marked
``{"ctxhub": {"notice": "budget"}}``, like the window's notice), a few lines::

    Context budget (the context governor's note, written at this point; it changes only
    when the governor acts):
    - Context window: 128,000 tokens, of which the conversation history may use 110,000.
    - History here: 41,287 tokens.
    - Next: when the history would pass 110,000 tokens, the governor masks older tool
      results and omits older messages, bringing it down to about 44,000 tokens.

**Where it sits, and why that keeps the prompt cache.** A provider serves from its cache the
longest prefix of a request that an earlier request sent byte for byte. A note at the end of
every request would be read fresh each time, but it would move: each request would differ from
the one before where the note stood, and Anthropic (whose cache is written at breakpoints, the
latest at the end of the request) would find no prefix it wrote. A note in the head, on the
other hand, would be rewritten at every action at the very start of the request, so an action
that masks a few results deep in the history would write the whole request to the cache again.
So the note is written where the conversation stands when the governor acts — just before the
request the model is about to answer (before the newest exchange when that request holds tool
results, so no call is parted from its result; after the first request at the earliest, so the
first request's system prompt stays the standing one) — with the figures of that request, and
it stays there, word for word, until the next action: between actions every request is the one
before with the new messages appended, the note inside the unchanged prefix. At the next
action the old note goes and a new one is written where the conversation then stands: the
request changes from the old note on at the latest, which an action mostly rewrites anyway
(moving the window rewrites everything after the head; masking, from the first result it
masks, seldom one newer than the last action), and the governor weighs each candidate action
with the prefix it keeps up to there. It is a mid-conversation system prompt, which pydantic-ai
sends in place (a system entry where the provider takes one there, ``<system>``-tagged user
text elsewhere), never hoisted into the standing system prompt. It is also written again,
without an action, when the window or the history budget changes (other tool definitions or
instructions): those change the start of the request, so the cache is rewritten then whatever
the note does.

**What it says.** The figures of the request it was written in: the window, the history budget,
the history's tokens there (the note included, as the report counts it: the note's figure is that
request's ``ContextReport.history_tokens_after``), where the governor acts next (the high-water
mark) with what (masking older results, moving the window; the last resorts when the policy has
neither) and what it cuts down to (the low-water mark). With hysteresis off every request is
governed on its own, so the note is written afresh in each. The figures live in the Governor's
state (``Plan.note``), so a Governor rebuilt from it sends the same note.

**How it is counted.** The note is part of the history sent, like the window's notice: in
``tokens_after``, against the history budget, reported as a message governance added
(``index`` None) with a ``system-prompt`` part, and its figures in ``ContextReport.budget_note``.
While the governor plans, its room is held back from the limit every step aims at (the tokens the
note would take with the widest figures), so no step has to make room for it afterwards, and a
message trigger counts it as the message it is. The note is left out when it would take more
than a tenth of the budget (a tiny window). ``plans.write_note`` writes it and ``plans.place``
puts it in a request; this module holds what it is.

A history that already holds a note (a governed request governed again, as overflow recovery
does) keeps it as a system prompt and gets no second one.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai.messages import ModelRequest, SystemPromptPart

from .counting import MARK, message_tokens
from .facts import BUDGET_NOTE, EPOCH
from .policy import LARGEST, Policy

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .facts import MessageFacts
    from .tokens import Tokenizer

Act = Literal["mask", "window", "drop_groups", "shrink"]
"""What the governor does when it acts: mask older results, move the window, and (as last
resorts, named only when the policy has neither) drop older iteration groups, shrink outputs."""

LARGEST_SHARE = 10
"""The note is left out when it would take more than a tenth of the history budget."""


class BudgetNote(BaseModel):
    """What a budget note says and where it goes: plain data, kept in the Governor's state."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    before: int = Field(ge=1, le=LARGEST)
    """The position of the repaired history the note goes in front of (the history's size:
    after its last message)."""
    at: datetime = EPOCH
    """Its timestamp (the message before it's): the note is the same message every time."""
    window: int = Field(ge=0, le=LARGEST)
    budget: int = Field(ge=0, le=LARGEST)
    """The history budget."""
    used: int = Field(ge=0, le=LARGEST)
    """The history's tokens in the request it was written in, the note included."""
    acts_at: int = Field(ge=0, le=LARGEST)
    """History tokens past which the governor acts (the high-water mark)."""
    cuts_to: int | None = Field(default=None, ge=0, le=LARGEST)
    """What an action cuts the history down to (the low-water mark); None with hysteresis off,
    when every request is cut only as far as it must."""
    acts: tuple[Act, ...] = ()

    def text(self) -> str:
        """The note as the model reads it."""
        lines = [
            "Context budget (the context governor's note, written at this point; it changes "
            "only when the governor acts):",
            f"- Context window: {self.window:,} tokens, of which the conversation history may "
            f"use {self.budget:,}.",
            f"- History here: {self.used:,} tokens.",
        ]
        what = _words(self.acts)
        if what is None:
            lines.append(
                f"- Next: nothing is cut automatically; past {self.budget:,} tokens the request "
                "is over budget."
            )
        elif self.cuts_to is None:
            lines.append(
                f"- Next: whenever the history would pass {self.acts_at:,} tokens, the governor "
                f"{what} until it fits."
            )
        else:
            lines.append(
                f"- Next: when the history would pass {self.acts_at:,} tokens, the governor "
                f"{what}, bringing it down to about {self.cuts_to:,} tokens."
            )
        return "\n".join(lines)

    def figures(self) -> dict[str, Any]:
        """What it states, as ``ContextReport.budget_note`` gives it."""
        return {
            "window_tokens": self.window,
            "budget_tokens": self.budget,
            "used_tokens": self.used,
            "acts_at_tokens": self.acts_at,
            "cuts_to_tokens": self.cuts_to,
            "acts": list(self.acts),
            "text": self.text(),
        }

    def message(self) -> ModelRequest:
        """The request the note is sent as."""
        part = SystemPromptPart(self.text(), timestamp=self.at, metadata={MARK: dict(BUDGET_NOTE)})
        return ModelRequest(parts=[part], metadata={MARK: dict(BUDGET_NOTE)})


_PHRASES: dict[Act, str] = {
    "mask": "masks older tool results",
    "window": "omits older messages",
    "drop_groups": "drops the current turn's older tool exchanges",
    "shrink": "shrinks the newest tool outputs",
}


def _words(acts: Sequence[Act]) -> str | None:
    phrases = [_PHRASES[act] for act in acts]
    if not phrases:
        return None
    if len(phrases) == 1:
        return phrases[0]
    return ", ".join(phrases[:-1]) + " and " + phrases[-1]


def acts_of(policy: Policy) -> tuple[Act, ...]:
    """What the governor does when it acts under ``policy``: masking and the window; the last
    resorts only when the policy has neither."""
    acts: list[Act] = []
    if policy.masking.enabled:
        acts.append("mask")
    if policy.window.enabled:
        acts.append("window")
    if not acts:
        if policy.drop_groups:
            acts.append("drop_groups")
        if policy.shrink_newest:
            acts.append("shrink")
    return tuple(acts)


def reserve(policy: Policy, window: int, tokenizer: Tokenizer) -> int:
    """The most tokens the note can take under ``policy`` in ``window``: rendered with every
    figure as wide as the window's (a figure's tokens grow only with its digits), for a history
    within its budget."""
    widest = 10 ** len(str(max(window, 1))) - 1
    hysteresis = policy.hysteresis
    note = BudgetNote(
        before=1,
        window=widest,
        budget=widest,
        used=widest,
        acts_at=widest,
        cuts_to=widest if hysteresis.enabled else None,
        acts=acts_of(policy),
    )
    return message_tokens(note.message(), tokenizer)


def position(facts: Sequence[MessageFacts]) -> int:
    """Where a note written now goes, in front of which position of the repaired history: the
    request the model is about to answer, or the newest exchange when that request holds tool
    results (a call is never parted from its result); after the last message when that is an
    answer; never in front of the first message (its system prompt is the standing one)."""
    size = len(facts)
    last = size - 1
    fact = facts[last]
    if not fact.request:
        at = last if fact.call_ids else size
    elif fact.result_ids and last > 0 and facts[last - 1].call_ids:
        at = last - 1
    else:
        at = last
    return max(at, 1)
