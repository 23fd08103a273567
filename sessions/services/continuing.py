"""A session's next request from the last one it sent and the new messages alone.

Between its Governor's actions a session's next request is the last one sent with the new
messages appended (``ctxhub.governance.continuation``). So the hub keeps the last request each
session sent in the shared cache (Redis in production): its messages and report as the JSON the
API answers with, and what the engine needs to go on from it. A process sending the next
request (``send_context``) reads that, the stored Governor state and the messages appended
since, and answers from them, in time and reads that grow with the new messages, not with the
history: a web process that never held the session, a restarted one, a worker. Where the
engine cannot be sure of the answer that way (an action is due, pair repair would reach back,
the entry is gone or stale), the whole history is governed as before, and the entry written
anew from that.

The entry is derived data: it is used only when it is the request of the stored state's
version, made from this session's records, policy, model, window and tools, by this engine; a
missing one costs a full governance, nothing else.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from django.core.cache import cache
from django.db.models import TextField
from django.db.models.functions import Cast
from pydantic import TypeAdapter
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from ctxhub.governance import ContextReport, Policy
from ctxhub.governance.continuation import LastRequest, continued
from ctxhub.governance.facts import MessageFacts
from ctxhub.governance.governor import GovernorState
from ctxhub.governance.report import MessageReport
from ctxhub.governance.tokens import tokenizer_for
from sessions.history import EffectiveHistory
from sessions.models import AgentSession, Message
from sessions.services.sending import StoredState

if TYPE_CHECKING:
    from sessions.services.governed import GovernedContext

log = logging.getLogger(__name__)

CACHE_SECONDS = 6 * 3600
"""How long the last request of a session no request was sent for stays in the cache."""

_REPORTS = TypeAdapter(list[MessageReport])
_MESSAGE: TypeAdapter[ModelMessage] = TypeAdapter(ModelMessage)
_NO_ENTRIES = b'"messages":[]'


LAYOUT = 2
"""The form of an entry: raised when it changes, so processes of two releases serving at once
(a rolling deploy) never read each other's."""


def _cache_key(session_id: Any) -> str:
    return f"last-request:{LAYOUT}:{session_id}"


def _body_key(session_id: Any) -> str:
    return f"last-request:{LAYOUT}:{session_id}:body"


_BODY = ("items", "entries", "seqs", "shapes")
"""What an entry keeps under a key of its own: the JSON that grows with the session, read
only once the rest of the entry says it is the one wanted."""


def decided_by(session: AgentSession, revision: int) -> str:
    """What decides a session's requests besides its log and Governor state: its records
    (their revision), policy, model, window and tool definitions, and the engine's code."""
    from sessions.snapshots import engine_fingerprint

    decided = {
        "revision": revision,
        "policy": session.policy or {},
        "model": session.model,
        "window": session.context_window,
        "tools": session.tool_definitions or [],
        "engine": engine_fingerprint(),
    }
    return hashlib.sha256(json.dumps(decided, sort_keys=True).encode()).hexdigest()


_RESHAPED = frozenset({"dropped", "moved", "synthesized"})


class SentShape(NamedTuple):
    """What a message sent is made of: the effective-history index of the message it stands
    for (None: governance added it) and the parts governance rewrote in place (empty: the
    message as it is; None: reshaped, parts dropped, moved in or added, so that its parts no
    longer line up with that message's)."""

    history_index: int | None
    rewritten: frozenset[int] | None


def sent_shape(entry: MessageReport) -> SentShape:
    """The shape of a message sent, from its report."""
    actions = [part.action for part in entry.parts]
    if _RESHAPED.intersection(actions):
        return SentShape(entry.index, None)
    return SentShape(
        entry.index, frozenset(index for index, action in enumerate(actions) if action != "kept")
    )


def message_item(message: ModelMessage) -> bytes:
    """A message's JSON, as an item of the messages array the API answers with."""
    return _MESSAGE.dump_json(message)


def _shapes_json(shapes: list[SentShape]) -> bytes:
    return json.dumps(
        [[index, None if parts is None else sorted(parts)] for index, parts in shapes],
        separators=(",", ":"),
    ).encode()


