"""What a compaction will summarise and keep, decided before any model is called: the window
forced on over the history, and the user messages kept verbatim."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Self

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    UserPromptPart,
)

from .facts import message_facts
from .governed import Governed
from .governor import govern
from .policy import DEFAULT_NOTICE, MIN_TRUNCATION_TOKENS, Policy, Threshold
from .steps.truncate import truncate_text
from .steps.window import notice_omitted
from .summaries import (
    Stripped,
    is_summary_part,
    strip_summaries,
)
from .summarise import (
    DEFAULT_SUMMARY_TOKENS,
)
from .tokens import Tokenizer, context_window, tokenizer_for

Form = Literal["inline", "two_message"]
"""Where the summary goes: in place of the middle, or co-cli's ``/compact`` two messages."""

DEFAULT_USER_MESSAGES_TOKENS = 20_000
DEFAULT_KEEP = Threshold(kind="fraction", value=0.1)


# --- compaction -------------------------------------------------------------------------------


def _partition_policy(
    policy: Policy, keep: Threshold, window_tokens: int, *, keep_head: bool
) -> Policy:
    """The policy that makes ``govern`` show what compaction keeps: only the window, forced."""
    kind, value = keep.resolve(window_tokens)
    trigger = {"kind": "tokens" if kind == "messages" else "messages", "value": 1}
    data = policy.model_dump(mode="json")
    data.update(
        context_window=10**9,
        reserved_output_tokens=0,
        safety_margin=0,
        history_cap_tokens=None,
        tool_output={"limit": None},
        text={"limit": None},
        eviction={"threshold_tokens": None},
        masking={"apply": "never"},
        dedupe={"enabled": False},
        drop_groups=False,
        shrink_newest=False,
    )
    data["window"].update(
        enabled=True,
        triggers=[trigger],
        keep={"kind": kind, "value": max(1, value)},
        keep_head=keep_head,
        # The notice marks where the summary goes, even where the policy cuts silently.
        notice=DEFAULT_NOTICE,
    )
    # The partition becomes the compacted history: a budget note belongs to a request sent.
    data["awareness"].update(budget_note=False)
    return Policy.model_validate(data)


def _user_parts(message: ModelMessage) -> list[UserPromptPart]:
    if not isinstance(message, ModelRequest) or notice_omitted(message) is not None:
        return []
    return [p for p in message.parts if isinstance(p, UserPromptPart) and not is_summary_part(p)]


def select_users(
    middle: list[tuple[int, ModelMessage]], cap: int, tokenizer: Tokenizer
) -> list[tuple[int, ModelRequest]]:
    """The middle's user messages to keep verbatim: newest first while under ``cap`` tokens.

    The first one that does not fit whole is kept cut to the room left, with a marker (as
    Codex does), and the older ones stop there: the newest words a user typed are never lost
    to an older, smaller message.
    """
    chosen: list[tuple[int, ModelRequest]] = []
    used = 0
    for index, message in reversed(middle):
        parts = _user_parts(message)
        if not parts or not isinstance(message, ModelRequest):
            continue
        copy = (
            message
            if len(parts) == len(message.parts)
            else replace(message, parts=list(parts), metadata=None)
        )
        tokens = message_facts(copy, tokenizer).tokens
        if used + tokens > cap:
            cut = _cut_to(copy, tokens, cap - used, tokenizer)
            if cut is not None:
                chosen.append((index, cut))
            break
        used += tokens
        chosen.append((index, copy))
    chosen.reverse()
    return chosen


