"""The working state of one ``govern`` call, shared by the steps.

Positions index the normalised history (input messages after pair repair). Per-part changes
(eviction, truncation, masking) are planned cheaply and *materialised* only for positions whose
tokens are needed: a step that walks from the newest message back until the budget is spent
never touches the thousands of old messages the window will drop anyway. This keeps a cold
``govern`` close to the cost of tokenising the history once, and a warm one close to O(new).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain, compress
from operator import and_, not_

from pydantic_ai.messages import ModelMessage, ModelRequest

from .budget_note import BudgetNote
from .carried import Carry, base_counts
from .counting import message_cache, message_tokens
from .facts import MessageFacts
from .names import StepName
from .parts import PartState, Transform, plain_call, rebuilt
from .policy import Policy
from .positions import Drops, Landmarks, Messages
from .steps.cap import cap_key, governed_version, smallest_cap
from .tokens import MESSAGE_OVERHEAD, Tokenizer


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
    """Most tokens the messages may take in this plan: what it aims at (the budget, or an
    action's lower mark), plus system prompt parts (always kept)."""
    turn_start: int
    latest_prompt: int | None
    window_tokens: int
    landmarks: Landmarks
    """Where the window's landmarks are (collected as the history grew)."""
    outside_tokens: int = 0
    """Tokens the request sends outside its messages: instructions and tool definitions."""
    budget_limit: int = 0
    """``limit`` at the full budget (0: ``limit`` is): decisions that must not depend on the
    mark an action aims at, such as the head's size, use it."""
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
    evicting: set[int] = field(default_factory=set)
    """Positions whose governed versions evict an output (see ``evicted``)."""
    steps: list[StepName] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    head_end: int = -1
    tail_start: int = 0
    windowed: bool = False
    """Whether the window dropped messages (said by ``notice``, unless the policy cuts
    silently)."""
    notice: ModelRequest | None = None
    notice_omitted: int = 0
    notice_before: int | None = None
    """Position the notice goes in front of (None: after the last message)."""
    note: BudgetNote | None = None
    """The budget note the request carries, if the policy asks for one (see ``budget_note``):
    not among the positions, and not in ``total()``: its room is held back from ``limit``."""
    note_message: ModelRequest | None = None
    note_before: int | None = None
    """Position the note goes in front of (None: after the last message)."""
    note_written: bool = False
    """Whether this request wrote the note (an action, a new start), rather than replaying it."""
    note_room: int = 0
    """The room held back for the budget note (0: the request carries none)."""
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
    known: bytearray = field(init=False)
    """1 where the position is governed: ``governed_tokens`` as flags, searched C-level."""
    shared: int = field(init=False)
    """How many leading ``facts`` are the carried call's."""
    capped: array[int] = field(init=False)
    """Tokens of each position with caps alone (no mask); -1 where not counted."""

    def __post_init__(self) -> None:
        self.budget_limit = self.budget_limit or self.limit
        size = len(self.facts)
        self.base_tokens, self.base_total, self.shared = base_counts(
            self.carried, self.facts, self.carried_shared
        )
        # Machine-integer arrays and a bytearray rather than lists: copying, slicing and
        # filling them is a memory copy, with no reference counts to touch on every item.
        self.tokens = array("q", self.base_tokens)
        self.total_tokens = self.base_total
        self.messages = [None] * size
        self.changes = [()] * size
        self.kept = bytearray(b"\x01") * size
        self.governed_tokens = array("q", _UNKNOWN) * size
        self.known = bytearray(size)
        self.capped = array("q", _UNKNOWN) * size
        self.protected = frozenset(self.policy.window.protected_tools)
        self.min_cap = smallest_cap(self.policy)
        self.cap_key = cap_key(self.policy, self.tokenizer.encoding_name)

    # --- accounting -------------------------------------------------------------------------

    def total(self) -> int:
        """Tokens of all kept messages as currently known (unmaterialised ones: before caps)."""
        return self.total_tokens + self.notice_tokens()

    def evicted(self) -> dict[str, str]:
        """The full texts of the evicted outputs the governed history sends, by reference."""
        texts = {}
        for position in sorted(self.evicting):
            if self.kept[position]:
                for _, transform in self.changes[position]:
                    if transform.evicted is not None and transform.ref is not None:
                        texts[transform.ref] = transform.evicted
        return texts

    def notice_tokens(self) -> int:
        """Tokens of the window notice, if there is one."""
        return 0 if self.notice is None else message_tokens(self.notice, self.tokenizer)

    def added_messages(self) -> int:
        """Messages the request sends besides its positions: the window's notice and the
        budget note (counted from the start of planning: it is written once the plan is)."""
        return (self.notice is not None) + (self.note_room > 0 or self.note_message is not None)

    def note_tokens(self) -> int:
        """Tokens of the budget note, if the request carries one."""
        message = self.note_message
        return 0 if message is None else message_tokens(message, self.tokenizer)

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
        unknown = map(not_, reversed(self.known[start:end]))
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
            self.set_tokens(position, self.base_tokens[position])
            self.states.pop(position, None)
            self.changes[position] = ()
            self.governed_tokens[position] = -1
            self.known[position] = 0
            self.evicting.discard(position)

    def set_tokens(self, position: int, tokens: int) -> None:
        """Set a position's tokens, keeping ``total_tokens`` their sum."""
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
            count = self.base_tokens[position]
        else:
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
            found: tuple[ModelMessage, int, tuple[tuple[int, Transform], ...]] | None
            found = values.get(key)
            if found is None:
                found = governed_version(self, position, message, facts, masked or frozenset())
                values[key] = found
            governed, count, changes = found
            if changes:
                self.messages[position] = governed
                self.set_tokens(position, count)
                self.changes[position] = changes
                if any(transform.evicted is not None for _, transform in changes):
                    self.evicting.add(position)
        if not masked:
            self.capped[position] = count
        self.governed_tokens[position] = count
        self.known[position] = 1
        return self.tokens[position]

    def masked_at(self, position: int) -> frozenset[int] | None:
        """Part numbers of a position's tool results masking replaces, or with
        ``Masking.inputs`` of a response's calls whose results it replaces; None for none.

        Every ordinary output inside ``mask_span`` is masked, except in pinned or protected
        messages and where governance already wrote the part (a placeholder, a preview).
        """
        span = self.mask_span
        if span is not None and not self.facts[position].request:
            return self._masked_calls(position) if self.policy.masking.inputs else None
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

    def _masked_calls(self, position: int) -> frozenset[int] | None:
        """Part numbers of a response's calls whose results masking replaces (pair repair put
        every result in the request right after its call)."""
        if not self.facts[position].call_ids or position + 1 >= len(self.facts):
            return None
        results = self.masked_at(position + 1)
        if not results or self.exempt(position):
            return None
        answered = self.base[position + 1].parts
        ids = {getattr(answered[number], "tool_call_id", None) for number in results}
        calls = self.base[position].parts
        chosen = frozenset(
            number
            for number, part in enumerate(calls)
            if (call := plain_call(part)) is not None and call.tool_call_id in ids
        )
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
        self.set_tokens(position, MESSAGE_OVERHEAD + sum(s.tokens_after for s in states))

    # --- what governance may change -----------------------------------------------------------

    def exempt(self, position: int) -> bool:
        """Pinned messages and protected tools' messages are never altered."""
        if position in self.pinned_positions:
            return True
        protected = self.protected
        return bool(protected) and not self.facts[position].tool_names.isdisjoint(protected)

    # --- dropping -----------------------------------------------------------------------------

    def drop(self, position: int, step: StepName) -> None:
        """Leave a position out of the governed history (its report is derived when read)."""
        self.kept[position] = 0
        self.dropped_by.add(position, step)
        self.set_tokens(position, 0)

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
        # Counting the zeros is the faster search: few positions in the range are dropped yet.
        count = len(dropping) - dropping.count(0)
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


_UNKNOWN = (-1,)
_NONE = (0,)
