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
from .ledger import Ledger, extract_ledger, facts_section
from .policy import DEFAULT_NOTICE, MIN_TRUNCATION_TOKENS, Policy, Threshold
from .recall import mention
from .report import MessageReport
from .steps.truncate import truncate_text
from .steps.window import notice_omitted
from .summaries import (
    SUMMARY_PREFIX,
    Stripped,
    is_summary_part,
    messages_represented,
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
    policy: Policy,
    keep: Threshold,
    window_tokens: int,
    *,
    keep_head: bool,
    head: Threshold | None = None,
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
        head=head.model_dump() if head is not None else data["window"]["head"],
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


MIN_SUMMARY_TOKENS = 200
"""The shortest summary worth writing: the fixed structure and a few facts."""


@dataclass(frozen=True)
class CompactionPlan:
    """What a compaction will summarise and keep, decided before any model is called."""

    stripped: Stripped
    history: list[ModelMessage]
    partition: Governed
    middle: list[tuple[int, ModelMessage]]
    """(input index, message) of each message before the kept tail that no summary covers
    yet (pins, the head and what the window always keeps aside): what gets summarised, with
    the user messages earlier summaries kept verbatim (kept again, or not, beside the new)."""
    users: list[tuple[int, ModelRequest]]
    """(input index, copy) of the middle's user messages kept verbatim."""
    aim: int
    """Tokens the next request aims at after the compaction: the low-water mark, or what it
    carries now when that is less and the summary would replace only messages sent in full;
    ``limit`` when what is kept leaves no room for a summary below that."""
    sent_before: int
    """Tokens the next request carries before the compaction (its messages, system prompt
    and instructions included, and its tool definitions, as every figure here)."""
    kept_tokens: int
    """Tokens the next request would carry of what the compaction keeps."""
    low_water: int
    """Tokens the next request carries at the Governor's low-water mark (below the
    budget)."""
    limit: int
    """The most the next request may carry after the compaction, or it is refused: the
    low-water mark, or what it carries now when that is more; what it carries now when the
    summary would replace only messages it sends in full."""
    hidden: frozenset[int]
    """Input indices of the middle's messages the next request does not carry in full now
    (dropped by the window, or with an output masked, cut or evicted): what the summary gives
    back."""
    ledger: Ledger
    """The facts of what is summarised (earlier summaries included), for the summary to keep."""
    head_cut: bool = False
    """Whether the head was cut to the first request to make room (its first run's work is
    summarised with the middle)."""
    summary_need: int = 0
    """The most the summary can take, whatever its room: its frame, the draft asked for and
    every fact of the ledger."""
    users_tokens: int = 0
    """Tokens of the user messages kept verbatim."""

    @property
    def new(self) -> list[tuple[int, ModelMessage]]:
        """The messages of the middle no summary covers yet (none: nothing to compact)."""
        carried = {index for index, _ in self.stripped.kept_users}
        return [(index, message) for index, message in self.middle if index not in carried]

    @property
    def covered_before(self) -> int:
        """Messages earlier summaries stood for."""
        return sum(messages_represented(text) for text in self.stripped.summaries)

    @property
    def represented(self) -> int:
        """Messages the summary stands for: those of the middle it replaces, and those earlier
        summaries stood for. A user message kept whole beside it is not one of them (one kept
        cut, or without its other parts, is: the summary stands for the rest)."""
        beside = self._beside
        # A user message an earlier summary kept beside it is in the middle again: counted
        # now unless it is kept beside this one too (the earlier summary did not count it).
        return self.covered_before + sum(
            notice_omitted(message) or 1 for index, message in self.middle if index not in beside
        )

    @property
    def _beside(self) -> set[int]:
        """Input indices of the user messages kept whole beside the summary."""
        originals = dict(self.middle)
        return {index for index, kept in self.users if kept is originals.get(index)}

    @property
    def unseen(self) -> int:
        """Of those, the messages the next request does not carry in full now: the hidden
        ones, and those earlier summaries stood for."""
        return self.covered_before + len(self.hidden - self._beside)

    @property
    def kept(self) -> dict[str, int]:
        """How many messages of the history it keeps as they are, by zone: ``head``,
        ``pinned``, ``tail`` (the recent ones) and ``sticky`` (what the window always keeps
        between them: system prompts, a protected tool's latest call, aborted turns)."""
        zones = {"head": 0, "pinned": 0, "tail": 0, "sticky": 0}
        for message in self.partition.report.messages:
            if message.index is not None and message.kept:
                zones["sticky" if message.zone == "middle" else message.zone] += 1
        return zones

    @property
    def room(self) -> int:
        """Tokens the aim leaves beside what is kept, for the summary and the user messages
        kept verbatim."""
        return max(0, self.aim - self.kept_tokens)

    @property
    def summary_room(self) -> int:
        """The most tokens the summary may take, ledger included: what the aim leaves beside
        what is kept and the user messages kept verbatim, or what it can take at most when
        that is less."""
        return max(0, min(self.room - self.users_tokens, self.summary_need))

    @property
    def sent_after_max(self) -> int:
        """The most the next request carries after the compaction (a summary filling its
        room); ``sent_before`` when nothing is compacted."""
        if not self.new:
            return self.sent_before
        return self.kept_tokens + self.users_tokens + self.summary_room

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
        if not self.new:
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
    tool_tokens: int = 0,
    sent_now: int | None = None,
    summary_tokens: int = DEFAULT_SUMMARY_TOKENS,
) -> CompactionPlan:
    """The messages ``compact`` with the same arguments would summarise, without summarising:
    a preview, and the first half of ``compact`` itself.

    Every message before the kept tail that no summary covers yet is summarised, but pins, the
    head and what the window always keeps. The compacted request aims at the Governor's
    low-water mark: it may carry more than the request now when the summary replaces messages
    that request drops or masks (a summary in place of a gap), and less when it replaces
    messages sent in full. Unless ``keep`` is given, fewer recent messages are kept where they
    would leave the summary less than its share of the aim (half of it, or the summary's
    default size when that is less, or an earlier summary's size when that is more); and where
    even then the head leaves no room, the head is cut to the first request, its first run's
    work summarised with the rest.

    ``tool_tokens`` counts the tool definitions every request carries: the budget is what
    they leave, and the plan's figures count them (what a request carries is its messages and
    its tools). ``sent_now`` is what the next request carries now, where the caller's own
    Governor sends something else than a fresh one would (a session governed request after
    request); by default, what a fresh Governor sends. ``summary_tokens`` is the longest draft
    the summariser will be asked for: with the ledger's facts, what the summary can take at
    most, so the plan promises no more than that.
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
    now = govern(messages, policy, model=model, pinned=pinned, tool_tokens=tool_tokens)
    sent_before = now.tokens_after + tool_tokens if sent_now is None else sent_now
    fixed = now.system_tokens + tool_tokens
    low_water = int(now.budget_tokens * policy.hysteresis.low_water) + fixed

    def partition_keeping(keep: Threshold, head: Threshold | None = None) -> tuple[Governed, int]:
        """What the window forced on keeps, and the tokens it would send, the notice
        standing where the summary goes."""
        rules = _partition_policy(
            policy, keep, window_tokens, keep_head=not two and policy.window.keep_head, head=head
        )
        partition = govern(history, rules, model=model, pinned=pins)
        kept = next_request_tokens(partition.messages, messages, policy, model, pinned, tool_tokens)
        return partition, kept

    head_cut = False
    if two:
        partition, kept = partition_keeping(Threshold(kind="tokens", value=1))
    else:
        earlier = sum(tokenizer.count(text) for text in stripped.summaries)
        share = min(max(DEFAULT_SUMMARY_TOKENS, earlier), low_water // 2)
        # What is kept is sized against the low-water mark, not against what the request
        # carries now: the same history plans the same keep, so compacting again right after
        # finds nothing new, however small the last compaction made the request.
        most = low_water - share
        chosen = keep or policy.window.keep or DEFAULT_KEEP

        def partition_within(head: Threshold | None = None) -> tuple[Governed, int]:
            """The partition, with fewer recent messages where they leave the summary less
            than its share (unless the caller said how many)."""
            partition, kept = partition_keeping(chosen, head)
            if keep is None and _drops(partition) and kept > most:
                partition, kept = partition_keeping(_smaller_keep(partition, kept - most), head)
            return partition, kept

        partition, kept = partition_within()
        first = _first_request(history)
        if kept > most and first is not None and _head_size(partition) > first + 1:
            # The head alone leaves the summary no room: its first request stays (the task),
            # the work of its first run is summarised with the middle.
            head_cut = True
            partition, kept = partition_within(Threshold(kind="messages", value=first + 1))
    middle = _middle(partition, stripped)
    hidden = _hidden(now, middle)
    # Growing to the low-water mark (below the budget) is worth it only for a summary in place
    # of what the model does not see now.
    limit = max(low_water, sent_before) if hidden else sent_before
    aim = min(low_water, limit)
    if kept + MIN_SUMMARY_TOKENS > aim:
        aim = limit
    ledger = middle_ledger(stripped, middle)
    plan = CompactionPlan(
        stripped=stripped,
        history=history,
        partition=partition,
        middle=middle,
        users=[],
        aim=aim,
        sent_before=sent_before,
        kept_tokens=kept,
        low_water=low_water,
        limit=limit,
        hidden=hidden,
        ledger=ledger,
        head_cut=head_cut,
    )
    hint = mention(policy.awareness.recall_tool_name) if policy.awareness.recall else None
    need = summary_frame(plan.represented, hint, tokenizer) + summary_tokens
    need += tokenizer.count(facts_section(ledger.items)) if ledger.items else 0
    plan = replace(plan, summary_need=need)
    # The user's own words and the summary (its facts included) share the room, the summary
    # taking no more than it needs: a fact the user stated reads best in their sentence, a
    # bare ledger line says less.
    return plan.with_users_for(min(plan.room // 2, need), user_messages_tokens, tokenizer)


def middle_ledger(stripped: Stripped, middle: list[tuple[int, ModelMessage]]) -> Ledger:
    """The facts of the earlier summaries and of the middle, each with its input index."""
    earlier = [ModelRequest(parts=[UserPromptPart(text)]) for text in stripped.summaries]
    return extract_ledger(
        [*earlier, *(m for _, m in middle)],
        indices=[*stripped.summary_indices[: len(earlier)], *(i for i, _ in middle)],
    )


def summary_frame(represented: int, hint: str | None, tokenizer: Tokenizer) -> int:
    """Tokens of a summary message without its draft and facts: its first line, the hint
    and the message's own."""
    text = SUMMARY_PREFIX.format(count=represented)
    if hint:
        text = f"{text}\n\n{hint}"
    return message_facts(ModelRequest(parts=[UserPromptPart(text)]), tokenizer).tokens


