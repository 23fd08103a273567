"""The hash chain that threads a client's requests into sessions.

Clients resend their whole conversation with every request. Each message gets a chain hash,
``h_i = H(h_{i-1}, canonical(message_i))``, rooted in the wire format; a request continues the
session whose newest message's hash is one of its own (the stored session is a prefix of the
request), and only the messages after it are new.

The canonical form is what a message means, not how a client happened to write it: keys
sorted; ``null``, empty-list and empty-content members dropped; cache markers dropped
(``cache_control``, ``prompt_cache_breakpoint``: clients move their cache breakpoints from
request to request); a string content read as the one text block it stands for; and a
streamed tool call's ``index`` (an artefact of how OpenAI's stream was put together) dropped;
a tool call's ``arguments``, a JSON text, read for what it says (the provider writes
``{"path": "a"}``, pydantic-ai sends back ``{"path":"a"}``).
A response the gateway stored as the upstream streamed it and the same response as the
client's SDK sends it back then hash alike.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.wire import WireMessage

_VOLATILE = frozenset({"cache_control", "prompt_cache_breakpoint"})


def _said(key: str, item: Any, value: dict[str, Any]) -> bool:
    if item is None or item == [] or key in _VOLATILE:
        return False
    if key == "content" and item == "":
        return False
    return not (key == "index" and "function" in value)


def _arguments(text: str) -> Any:
    try:
        return {"json": _meaning(json.loads(text))}
    except ValueError:
        return text


def _meaning(value: Any) -> Any:
    if isinstance(value, dict):
        kept = {
            key: _arguments(item)
            if key == "arguments" and isinstance(item, str)
            else _meaning(item)
            for key, item in value.items()
            if _said(key, item, value)
        }
        content = kept.get("content")
        if isinstance(content, str) and "role" in kept:
            kept["content"] = [{"type": "text", "text": content}]
        return kept
    if isinstance(value, list):
        return [_meaning(item) for item in value]
    return value


def canonical(value: Any) -> str:
    """A message's canonical text: equal for two writings of the same message."""
    return json.dumps(_meaning(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def root(wire: str) -> str:
    """The hash a chain of the wire format starts from."""
    return hashlib.sha256(f"ctxhub-gateway:{wire}".encode()).hexdigest()


def digest(value: Any) -> bytes:
    """The digest of a message's meaning."""
    return hashlib.sha256(canonical(value).encode("utf-8", "surrogatepass")).digest()


REMEMBERED = 100_000
"""Messages whose digests a process keeps, by their text: a client resends its conversation
with every request, so all but its newest messages were digested before."""
_remembered: dict[tuple[int, int], bytes] = {}


def message_digest(raw: str, value: Any) -> bytes:
    """``digest(value)`` of a message whose text is ``raw``, worked out once per process."""
    key = (len(raw), hash(raw))
    found = _remembered.get(key)
    if found is None:
        if len(_remembered) >= REMEMBERED:
            _remembered.clear()
        found = _remembered[key] = digest(value)
    return found


def link(previous: str, value: Any, raw: str | None = None) -> str:
    """The chain hash of a message after the one hashed ``previous`` (its text ``raw``, when
    known, saves working out its meaning again)."""
    meaning = digest(value) if raw is None else message_digest(raw, value)
    return hashlib.sha256(previous.encode() + meaning).hexdigest()


def hashes(wire: str, messages: Iterable[WireMessage]) -> list[str]:
    """The chain hash of each message of a request, in order. A message read from the
    process's memory of the conversation (``gateway.wire.read_messages``) keeps the hash it
    was given after the same predecessor, so only what is new is hashed."""
    chain: list[str] = []
    previous = root(wire)
    for message in messages:
        known = message.chained
        if known is not None and known[0] == previous:
            previous = known[1]
        else:
            known = message.chained = (previous, link(previous, message.value, message.raw))
            previous = known[1]
        chain.append(previous)
    return chain