def _cut_to(
    message: ModelRequest, tokens: int, room: int, tokenizer: Tokenizer
) -> ModelRequest | None:
    """``message`` with its longest text cut so the whole takes at most ``room`` tokens; None
    when no room is worth it (a marker alone takes most of a few dozen tokens)."""
    texts = [
        (n, p)
        for n, p in enumerate(message.parts)
        if isinstance(p, UserPromptPart) and isinstance(p.content, str)
    ]
    if not texts or room < MIN_TRUNCATION_TOKENS:
        return None
    number, longest = max(texts, key=lambda item: len(item[1].content))
    assert isinstance(longest.content, str)
    limit = room - (tokens - tokenizer.count(longest.content))
    if limit < MIN_TRUNCATION_TOKENS:
        return None
    text = truncate_text(
        longest.content, limit, unit="tokens", strategy="both", tokenizer=tokenizer
    )
    if text is None:
        return None
    parts = list(message.parts)
    parts[number] = replace(longest, content=text)
    return replace(message, parts=parts, metadata=None)


def stamp(messages: Sequence[ModelMessage]) -> Any:
    for message in reversed(messages):
        if isinstance(message, ModelResponse):
            return message.timestamp
        for part in message.parts:
            stamp = getattr(part, "timestamp", None)
            if stamp is not None:
                return stamp
    return None


@dataclass(frozen=True)
class CompactionPlan:
    """What a compaction will summarise and keep, decided before any model is called."""

    stripped: Stripped
    history: list[ModelMessage]
    partition: Governed
    middle: list[tuple[int, ModelMessage]]
    """(input index, message) of each message the window would drop: what gets summarised."""
    users: list[tuple[int, ModelRequest]]
    """(input index, copy) of the middle's user messages kept verbatim."""
    aim: int
    """Tokens the compacted history aims at: the low-water mark of the history budget, or what
    the next request carries now (``sent_before``) when that is less."""
    sent_before: int
    """Tokens the next request carries before the compaction."""
    kept_tokens: int
    """Tokens the next request would carry of what the compaction keeps."""
    users_tokens: int = 0
    """Tokens of the user messages kept verbatim."""

    @property
    def room(self) -> int:
        """Tokens the aim leaves beside what is kept, for the summary and the user messages
        kept verbatim."""
        return max(0, self.aim - self.kept_tokens)

    def summary_tokens_for(self, requested: int) -> int:
        """The longest summary to ask for: ``requested``, or what the room leaves beside the
        user messages kept verbatim when that is less."""
        return max(0, min(requested, self.room - self.users_tokens))

    def with_users_for(self, summary_tokens: int, cap: int, tokenizer: Tokenizer) -> Self:
        """This plan keeping what user messages fit beside a summary of ``summary_tokens``
        (at most ``cap`` tokens of them)."""
        room = max(0, min(cap, self.room - summary_tokens))
        users = select_users(self.middle, room, tokenizer)
        tokens = sum(message_facts(m, tokenizer).tokens for _, m in users)
        return replace(self, users=users, users_tokens=tokens)

    @property
    def summarized_indices(self) -> list[int]:
        """Input indices the summary replaces, earlier summaries included (empty: nothing to
        compact)."""
        if not self.middle:
            return []
        return sorted({*(i for i, _ in self.middle), *self.stripped.summary_indices})

    @property
    def kept_user_indices(self) -> list[int]:
        return [i for i, _ in self.users]

    def assemble(self, summary: ModelRequest) -> list[ModelMessage]:
        """The compacted history in the inline form, ``summary`` standing for the middle: the
        window's output with the kept user messages and the summary where its notice was."""
        originals = {id(m) for m in self.history}
        kept_users = [m for _, m in self.users]
        output: list[ModelMessage] = []
        for message in self.partition.messages:
            if notice_omitted(message) is not None and id(message) not in originals:
                output.extend([*kept_users, summary])
            else:
                output.append(message)
        return output


