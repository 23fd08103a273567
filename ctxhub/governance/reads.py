"""Reads of one resource: a tool's outputs whose calls name the same thing.

``Dedupe.keys`` says which arguments name what a tool reads (``{"read_file": ["path"]}``). A
later read of the same path supersedes an older one even when the file changed in between:
the older copy is stale, and sending it beside the newer one costs its full size in every later
request. Which calls name which resource is found once per message, as the history grows (the
arguments are in the calls, the outputs in the requests after them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from hashlib import blake2b

from pydantic_ai.messages import ModelResponse, ToolCallPart, ToolReturnPart

from .facts import MessageFacts
from .positions import Messages

Keys = Mapping[str, Sequence[str]]
"""Tool name → the arguments naming what it reads."""

OutputAt = tuple[int, str, int]
"""An output in the input history: the message's index, the output's digest, and which copy of
that digest in the message it is (parallel calls may return the same text twice)."""


def nth_copy(fact: MessageFacts, number: int, digest: str) -> int:
    """Which copy of ``digest`` among a message's outputs the one at part ``number`` is."""
    return sum(
        1
        for n, d in zip(fact.outputs, fact.output_digests, strict=True)
        if n < number and d == digest
    )


@dataclass
class Reads:
    """The reads found so far in a history's first ``seen`` messages."""

    seen: int = 0
    resource_of: dict[str, str] = field(default_factory=dict)
    """Tool call id → the resource its call names."""
    newest: dict[str, OutputAt] = field(default_factory=dict)
    """Resource → its newest read."""
    older: list[tuple[OutputAt, OutputAt]] = field(default_factory=list)
    """Each read of a resource read again later, and the next read of it."""

    def extend(self, facts: Sequence[MessageFacts], messages: Messages, keys: Keys) -> None:
        """Look at the messages past ``seen``: only those calling or answering a keyed tool
        are read."""
        for index in range(self.seen, len(facts)):
            fact = facts[index]
            if fact.request:
                for number, digest in zip(fact.outputs, fact.output_digests, strict=True):
                    # An output governance wrote (a placeholder, a reference) is no read.
                    if fact.part_tool_names[number] in keys and number in fact.maskable:
                        at = (index, digest, nth_copy(fact, number, digest))
                        self._output(at, messages[index].parts[number])
            elif not fact.tool_names.isdisjoint(keys):
                message = messages[index]
                assert isinstance(message, ModelResponse)
                for part in message.parts:
                    if isinstance(part, ToolCallPart) and part.tool_name in keys:
                        resource = resource_named(part, keys[part.tool_name])
                        if resource is not None:
                            self.resource_of[part.tool_call_id] = resource
        self.seen = len(facts)

    def _output(self, at: OutputAt, part: object) -> None:
        assert isinstance(part, ToolReturnPart)
        resource = self.resource_of.get(part.tool_call_id)
        # Only a read that returned what it read supersedes: not a failure, nor the result
        # pair repair writes for a call left unanswered.
        if resource is None or part.outcome != "success":
            return
        previous = self.newest.get(resource)
        if previous is not None:
            self.older.append((previous, at))
        self.newest[resource] = at


def resource_named(call: ToolCallPart, arguments: Sequence[str]) -> str | None:
    """What a call reads, by the values of ``arguments``; None when it lacks one of them (or
    its arguments are not a JSON object)."""
    given = call.args_as_dict()
    if not all(name in given for name in arguments):
        return None
    values = [given[name] for name in arguments]
    text = json.dumps([call.tool_name, values], sort_keys=True, default=str, ensure_ascii=False)
    return blake2b(text.encode(), digest_size=12).hexdigest()
