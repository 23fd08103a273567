"""What a Governor remembers of the histories it governed last (see ``prepare``)."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import count
from typing import TYPE_CHECKING, Any

from pydantic_ai.messages import ModelMessage

from .carried import Carry
from .facts import MessageFacts
from .reads import OutputAt, Reads
from .report import PartTotals, ReportCache
from .steps.pairing import Pairing
from .steps.repaired import Normalized

if TYPE_CHECKING:
    from .governed import Governed


@dataclass
class WorkCache:
    """What a Governor keeps between its calls to pay for new messages only: the passes over
    the histories it governed last, and the token ids of long outputs not truncated yet."""

    histories: list[Prepared] = field(default_factory=list)
    token_ids: dict[int, tuple[str, list[int]]] = field(default_factory=dict)


_SERIALS = count(1)


@dataclass
class Prepared:
    """What a left-to-right pass over a history knows, kept to extend on the next call."""

    messages: list[ModelMessage] | None
    """The messages (None when the caller gave their facts and loads messages on demand)."""
    size: int
    """How many messages the history has (``facts`` may since have been grown in place by the
    history extending this one: see ``grows``)."""
    tail: list[tuple[Sequence[Any], int]] | None
    """The parts list and its length of each of the last ``EDITABLE`` messages, as seen, to
    notice one edited in place."""
    facts: list[MessageFacts]
    pairing: Pairing
    instructions_at: int | None
    """Index of the latest request carrying instructions."""
    system_at: list[int]
    aborted_at: list[int]
    notices_at: list[int]
    latest_call: dict[str, int]
    """Input indices of the window's landmarks (see ``Landmarks``)."""
    first_text: int | None
    """Input index of the first response with text."""
    outputs_at: tuple[int, int] | None
    """Input indices of the first and last requests holding a tool output (None: none)."""
    calls_at: tuple[int, int] | None
    """Input indices of the first and last responses making a tool call (None: none)."""
    newest_output: dict[str, OutputAt]
    """Output digest → its newest copy."""
    older_copies: list[tuple[OutputAt, OutputAt]]
    """Each output the same tool returned again later, and its next copy."""
    tokens: int
    """Tokens of all the messages."""
    reads: Reads
    """Reads of one resource (``Dedupe.keys``), found as far as a call needed them."""
    reports: ReportCache
    """Message reports of earlier calls on this history, for the next report to reuse."""
    totals: PartTotals
    """Prefix sums of the messages' parts and part tokens, for the report."""
    carry: Carry | None = None
    """What the last call on this history governed, for the next call to reuse."""
    normalized: Normalized | None = None
    """The last call's pair repair of this history, for the next call to take up."""
    extends: Prepared | None = None
    """The remembered history this one extends and took over, for its pair repair and carried
    state (only until this one's call is done). A call that could not take it over (a call
    before it did) does not read them: the taker may have grown them in place."""
    grows: bool = False
    """Whether this history grows the one it extends in place, its facts list and its pair
    repair's (taken over, and the result of its call read no more: see ``_unread``)."""
    taken: bool = False
    """Whether a later history extending this one took its landmark and output containers."""
    result: weakref.ReferenceType[Governed] | None = None
    """The result of this history's call, once the call is done."""
    follows: int | None = None
    """The ``serial`` of the remembered history this one begins with (None: none)."""
    serial: int = field(default_factory=lambda: next(_SERIALS))
