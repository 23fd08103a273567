"""The working state of one ``govern`` call, shared by the steps.

Positions index the normalised history (input messages after pair repair). Per-part changes
(eviction, truncation, masking) are planned cheaply and *materialised* only for positions whose
tokens are needed: a step that walks from the newest message back until the budget is spent
never touches the thousands of old messages the window will drop anyway. This keeps a cold
``govern`` close to the cost of tokenising the history once, and a warm one close to O(new).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain, compress, repeat
from operator import and_, attrgetter, eq, ge, is_
from typing import Any, Protocol, cast

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

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


@dataclass(frozen=True, slots=True)
class Carry:
    """What one ``govern`` call governed, for the next call on the same history grown.

    Positions strictly inside the masked span and before the current turn are governed the same
    way on every call (every output masked, nothing else depending on where the history ends),
    so the next call can take their governed versions as they are when the facts at the
    position are the same object (the same message: facts are cached by message identity, and
    a caller passing stored facts keeps one object per message) and the settings that decide a
    governed version are equal.
    """

    facts: list[MessageFacts]
    messages: list[ModelMessage | None]
    tokens: list[int]
    """Governed tokens of each position; -1 where the call did not govern it."""
    changes: dict[int, tuple[tuple[int, Transform], ...]]
    span: tuple[int, int, int, int]
    turn_start: int
    settings: tuple[int, frozenset[int]]
    """The part-cap settings key and the pinned positions."""


@dataclass
class Work:
    """Mutable state of one governance run; the input messages are never touched."""

    policy: Policy
    tokenizer: Tokenizer
    base: Messages
    """The normalised messages; read only at positions governance sends or changes."""
    facts: list[MessageFacts]
    index: list[int | None]
    origins: dict[int, list[int | None]]
    removed: dict[int, list[int]]
    token_ids: dict[int, tuple[str, list[int]]]
    pinned_positions: frozenset[int]
    limit: int
    """Most tokens the messages may take: budget plus system prompt parts (always kept)."""
    turn_start: int
    latest_prompt: int | None
    window_tokens: int
    messages: list[ModelMessage | None] = field(init=False)
    """The governed version of each position; None where it is the base message."""
    tokens: list[int] = field(init=False)
    kept: list[bool] = field(init=False)
    states: dict[int, list[PartState]] = field(default_factory=dict)
    materialised: set[int] = field(default_factory=set)
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
    dropped_by: dict[int, StepName] = field(default_factory=dict)
    changes: dict[int, tuple[tuple[int, Transform], ...]] = field(default_factory=dict)
    min_cap: float = field(init=False)
    """No part at or below this many tokens can be evicted or truncated."""
    cap_key: int = field(init=False)
    protected: frozenset[str] = field(init=False)
    carried: Carry | None = None
    """The previous call's governed versions, offered for reuse (see ``Carry``)."""
    landmarks: Landmarks | None = None
    """Where the window's landmarks are, when the caller knows; else the window finds them."""
    governed_tokens: list[int] = field(init=False)
    """Tokens of each position as materialised (before any drop); -1 where not yet."""

    def __post_init__(self) -> None:
        size = len(self.facts)
        self.messages = [None] * size
        self.tokens = list(map(_TOKENS, self.facts))
        self.kept = [True] * size
        self.governed_tokens = [-1] * size
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
        total = sum(t for t, k in zip(self.tokens, self.kept, strict=True) if k)
        if self.notice is not None:
            total += self.notice_tokens()
        return total

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
        if not eager and sum(tokens) + total <= limit:
            return False
        # Walk newest first; between the kept positions not yet governed the counts are exact,
        # so each such run is added at once (C-level) and only the others are materialised.
        size = len(tokens)
        pending = compress(
            range(size - 1, -1, -1),
            map(and_, reversed(self.kept), map(eq, reversed(self.governed_tokens), repeat(-1))),
        )
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

    def fits(self) -> bool:
        """Whether everything kept fits the budget (materialising what it must)."""
        return not self.exact_over()

    # --- materialising planned part changes ---------------------------------------------------

    def invalidate(self, position: int) -> None:
        """Forget the governed version of a position so it is rebuilt with a new plan."""
        if position in self.materialised and self.kept[position]:
            self.materialised.discard(position)
            self.messages[position] = None
            self.tokens[position] = self.facts[position].tokens
            self.states.pop(position, None)
            self.changes.pop(position, None)
            self.governed_tokens[position] = -1

    def materialise(self, position: int) -> int:
        """Apply planned caps and masks to one position; its governed tokens.

        The result is cached on the message for the same plan, so a history governed again
        with one more message pays only for the new one.
        """
        if position in self.materialised:
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
            self.tokens[position] = tokens
            self.changes[position] = changes
            for _, transform in changes:
                if transform.evicted is not None and transform.ref is not None:
                    self.evicted[transform.ref] = transform.evicted
        self.governed_tokens[position] = self.tokens[position]
        return self.tokens[position]

    def carry(self) -> Carry | None:
        """This call's governed versions for the next call, when masking planned a span."""
        if self.mask_span is None:
            return None
        return Carry(
            self.facts,
            self.messages,
            self.governed_tokens,
            self.changes,
            self.mask_span,
            self.turn_start,
            (self.cap_key, self.pinned_positions),
        )

    def seed(self) -> None:
        """Take the governed versions the previous call made that are still valid (see
        ``Carry``); called once masking has planned its span, before anything is dropped."""
        carried, span = self.carried, self.mask_span
        if carried is None or span is None:
            return
        if carried.settings != (self.cap_key, self.pinned_positions):
            return
        start = max(span[0], carried.span[0]) + 1
        end = min(
            span[2],
            carried.span[2],
            self.turn_start,
            carried.turn_start,
            len(self.facts),
            len(carried.facts),
        )
        if end <= start:
            return
        same = map(is_, self.facts[start:end], carried.facts[start:end])
        known = map(ge, carried.tokens[start:end], repeat(0))
        # A position this call already governed (the budget check) has no masked result
        # (masking would have invalidated it), so its carried version is its version too.
        positions: Sequence[int] = list(compress(range(start, end), map(and_, same, known)))
        if not positions:
            return
        first, last = positions[0], positions[-1] + 1
        if last - first == len(positions):
            # The usual case: one run (the previous call governed its newest positions).
            positions = range(first, last)
            self.messages[first:last] = carried.messages[first:last]
            self.tokens[first:last] = carried.tokens[first:last]
            self.governed_tokens[first:last] = carried.tokens[first:last]
        else:
            for position in positions:
                self.messages[position] = carried.messages[position]
                self.tokens[position] = carried.tokens[position]
                self.governed_tokens[position] = carried.tokens[position]
        self.changes.update(
            zip(positions, map(carried.changes.get, positions, repeat(())), strict=True)
        )
        self.materialised.update(positions)

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
        for number, transform in self.changes.get(position, ()):
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
        self.tokens[position] = MESSAGE_OVERHEAD + sum(s.tokens_after for s in states)

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
        self.kept[position] = False
        self.dropped_by[position] = step
        self.tokens[position] = 0

    def drop_range(self, start: int, end: int, spared: Iterable[int], step: StepName) -> list[int]:
        """Drop every kept position in ``[start, end)`` but ``spared``; the positions dropped.

        The same as ``drop`` on each, with list slices instead of a Python loop: the window
        drops thousands of messages from a long history on every call.
        """
        if end <= start:
            return []
        kept = self.kept[start:end]
        held = [(p, kept[p - start]) for p in spared if start <= p < end]
        for position, _ in held:
            kept[position - start] = False
        dropped = list(compress(range(start, end), kept))
        # Spared positions keep their state; everything else in the range is now left out.
        new_kept = [False] * (end - start)
        new_tokens = [0] * (end - start)
        for position, was_kept in held:
            new_kept[position - start] = was_kept
            new_tokens[position - start] = self.tokens[position]
        self.kept[start:end] = new_kept
        self.tokens[start:end] = new_tokens
        self.dropped_by.update(dict.fromkeys(dropped, step))
        return dropped