def plan_compaction(
    messages: Sequence[ModelMessage],
    policy: Policy | None = None,
    *,
    model: str | None = None,
    pinned: frozenset[int] | set[int] = frozenset(),
    keep: Threshold | None = None,
    form: Form = "inline",
    user_messages_tokens: int = DEFAULT_USER_MESSAGES_TOKENS,
) -> CompactionPlan:
    """The messages ``compact`` with the same arguments would summarise, without summarising:
    a preview, and the first half of ``compact`` itself.

    The compacted history aims at the low-water mark of the history budget, or at what the
    next request carries now when that is less: a compaction leaves the next requests room to
    grow, and never makes the next one larger. Unless ``keep`` is given, fewer recent messages
    are kept verbatim where they would leave the summary less than its share of the aim (half
    of it, or the summary's default size when that is less).
    """
    policy = policy or Policy()
    tokenizer = tokenizer_for(model)
    window_tokens = policy.context_window or context_window(model)
    two = form == "two_message"
    stripped = strip_summaries(messages, pull_system=two)
    history = list(stripped.history)
    if two:
        # A turn starting now: the window then keeps nothing recent, only what is sticky.
        history.append(ModelRequest(parts=[UserPromptPart("\u2026")]))
    position_of = {index: p for p, index in enumerate(stripped.index)}
    pins = frozenset(position_of[i] for i in pinned if i in position_of)
    keep_head = not two and policy.window.keep_head
    sent_before = next_request_tokens(messages, messages, policy, model, pinned)
    low_water = int(policy.history_budget(window_tokens) * policy.hysteresis.low_water)
    aim = min(low_water, sent_before)

    def partition_keeping(keep: Threshold) -> tuple[Governed, int]:
        """What the window forced on keeps, and the tokens it would send, the notice
        standing where the summary goes."""
        rules = _partition_policy(policy, keep, window_tokens, keep_head=keep_head)
        partition = govern(history, rules, model=model, pinned=pins)
        return partition, next_request_tokens(partition.messages, messages, policy, model, pinned)

    if two:
        partition, kept = partition_keeping(Threshold(kind="tokens", value=1))
    else:
        partition, kept = partition_keeping(keep or policy.window.keep or DEFAULT_KEEP)
        # Where what is kept leaves the summary less than its share of the aim, fewer recent
        # messages are kept (unless the caller said how many).
        share = min(DEFAULT_SUMMARY_TOKENS, aim // 2)
        if keep is None and _drops(partition) and kept > aim - share:
            partition, kept = partition_keeping(_smaller_keep(partition, kept - (aim - share)))
    middle = _middle(partition, stripped)
    plan = CompactionPlan(stripped, history, partition, middle, [], aim, sent_before, kept)
    # Where the room is short, the summary and the user's own words share it.
    summary = min(DEFAULT_SUMMARY_TOKENS, plan.room // 2)
    return plan.with_users_for(summary, user_messages_tokens, tokenizer)


def _middle(partition: Governed, stripped: Stripped) -> list[tuple[int, ModelMessage]]:
    """(input index, message) of each message the window forced on drops."""
    dropped = [
        r.index
        for r in partition.report.messages
        if r.index is not None and not r.kept and r.index < len(stripped.index)
    ]
    return [(stripped.index[p], stripped.history[p]) for p in dropped]


def _drops(partition: Governed) -> bool:
    return any(not m.kept for m in partition.report.messages if m.index is not None)


def _smaller_keep(partition: Governed, excess: int) -> Threshold:
    """A keep of ``excess`` fewer recent tokens than ``partition`` keeps (the current request
    is always kept)."""
    tail = sum(m.tokens_after for m in partition.report.messages if m.kept and m.zone == "tail")
    return Threshold(kind="tokens", value=max(1, tail - excess))


def next_request_tokens(
    history: Sequence[ModelMessage],
    original: Sequence[ModelMessage],
    policy: Policy,
    model: str | None,
    pinned: frozenset[int] | set[int],
) -> int:
    """Tokens the next request carries for ``history`` (the original or its compaction, in
    which the messages pinned in ``original`` are the same objects), governed as a fresh
    Governor would."""
    pinned_ids = {id(original[i]) for i in pinned if 0 <= i < len(original)}
    pins = frozenset(p for p, m in enumerate(history) if id(m) in pinned_ids)
    return govern(history, policy, model=model, pinned=pins).tokens_after