@dataclass(frozen=True, slots=True)
class SentJSON:
    """A request as the API answers with it: its messages and report, as JSON."""

    items: list[bytes]
    """Each message's JSON (an item of the array the API answers with): a message is read
    alone, where the caller needs it (the gateway reads only those governance rewrote)."""
    report: bytes
    """The report without its message reports (``"messages":[]``)."""
    entries: bytes
    """The message reports, comma-separated (what goes between the brackets)."""
    seqs: bytes
    """The log seq of each position of the history, a JSON array."""
    shapes: bytes
    """The shape of each message sent, in order (``SentShape`` as ``[index, parts]``), a
    JSON array."""

    def messages_json(self) -> bytes:
        return b"[" + b",".join(self.items) + b"]"

    def message(self, position: int) -> ModelMessage:
        return _MESSAGE.validate_json(self.items[position])

    def report_json(self) -> bytes:
        return self.report.replace(_NO_ENTRIES, b'"messages":[' + self.entries + b"]", 1)

    def sent_shapes(self) -> list[SentShape]:
        return [
            SentShape(index, None if parts is None else frozenset(parts))
            for index, parts in json.loads(self.shapes)
        ]


@dataclass(frozen=True, slots=True)
class Continuation:
    """A request continued from the last one (``continued_request``)."""

    json: SentJSON
    figures: ContextReport
    """The report's figures and steps (its message reports: the new messages' only)."""
    evicted: dict[str, str]
    state: dict[str, Any]
    prefix_tokens: int
    last_seq: int
    """The newest log seq the request carries."""
    pins: list[int]
    entry: dict[str, Any]
    """The cache entry the request leaves (written once it is recorded: ``remember``)."""


def continued_request(
    session: AgentSession, stored: StoredState, policy: Policy, tool_tokens: int
) -> Continuation | None:
    """The session's next request continued from the last one sent, if the cache holds that
    one as of ``stored`` and the engine can continue it under ``policy`` (the session's) with
    ``tool_tokens`` of tool definitions; None otherwise (the caller governs the whole
    history)."""
    if stored.state is None:
        return None
    try:
        return _continued(session, stored, policy, tool_tokens)
    except (KeyError, TypeError, ValueError):
        # An entry that is not what it should be (the cache is shared, and derived): the
        # whole history is governed instead, and the entry written anew.
        log.warning("session %s: the last request kept is unreadable", session.pk, exc_info=True)
        return None


def _continued(
    session: AgentSession, stored: StoredState, policy: Policy, tool_tokens: int
) -> Continuation | None:
    assert stored.state is not None
    state_digest = _state_digest(stored.state)
    entry = _read(_cache_key(session.pk))
    if (
        not isinstance(entry, dict)
        or entry.get("version") != stored.version
        or entry.get("state") != state_digest
    ):
        return None
    assert stored.heads is not None  # read with every stored state
    revision, newest = stored.heads
    if entry["decided_by"] != decided_by(session, revision) or newest <= entry["last_seq"]:
        return None
    body = _read(_body_key(session.pk))
    if not isinstance(body, dict) or body.get("state") != state_digest:
        return None  # written apart from the rest: another request's, or gone
    entry = {**entry, **body}
    tokenizer = tokenizer_for(session.model)
    rows = list(
        Message.objects.filter(session=session, seq__gt=entry["last_seq"])
        .order_by("seq")
        .annotate(raw=Cast("payload", output_field=TextField()))
        .values_list("seq", "facts", "encoding", "raw")
    )
    try:
        facts = [_facts(data, encoding, tokenizer.encoding_name) for _, data, encoding, _ in rows]
        new = ModelMessagesTypeAdapter.validate_json(
            b"[" + b",".join(raw.encode() for *_, raw in rows) + b"]"
        )
    except ValueError:
        # Facts of another version or encoding, a message that no longer reads: the whole
        # history's governance counts them again, or says what cannot be read.
        return None
    tail = [MessageFacts.from_json(data) for data in entry["tail"]]
    state = GovernorState.model_validate(stored.state)
    if entry["kept_instructions"] and any(f.instructions for f in facts):
        return None  # what a clear kept is stated again: the history is built without it
    if not entry["items"]:
        return None  # a request of no messages: nothing to go on from
    last = LastRequest(
        len(entry["items"]),
        _MESSAGE.validate_json(entry["items"][-1]),
        ContextReport.model_validate_json(entry["report"]),
        state,
        tail,
        entry["acted"],
    )
    found = continued(
        policy,
        last,
        new,
        facts,
        model=session.model,
        tool_tokens=tool_tokens,
        context_window_tokens=session.context_window,
    )
    if found is None:
        return None
    seqs = [seq for seq, *_ in rows]
    sent = SentJSON(
        [*entry["items"], *map(message_item, found.added)],
        found.report.model_copy(update={"messages": []}).model_dump_json().encode(),
        _joined(entry["entries"], _REPORTS.dump_json(found.added_reports)[1:-1]),
        _grown(entry["seqs"], json.dumps(seqs).encode()),
        _grown(entry["shapes"], _shapes_json([sent_shape(e) for e in found.added_reports])),
    )
    state_json = found.state.model_dump(mode="json")
    grown_entry = {
        **entry,
        "version": stored.version + 1,
        "state": _state_digest(state_json),
        "last_seq": seqs[-1],
        **_json_fields(sent),
        "tail": [f.to_json() for f in (tail + facts)[-2:]],
        "acted": False,
    }
    return Continuation(
        sent,
        found.report,
        found.evicted,
        state_json,
        found.prefix_tokens,
        seqs[-1],
        entry["pins"],
        grown_entry,
    )