_TOKENS = attrgetter("tokens")

_CAP_KEYS: dict[tuple[Any, ...], int] = {}


def _cap_key(policy: Policy, encoding: str) -> int:
    """A small int standing for the settings that decide a message's governed version."""
    # Hashing the settings (pydantic models) costs more than the rest of a warm call's set-up,
    # so the key is remembered per policy object (kept alive with it; policies are few).
    known = _CAP_KEYS_BY_POLICY.get((id(policy), encoding))
    if known is not None and known[0] is policy:
        return known[1]
    settings = (
        encoding,
        policy.tool_output,
        policy.text,
        policy.eviction,
        policy.window.protected_tools,
    )
    key = _CAP_KEYS.setdefault(settings, len(_CAP_KEYS))
    if len(_CAP_KEYS_BY_POLICY) >= 64:
        _CAP_KEYS_BY_POLICY.clear()
    _CAP_KEYS_BY_POLICY[(id(policy), encoding)] = (policy, key)
    return key


_CAP_KEYS_BY_POLICY: dict[tuple[int, str], tuple[Policy, int]] = {}


def rebuilt(message: ModelMessage, parts: list[Part]) -> ModelMessage:
    """``message`` with ``parts``; the same object for the same parts on every call.

    Governed parts are cached on the originals, so reusing the rebuilt message too lets its
    counts (cached by identity) survive from one request to the next.
    """
    values = message_cache(message)
    key = ("rebuilt", tuple(map(id, parts)))
    found = values.get(key)
    if found is not None and all(a is b for a, b in zip(found.parts, parts, strict=True)):
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


def is_request(message: ModelMessage) -> bool:
    """Whether a message is a request."""
    return isinstance(message, ModelRequest)


def is_response(message: ModelMessage) -> bool:
    """Whether a message is a response."""
    return isinstance(message, ModelResponse)


def results_in(parts: Sequence[Part]) -> list[int]:
    """Indices of the tool results among ``parts``."""
    return [
        n
        for n, p in enumerate(parts)
        if isinstance(p, ToolReturnPart) or (isinstance(p, RetryPromptPart) and p.tool_name)
    ]
