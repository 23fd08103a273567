"""The working state of one ``govern`` call, shared by the steps.

Positions index the normalised history (input messages after pair repair). Per-part changes
(eviction, truncation, masking) are planned cheaply and *materialised* only for positions whose
tokens are needed: a step that walks from the newest message back until the budget is spent
never touches the thousands of old messages the window will drop anyway. This keeps a cold
``govern`` close to the cost of tokenising the history once, and a warm one close to O(new).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain, compress, repeat
from operator import and_, attrgetter, eq, ge, is_
from typing import Any, Protocol, cast

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from .caches import memory
from .counting import MARK as MARK
from .counting import MessageFacts, Part, cached_part_tokens, message_cache, part_cache
from .policy import Policy, Truncation
from .report import Action, StepName
from .steps.evict import eviction_ref, preview
from .steps.truncate import truncate_args, truncate_text
from .tokens import MESSAGE_OVERHEAD, Tokenizer, as_text


class Messages(Protocol):
    """A history read by position: a list, or a caller's sequence that loads a message only
    when it is asked for (governance reads only the messages it sends or changes)."""

    def __len__(self) -> int: ...

    def __getitem__(self, position: int, /) -> ModelMessage: ...


@dataclass(slots=True)
class PartState:
    """The fate of one part of a normalised message."""

    origin: int | None
    """Index of the part in the input message; None when governance added it."""
    action: Action
    tokens_before: int
    tokens_after: int
    step: StepName | None = None
    ref: str | None = None


@dataclass(slots=True)
class Transform:
    """A governed version of one part, cached on the part between calls."""

    part: Part
    tokens: int
    action: Action
    step: StepName
    ref: str | None = None
    evicted: str | None = None


def plain_output(part: Part) -> ToolReturnPart[Any] | None:
    """``part`` if it is an ordinary tool output governance may rewrite, else None.

    Framework returns (tool search, capability loading) are typed subclasses whose content has
    a fixed shape; they are left as they are.
    """
    if type(part) is ToolReturnPart:
        return cast(ToolReturnPart[Any], part)
    return None


def plain_call(part: Part) -> ToolCallPart | None:
    """``part`` if it is an ordinary tool call whose arguments governance may cut, else None.

    Framework calls (tool search, capability loading) are typed subclasses whose arguments have
    a fixed shape, and provider-native calls are another class; they are left as they are.
    """
    if type(part) is ToolCallPart:
        return part
    return None


def with_content(
    part: ToolReturnPart[Any], content: str, note: dict[str, Any] | None = None
) -> ToolReturnPart[Any]:
    """A copy of a tool output with new content (and governance's note in its metadata)."""
    if note is None:
        return replace(part, content=content)
    return replace(part, content=content, metadata=mark_metadata(part, note))


def marked(part: Part) -> bool:
    """Whether governance itself wrote this part (a placeholder, preview or notice)."""
    metadata = getattr(part, "metadata", None)
    return isinstance(metadata, dict) and MARK in metadata


def tool_output_text(part: ToolReturnPart[Any]) -> str | None:
    """The text of a tool output as it would be truncated; None when it carries files."""
    if part.files:
        return None
    return part.content if isinstance(part.content, str) else as_text(part.content)


@dataclass(frozen=True, slots=True)
class Landmarks:
    """Positions of the few messages the window looks for, known without a pass over all."""

    system: list[int]
    """Messages with a system prompt part."""
    aborted: list[int]
    """Turn-aborted markers."""
    notices: list[int]
    """Window notices from earlier governance passes."""
    latest_call: dict[str, int]
    """Tool name → the latest response calling it."""
    first_text: int | None = None
    """The first response with text (where the head ends)."""
    results_between: tuple[int, int] | None = None
    """First and last positions that may hold a tool output (None: no position does)."""


class Drops(Mapping[int, StepName]):
    """The step that left each dropped position out: the window's drops kept as one range.

    The window drops thousands of positions of a long history on every call; recording them
    one by one would be a Python pass over the history. Other drops are few and kept by
    position.
    """

    __slots__ = ("_end", "_mask", "_start", "_step", "_steps")

    def __init__(self) -> None:
        self._steps: dict[int, StepName] = {}
        self._start = self._end = 0
        self._mask = bytearray()
        self._step: StepName = "window"

    def add(self, position: int, step: StepName) -> None:
        """Record one dropped position."""
        self._steps[position] = step

    def add_range(self, start: int, mask: bytearray, step: StepName) -> None:
        """Record the positions from ``start`` on whose ``mask`` entry is true (one range)."""
        assert not self._mask, "one range of drops per call"
        self._start, self._end, self._mask, self._step = start, start + len(mask), mask, step

    def __getitem__(self, position: int) -> StepName:
        step = self._steps.get(position)
        if step is not None:
            return step
        if self._start <= position < self._end and self._mask[position - self._start]:
            return self._step
        raise KeyError(position)

    def __iter__(self) -> Iterator[int]:
        ranged = compress(range(self._start, self._end), self._mask)
        return chain((p for p in ranged if p not in self._steps), self._steps)

    def __len__(self) -> int:
        return sum(1 for _ in self)


@dataclass(frozen=True, slots=True)
class Carry:
    """What one ``govern`` call worked out, for the next call on the same history grown.

    The next call's normalised history begins like this one's (up to where pair repair treats
    the new messages differently, found in a few C-level comparisons), so the counts before
    caps are taken from ``base_tokens``. A position's governed version depends only on its
    message, the part-cap settings, the pinned positions, whether it is before the current
    turn and whether masking replaces its results. Before both calls' current turns, strictly
    inside both masked spans (every output masked, none evicted) and past both spans (no output
    masked; a message with an output evicted is left out, so the evicted texts are recorded as a
    cold call records them), the next call takes the versions this one governed as they are,
    when the facts at the position are the same object (the same message: facts are cached by
    message identity, and a caller passing stored facts keeps one object per message). Only
    positions from ``governed_from`` on are offered: below it the window dropped the history,
    most of it unread, so looking there would be a pass over the history for next to nothing.
    """

    facts: list[MessageFacts]
    base_tokens: array[int]
    """Tokens of each position before caps and masks."""
    base_total: int
    messages: list[ModelMessage | None]
    tokens: array[int]
    """Governed tokens of each position; -1 where the call did not govern it."""
    changes: list[tuple[tuple[int, Transform], ...]]
    span: tuple[int, int, int, int] | None
    turn_start: int
    governed_from: int
    altered: frozenset[int]
    """Positions whose messages a step changed past their governed versions (``set_part``)."""
    settings: tuple[int, frozenset[int]]
    """The part-cap settings key and the pinned positions."""


def common_prefix(old: list[Any], new: list[Any]) -> int:
    """How many leading items two lists share (equal items; the same object is equal).

    A few C-level list comparisons, halving the stretch that differs: on lists that agree
    but for their last few items this costs about two passes, never a Python loop.
    """
    size = min(len(old), len(new))
    if old[:size] == new[:size]:
        return size
    low, high = 0, size  # old[:low] == new[:low]; the first difference is before high
    while high - low > 1:
        middle = (low + high) // 2
        if old[low:middle] == new[low:middle]:
            low = middle
        else:
            high = middle
    return low


@dataclass
class Work:
    """Mutable state of one governance run; the input messages are never touched."""

    policy: Policy
    tokenizer: Tokenizer
    base: Messages
    """The normalised messages; read only at positions governance sends or changes."""
    facts: list[MessageFacts]
    index: Sequence[int | None]
    origins: dict[int, list[int | None]]
    removed: dict[int, list[int]]
    token_ids: dict[int, tuple[str, list[int]]]
    pinned_positions: frozenset[int]
    limit: int
    """Most tokens the messages may take: budget plus system prompt parts (always kept)."""
    turn_start: int
    latest_prompt: int | None
    window_tokens: int
    landmarks: Landmarks
    """Where the window's landmarks are (collected as the history grew)."""
    duplicates: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    """(position, part) of each older copy of a repeated output → (position, part) of the
    newest copy (see ``steps.dedupe``)."""
    carried: Carry | None = None
    """What the previous call on the history this one extends worked out (see ``Carry``)."""
    carried_shared: int | None = None
    """How many leading ``facts`` are known to be the carried ones (None: compare them)."""
    messages: list[ModelMessage | None] = field(init=False)
    """The governed version of each position; None where it is the base message."""
    tokens: array[int] = field(init=False)
    """Tokens of each position: governed where known, else before caps; 0 where dropped."""
    total_tokens: int = field(init=False)
    """``sum(tokens)``, kept up to date by every change to ``tokens``."""
    base_tokens: array[int] = field(init=False)
    """Tokens of each position before caps and masks."""
    base_total: int = field(init=False)
    kept: bytearray = field(init=False)
    """1 where the position is sent, 0 where a step dropped it."""
    states: dict[int, list[PartState]] = field(default_factory=dict)
    materialised: set[int] = field(default_factory=set)
    """Positions whose messages this call read to govern them; positions whose governed
    versions it took from the carried state are not in it (see ``governed_tokens``)."""
    mask_span: tuple[int, int, int, int] | None = None
    """First and last (position, part number) of the masked middle of tool results, inclusive:
    masking is a rule over that span (see ``masked_at``), so planning it costs nothing per
    message."""
    evicted: dict[str, str] = field(default_factory=dict)
    steps: list[StepName] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    head_end: int = -1
    tail_start: int = 0
    notice: ModelRequest | None = None
    notice_omitted: int = 0
    notice_before: int | None = None
    """Position the notice goes in front of (None: after the last message)."""
    dropped_by: Drops = field(default_factory=Drops)
    changes: list[tuple[tuple[int, Transform], ...]] = field(init=False)
    """The part changes of each governed position; () where none."""
    governed_from: int = 0
    """Below this position (past the head) the next call is not offered this call's governed
    versions: the window dropped those positions, most of them unread."""
    seeded: tuple[int, int] | None = None
    """The run of positions (first, last + 1) whose governed versions were carried over."""
    min_cap: float = field(init=False)
    """No part at or below this many tokens can be evicted or truncated."""
    cap_key: int = field(init=False)
    protected: frozenset[str] = field(init=False)
    governed_tokens: array[int] = field(init=False)
    """Tokens of each position as governed (before any drop); -1 where not yet governed."""

    def __post_init__(self) -> None:
        size = len(self.facts)
        carried = self.carried
        # Machine-integer arrays and a bytearray rather than lists: copying, slicing and
        # filling them is a memory copy, with no reference counts to touch on every item.
        if carried is None:
            base = array("q", map(_TOKENS, self.facts))
            self.base_total = sum(base)
        else:
            # Counts before caps are the facts'; the shared beginning is carried whole.
            same = self.carried_shared
            if same is None:
                same = common_prefix(carried.facts, self.facts)
            base = carried.base_tokens[:same]
            base.extend(map(_TOKENS, self.facts[same:]))
            self.base_total = (
                carried.base_total - sum(carried.base_tokens[same:]) + sum(base[same:])
            )
        self.base_tokens = base
        self.tokens = array("q", base)
        self.total_tokens = self.base_total
        self.messages = [None] * size
        self.changes = [()] * size
        self.kept = bytearray(b"\x01") * size
        self.governed_tokens = array("q", _UNKNOWN) * size
        policy = self.policy
        self.protected = frozenset(policy.window.protected_tools)
        limits: list[float] = []
        for truncation in (policy.tool_output, policy.text):
            if truncation.limit:
                limits.append(truncation.limit if truncation.unit == "tokens" else 0)
        if policy.eviction.threshold_tokens:
            limits.append(policy.eviction.threshold_tokens)
        self.min_cap = min(limits, default=float("inf"))
        self.cap_key = _cap_key(policy, self.tokenizer.encoding_name)

    # --- accounting -------------------------------------------------------------------------

    def total(self) -> int:
        """Tokens of all kept messages as currently known (unmaterialised ones: before caps)."""
        return self.total_tokens + self.notice_tokens()

    def notice_tokens(self) -> int:
        """Tokens of the window notice, if there is one."""
        if self.notice is None:
            return 0
        return MESSAGE_OVERHEAD + sum(
            cached_part_tokens(p, self.tokenizer) for p in self.notice.parts
        )

    def exact_over(self, limit: int | None = None, *, eager: bool = False) -> bool:
        """Whether the kept messages exceed ``limit`` once governed, materialising newest first.

        Stops at the first proof of excess, so a history far over budget costs only the
        messages that fit. Caps and masks only ever shrink a message, so when the known counts
        already fit, that proves it without materialising anything — unless ``eager`` asks for
        every kept message to be materialised on the way (a later drop must find them so).
        """
        limit = self.limit if limit is None else limit
        total = self.notice_tokens()
        tokens = self.tokens
        # Dropped positions count 0, so this is the kept messages' tokens, an upper bound.
        if not eager and self.total_tokens + total <= limit:
            return False
        # Walk newest first; between the kept positions not yet governed the counts are exact,
        # so each such run is added at once (C-level) and only the others are materialised.
        # The run carried from the previous call is governed throughout: skipped unlooked at.
        size = len(tokens)
        low, high = self.seeded or (size, size)
        pending = chain(self._pending(high, size), self._pending(0, low))
        upper = size
        for position in chain(pending, (-1,)):
            total += sum(tokens[position + 1 : upper])
            if total > limit:
                return True
            if position < 0:
                break
            total += self.materialise(position)
            if total > limit:
                return True
            upper = position
        return False

    def _pending(self, start: int, end: int) -> Iterator[int]:
        """Kept positions in ``[start, end)`` not governed yet, newest first (C-level)."""
        # Slices of a bytearray and an array are memory copies; the walk over them is lazy.
        unknown = map(eq, reversed(self.governed_tokens[start:end]), repeat(-1))
        waiting = map(and_, reversed(self.kept[start:end]), unknown)
        return compress(range(end - 1, start - 1, -1), waiting)

    def fits(self) -> bool:
        """Whether everything kept fits the budget (materialising what it must)."""
        return not self.exact_over()

    # --- materialising planned part changes ---------------------------------------------------

    def invalidate(self, position: int) -> None:
        """Forget the governed version of a position so it is rebuilt with a new plan."""
        if self.governed_tokens[position] >= 0 and self.kept[position]:
            self.messages[position] = None
            self._set_tokens(position, self.base_tokens[position])
            self.states.pop(position, None)
            self.changes[position] = ()
            self.governed_tokens[position] = -1

    def _set_tokens(self, position: int, tokens: int) -> None:
        self.total_tokens += tokens - self.tokens[position]
        self.tokens[position] = tokens

    def materialise(self, position: int) -> int:
        """Apply planned caps and masks to one position; its governed tokens.

        The result is cached on the message for the same plan, so a history governed again
        with one more message pays only for the new one.
        """
        if self.governed_tokens[position] >= 0:
            return self.tokens[position]
        self.materialised.add(position)
        facts = self.facts[position]
        masked = self.masked_at(position)
        if not masked and facts.largest <= self.min_cap:
            self.governed_tokens[position] = self.tokens[position]
            return self.tokens[position]
        message = self.base[position]
        key = (
            "governed",
            self.cap_key,
            position < self.turn_start,
            position == self.latest_prompt,
            self.exempt(position),
            masked,
        )
        values = message_cache(message)
        found: tuple[ModelMessage, int, tuple[tuple[int, Transform], ...]] | None = values.get(key)
        if found is None:
            found = self._governed(position, message, facts, masked or frozenset())
            values[key] = found
        governed, tokens, changes = found
        if changes:
            self.messages[position] = governed
            self._set_tokens(position, tokens)
            self.changes[position] = changes
            for _, transform in changes:
                if transform.evicted is not None and transform.ref is not None:
                    self.evicted[transform.ref] = transform.evicted
        self.governed_tokens[position] = self.tokens[position]
        return self.tokens[position]

    def carry(self) -> Carry:
        """What this call worked out, for the next call on the history grown."""
        return Carry(
            self.facts,
            self.base_tokens,
            self.base_total,
            self.messages,
            self.governed_tokens,
            self.changes,
            self.mask_span,
            self.turn_start,
            self.governed_from,
            frozenset(self.states),
            (self.cap_key, self.pinned_positions),
        )

    def seed(self) -> None:
        """Take the governed versions the previous call made that are still valid (see
        ``Carry``); called once masking has planned its span, before anything is dropped."""
        carried = self.carried
        if carried is None or carried.settings != (self.cap_key, self.pinned_positions):
            return
        span, old = self.mask_span, carried.span
        if span is None or old is None:
            return
        limit = min(self.turn_start, carried.turn_start, len(self.facts), len(carried.facts))
        # Strictly inside both masked spans every output is masked (none is evicted).
        positions = self._carried(max(span[0], old[0]) + 1, min(span[2], old[2], limit))
        if positions:
            first, last = positions[0], positions[-1] + 1
            if last - first == len(positions):
                # The usual case: one run (the previous call governed its newest positions).
                self.total_tokens += sum(carried.tokens[first:last]) - sum(self.tokens[first:last])
                self.messages[first:last] = carried.messages[first:last]
                self.tokens[first:last] = carried.tokens[first:last]
                self.governed_tokens[first:last] = carried.tokens[first:last]
                self.changes[first:last] = carried.changes[first:last]
                self.seeded = (first, last)
            else:
                self._take(positions)
                # The newest run, for the walks that skip it (see ``seeded``).
                at = len(positions) - 1
                while at and positions[at - 1] == positions[at] - 1:
                    at -= 1
                self.seeded = (positions[at], last)
        # After both spans no output is masked; a message with an output evicted is governed
        # again, so the evicted texts are recorded in the order a cold call records them.
        changes = carried.changes
        self._take(
            [
                p
                for p in self._carried(max(span[2], old[2]) + 1, limit)
                if not any(t.evicted is not None for _, t in changes[p])
            ]
        )

    def _carried(self, start: int, end: int) -> list[int]:
        """Positions in ``[start, end)`` whose carried governed versions hold (C-level)."""
        carried = self.carried
        assert carried is not None
        start = max(start, carried.governed_from)
        if end <= start:
            return []
        same = map(is_, self.facts[start:end], carried.facts[start:end])
        known = map(ge, carried.tokens[start:end], repeat(0))
        # A position this call already governed (the budget check) and whose result masking
        # now replaces was invalidated, so its carried version is its version too.
        positions = list(compress(range(start, end), map(and_, same, known)))
        if carried.altered:
            positions = [p for p in positions if p not in carried.altered]
        return positions

    def _take(self, positions: Iterable[int]) -> None:
        """Take the carried governed versions of ``positions``."""
        carried = self.carried
        assert carried is not None
        for position in positions:
            self.messages[position] = carried.messages[position]
            self._set_tokens(position, carried.tokens[position])
            self.governed_tokens[position] = carried.tokens[position]
            self.changes[position] = carried.changes[position]

    def _governed(
        self, position: int, message: ModelMessage, facts: MessageFacts, masked: frozenset[int]
    ) -> tuple[ModelMessage, int, tuple[tuple[int, Transform], ...]]:
        changes: list[tuple[int, Transform]] = []
        for number, part in enumerate(message.parts):
            transform: Transform | None
            if number in masked:
                from .steps.mask import placeholder

                transform = placeholder(part, facts.part_tokens[number], self.tokenizer)
            else:
                transform = self._cap(position, number, part, facts.part_tokens[number])
            if transform is not None:
                changes.append((number, transform))
        if not changes:
            return message, facts.tokens, ()
        parts = list(message.parts)
        counts = list(facts.part_tokens)
        for number, transform in changes:
            parts[number] = transform.part
            counts[number] = transform.tokens
        return rebuilt(message, parts), MESSAGE_OVERHEAD + sum(counts), tuple(changes)

    def masked_at(self, position: int) -> frozenset[int] | None:
        """Part numbers of a position's tool results masking replaces; None for none.

        Every ordinary output inside ``mask_span`` is masked, except in pinned or protected
        messages and where governance already wrote the part (a placeholder, a preview).
        """
        span = self.mask_span
        if span is None or not span[0] <= position <= span[2]:
            return None
        maskable = self.facts[position].maskable
        if not maskable or self.exempt(position):
            return None
        if span[0] < position < span[2]:
            return maskable
        low = span[1] if position == span[0] else -1
        high = span[3] if position == span[2] else len(self.facts[position].part_tokens)
        chosen = frozenset(n for n in maskable if low <= n <= high)
        return chosen or None

    def part_states(self, position: int) -> list[PartState]:
        """Fresh part states of a position as normalised (before caps and masks)."""
        origins = self.origins.get(position)
        counts = self.facts[position].part_tokens
        states = []
        for number, count in enumerate(counts):
            origin = number if origins is None else origins[number]
            if origin is None:
                states.append(PartState(None, "synthesized", 0, count, "normalize"))
            else:
                states.append(PartState(origin, "kept", count, count))
        return states

    def states_of(self, position: int) -> list[PartState]:
        """The part states of a position: normalised, then planned changes applied."""
        if position in self.states:
            return self.states[position]
        states = self.part_states(position)
        for number, transform in self.changes[position]:
            state = states[number]
            state.action = transform.action
            state.tokens_after = transform.tokens
            state.step = transform.step
            state.ref = transform.ref
        return states

    def message_at(self, position: int) -> ModelMessage:
        """The governed message at a position (the base message where nothing changed it)."""
        message = self.messages[position]
        return self.base[position] if message is None else message

    def set_part(self, position: int, number: int, transform: Transform) -> None:
        """Replace one part of a materialised position (used by the last-resort shrink)."""
        self.materialise(position)
        states = self.states_of(position)
        parts = list(self.message_at(position).parts)
        parts[number] = transform.part
        state = states[number]
        state.action = transform.action
        state.tokens_after = transform.tokens
        state.step = transform.step
        self.messages[position] = rebuilt(self.base[position], parts)
        self.states[position] = states
        self._set_tokens(position, MESSAGE_OVERHEAD + sum(s.tokens_after for s in states))

    # --- caps: eviction and truncation --------------------------------------------------------

    def exempt(self, position: int) -> bool:
        """Pinned messages and protected tools' messages are never altered."""
        if position in self.pinned_positions:
            return True
        protected = self.protected
        return bool(protected) and not self.facts[position].tool_names.isdisjoint(protected)

    def _in_scope(self, position: int, scope: str) -> bool:
        return scope == "all" or position < self.turn_start

    def _cap(self, position: int, number: int, part: Part, tokens: int) -> Transform | None:
        policy = self.policy
        output = plain_output(part)
        if output is not None:
            eviction = policy.eviction
            truncation = policy.tool_output
            evict = (
                eviction.threshold_tokens is not None
                and 0 < eviction.threshold_tokens < tokens
                and self._in_scope(position, eviction.scope)
            )
            truncate = (
                truncation.limit is not None
                and 0 < truncation.limit < _measure(tokens, truncation, output)
                and self._in_scope(position, truncation.scope)
            )
            if not (evict or truncate) or marked(output) or self.exempt(position):
                return None
            return self._cached(output, tokens, evict, truncation if truncate else None)
        call = plain_call(part)
        if call is not None:
            # Large arguments (a file written in full) are cut like outputs, by the same limit.
            truncation = policy.tool_output
            if (
                not truncation.limit
                or not self._in_scope(position, truncation.scope)
                or truncation.limit >= _measure(tokens, truncation, call)
                or self.exempt(position)
            ):
                return None
            return self._cached(call, tokens, False, truncation)
        if isinstance(part, UserPromptPart | TextPart) and isinstance(part.content, str):
            truncation = policy.text
            if (
                truncation.limit is None
                or truncation.limit >= _measure(tokens, truncation, part)
                or not self._in_scope(position, truncation.scope)
                or (position == self.latest_prompt and isinstance(part, UserPromptPart))
                or self.exempt(position)
            ):
                return None
            return self._cached(part, tokens, False, truncation)
        return None

    def _cached(
        self, part: Part, tokens: int, evict: bool, truncation: Truncation | None
    ) -> Transform | None:
        eviction = self.policy.eviction
        key = (
            "cap",
            self.tokenizer.encoding_name,
            eviction if evict else None,
            truncation,
        )
        values = part_cache(part)
        if key in values:
            cached: Transform | None = values[key]
            return cached
        result = self._compute_cap(part, tokens, eviction if evict else None, truncation)
        values[key] = result
        return result

    def _compute_cap(
        self, part: Part, tokens: int, eviction: Any, truncation: Truncation | None
    ) -> Transform | None:
        output = plain_output(part)
        call = plain_call(part)
        new: Part
        if call is not None:
            assert truncation is not None
            assert truncation.limit is not None
            # The arguments' token ids (if kept) are of their whole JSON: of no use to cut it.
            self.token_ids.pop(id(part), None)
            args = truncate_args(
                call.args,
                truncation.limit,
                unit=truncation.unit,
                strategy=truncation.strategy,
                tokenizer=self.tokenizer,
                line_count=truncation.line_count,
            )
            if args is None:
                return None
            new = replace(call, args=args)
        elif output is not None:
            text = tool_output_text(output)
            if text is None:
                return None
            if eviction is not None:
                ref = eviction_ref(text)
                shown = preview(text, ref, tokens, eviction)
                new = with_content(output, shown, {"evicted": ref})
                count = cached_part_tokens(new, self.tokenizer)
                if count < tokens:
                    return Transform(new, count, "evicted", "evict", ref, text)
            if truncation is None:
                return None
            cut = self._truncate(output, text, truncation)
            if cut is None:
                return None
            new = with_content(output, cut)
        else:
            assert isinstance(part, UserPromptPart | TextPart)
            assert truncation is not None
            assert isinstance(part.content, str)
            cut = self._truncate(part, part.content, truncation)
            if cut is None:
                return None
            new = replace(part, content=cut)
        count = cached_part_tokens(new, self.tokenizer)
        if count >= tokens:
            return None
        return Transform(new, count, "truncated", "truncate")

    def _truncate(self, part: Part, text: str, truncation: Truncation) -> str | None:
        assert truncation.limit is not None
        # Taken out: the truncated version is cached on the part, so its ids are not needed again.
        known = self.token_ids.pop(id(part), None)
        ids = known[1] if known is not None and known[0] is text else None
        return truncate_text(
            text,
            truncation.limit,
            unit=truncation.unit,
            strategy=truncation.strategy,
            tokenizer=self.tokenizer,
            line_count=truncation.line_count,
            token_ids=ids,
        )

    # --- dropping -----------------------------------------------------------------------------

    def drop(self, position: int, step: StepName) -> None:
        """Leave a position out of the governed history (its report is derived when read)."""
        self.kept[position] = 0
        self.dropped_by.add(position, step)
        self._set_tokens(position, 0)

    def drop_range(
        self, start: int, end: int, spared: Iterable[int], step: StepName
    ) -> tuple[int, int | None]:
        """Drop every kept position in ``[start, end)`` but ``spared``: how many were dropped
        and the first of them (None for none).

        The same as ``drop`` on each, with list slices and C-level counts instead of a Python
        loop: the window drops thousands of messages from a long history on every call. One
        range per call (the window's).
        """
        if end <= start:
            return 0, None
        kept, tokens = self.kept, self.tokens
        dropping = kept[start:end]  # 1 where kept until now
        held = [p for p in spared if start <= p < end]
        for position in held:
            dropping[position - start] = 0
        count = dropping.count(1)
        if not count:
            return 0, None
        # The tokens left out: the range's, from what lies outside it (the head and the tail,
        # both short), less the spared positions'.
        inside = self.total_tokens - sum(tokens[:start]) - sum(tokens[end:])
        self.total_tokens -= inside - sum(tokens[p] for p in held)
        saved = [(p, kept[p], tokens[p]) for p in held]
        kept[start:end] = bytes(end - start)
        tokens[start:end] = array("q", _NONE) * (end - start)
        for position, was_kept, held_tokens in saved:
            kept[position] = was_kept
            tokens[position] = held_tokens
        self.dropped_by.add_range(start, dropping, step)
        return count, start + dropping.index(1)


_TOKENS = attrgetter("tokens")
_UNKNOWN = (-1,)
_NONE = (0,)


def _cap_key(policy: Policy, encoding: str) -> int:
    """A small int standing for the settings that decide a message's governed version."""
    # Hashing the settings (pydantic models) costs more than the rest of a warm call's set-up,
    # so the key is remembered per policy object (kept alive with it; policies are few).
    by_policy = memory.cap_keys_by_policy
    known = by_policy.get((id(policy), encoding))
    if known is not None and known[0] is policy:
        return known[1]
    settings = (
        encoding,
        policy.tool_output,
        policy.text,
        policy.eviction,
        policy.window.protected_tools,
    )
    key = memory.cap_keys.setdefault(settings, len(memory.cap_keys))
    if len(by_policy) >= 64:
        by_policy.clear()
    by_policy[(id(policy), encoding)] = (policy, key)
    return key


def rebuilt(message: ModelMessage, parts: list[Part]) -> ModelMessage:
    """``message`` with ``parts``; the same object for the same parts on every call.

    Governed parts are cached on the originals, so reusing the rebuilt message too lets its
    counts (cached by identity) survive from one request to the next.
    """
    values = message_cache(message)
    key = ("rebuilt", tuple(map(id, parts)))
    found = values.get(key)
    if found is not None and len(found.parts) == len(parts) and all(map(is_, found.parts, parts)):
        result: ModelMessage = found
        return result
    result = replace(message, parts=parts)  # type: ignore[arg-type]
    values[key] = result
    return result


def _measure(tokens: int, truncation: Truncation, part: Part) -> int:
    """The size of a part in the truncation's unit (characters measured on the text, on a
    call's arguments as JSON)."""
    if truncation.unit == "tokens":
        return tokens
    call = plain_call(part)
    if call is not None:
        return len(call.args_as_json_str())
    output = plain_output(part)
    if output is not None:
        text = tool_output_text(output)
        return len(text) if text is not None else 0
    content = getattr(part, "content", "")
    return len(content) if isinstance(content, str) else 0


def _mark(part: Part, note: dict[str, Any]) -> dict[str, Any]:
    metadata = getattr(part, "metadata", None)
    base = dict(metadata) if isinstance(metadata, dict) else {}
    base[MARK] = note
    return base


def mark_metadata(part: Part, note: dict[str, Any]) -> dict[str, Any]:
    """Part metadata carrying governance's note, keeping any metadata already there."""
    return _mark(part, note)