HIDING = frozenset({"masked", "truncated", "evicted"})
"""What a request does to a part that keeps the model from reading it in full (a deduplicated
output is read in full where its newest copy is)."""


def _hides(report: MessageReport) -> bool:
    return not report.kept or any(p.action in HIDING for p in report.parts)


def _hidden(governed: Governed, middle: list[tuple[int, ModelMessage]]) -> frozenset[int]:
    """Input indices of the middle's messages the governed request does not carry in full."""
    hiding = {r.index for r in governed.report.messages if r.index is not None and _hides(r)}
    return frozenset(index for index, _ in middle if index in hiding)


def _middle(partition: Governed, stripped: Stripped) -> list[tuple[int, ModelMessage]]:
    """(input index, message) of each message the window forced on drops, and of the user
    messages earlier summaries kept."""
    dropped = [
        r.index
        for r in partition.report.messages
        if r.index is not None and not r.kept and r.index < len(stripped.index)
    ]
    middle = [(stripped.index[p], stripped.history[p]) for p in dropped]
    return sorted([*middle, *stripped.kept_users], key=lambda item: item[0])


def _drops(partition: Governed) -> bool:
    return any(not m.kept for m in partition.report.messages if m.index is not None)


def _head_size(partition: Governed) -> int:
    """How many leading messages the window forced on kept as the head."""
    return sum(1 for m in partition.report.messages if m.index is not None and m.zone == "head")


def _first_request(history: Sequence[ModelMessage]) -> int | None:
    return next((p for p, m in enumerate(history) if isinstance(m, ModelRequest)), None)


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
    tool_tokens: int = 0,
) -> int:
    """Tokens the next request carries for ``history`` (the original or its compaction, in
    which the messages pinned in ``original`` are the same objects), governed as a fresh
    Governor would: its messages, and ``tool_tokens`` of tool definitions."""
    pinned_ids = {id(original[i]) for i in pinned if 0 <= i < len(original)}
    pins = frozenset(p for p, m in enumerate(history) if id(m) in pinned_ids)
    governed = govern(history, policy, model=model, pinned=pins, tool_tokens=tool_tokens)
    return governed.tokens_after + tool_tokens