def remember_whole(
    session: AgentSession,
    version: int,
    state: dict[str, Any],
    context: GovernedContext,
    history: EffectiveHistory,
) -> None:
    """Keep a request governed whole, recorded as ``version`` with the Governor ``state`` it
    left, as the session's last one."""
    report = context.report
    whole = context.report_json()
    head = report.model_copy(update={"messages": []}).model_dump_json().encode()
    before, after = head.split(_NO_ENTRIES, 1)
    entries = whole[len(before) + len(b'"messages":[') : len(whole) - len(after) - 1]
    shapes = _shapes_json(context.sent_shapes())
    seqs = json.dumps(context.seqs).encode()
    sent = SentJSON(context.message_items(), head, entries, seqs, shapes)
    held = history.kept
    remember(
        session,
        {
            "version": version,
            "state": _state_digest(state),
            "decided_by": decided_by(session, history.state.revision),
            "last_seq": history.last_seq,
            **_json_fields(sent),
            "tail": [f.to_json() for f in history.facts[-2:]],
            "acted": context.acted is not None,
            "kept_instructions": held is not None and held.instructions,
            "pins": context.pinned,
        },
    )


def remember(session: AgentSession, entry: dict[str, Any]) -> None:
    """Keep ``entry`` as the session's last request sent."""
    head = {key: value for key, value in entry.items() if key not in _BODY}
    body = {"state": entry["state"], **{key: entry[key] for key in _BODY}}
    try:
        cache.set_many({_cache_key(session.pk): head, _body_key(session.pk): body}, CACHE_SECONDS)
    except Exception:  # the cache is away or full: the next request is governed whole
        log.warning("session %s: the last request cannot be kept", session.pk, exc_info=True)


def forget(session_id: Any) -> None:
    """Drop the session's last request from the cache (the next is governed whole)."""
    try:
        cache.delete_many([_cache_key(session_id), _body_key(session_id)])
    except Exception:  # the cache is away: the entry expires
        log.warning("session %s: the last request cannot be dropped", session_id, exc_info=True)


def _read(key: str) -> Any:
    try:
        return cache.get(key)
    except Exception:  # the cache is away: the request is governed whole
        log.warning("the last request cannot be read (%s)", key, exc_info=True)
        return None


def _state_digest(state: dict[str, Any]) -> str:
    """What tells the Governor state an entry was left with apart (a version number alone
    could be reused by a request whose recording rolled back)."""
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()


def _json_fields(sent: SentJSON) -> dict[str, Any]:
    return {
        "items": sent.items,
        "report": sent.report,
        "entries": sent.entries,
        "seqs": sent.seqs,
        "shapes": sent.shapes,
    }


def _facts(data: Any, encoding: str, wanted: str) -> MessageFacts:
    if encoding != wanted:
        raise ValueError(f"facts counted for {encoding}, not {wanted}")
    return MessageFacts.from_json(data)


def _grown(array: bytes, more: bytes) -> bytes:
    """A JSON array with the items of the array ``more`` appended."""
    if more == b"[]":
        return array
    if array == b"[]":
        return more
    return array[:-1] + b"," + more[1:]


def _joined(items: bytes, more: bytes) -> bytes:
    return more if not items else items if not more else items + b"," + more
