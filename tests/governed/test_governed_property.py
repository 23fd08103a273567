"""Property: whatever appends and records a session went through, its governed context (the
fast path: stored facts, lazy payloads, a history remembered and extended between calls) equals
a cold ``govern`` of the effective history built naively from the database."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessions import services
from sessions.history import REMEMBERED, effective_history, effective_tokens
from sessions.models import Clear, Compaction, Message
from sessions.payloads import InvalidPayload
from sessions.services.governed import wait_for_warm_up
from tests.factories import make_session
from tests.governed.builders import SMALL_POLICY, turn
from tests.governed.oracle import dump, naive_governed
from tests.messages import reply, user

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.smoke]

POLICIES = [
    SMALL_POLICY,
    {**SMALL_POLICY, "eviction": {"threshold_tokens": 300, "preview_chars": 200}},
    {**SMALL_POLICY, "masking": {"apply": "never"}, "window": {"keep_head": False}},
    {**SMALL_POLICY, "masking": {"keep_first": 0, "keep_last": 0, "apply": "always"}},
]

append = st.tuples(
    st.just("append"),
    st.integers(5, 200),  # tokens per tool output
    st.integers(0, 3),  # tool calls
    st.booleans(),  # the last turn left dangling (interrupted)
    st.integers(1, 4),  # turns
)
# Appends and compactions weigh more: nested compactions need history to build up.
operation = st.one_of(
    append,
    append,
    append,
    st.just(("compact",)),
    st.just(("compact",)),
    st.tuples(st.just("chat"), st.text(min_size=1, max_size=40)),
    # An agent's new run: its system prompt sent again (or another, or none), its instructions.
    st.tuples(
        st.just("run"),
        st.sampled_from([None, "You are a careful engineer.", "You review code."]),
        st.sampled_from([None, "Answer in English.", "Answer briefly."]),
    ),
    st.just(("clear",)),
    st.just(("undo_clear",)),
    st.tuples(st.just("pin"), st.integers(0, 400)),
    st.tuples(st.just("unpin"), st.integers(0, 400)),
    st.just(("compact",)),
    st.just(("undo_compaction",)),
)


def apply(session: Any, op: tuple[Any, ...], counter: list[int]) -> None:
    name = op[0]
    if name == "append":
        _, size, calls, dangling, turns = op
        messages = []
        for number in range(turns):
            counter[0] += 1
            last = number == turns - 1
            messages += turn(counter[0], size=size, calls=calls, dangling=dangling and last)
        services.append_messages(session, messages)
    elif name == "chat":
        if "\x00" in op[1]:  # refused, naming the field; the session is unchanged
            with pytest.raises(InvalidPayload):
                services.append_messages(session, [user(op[1]), reply("Noted.")])
            return
        services.append_messages(session, [user(op[1]), reply("Noted.")])
    elif name == "run":
        _, system, instructions = op
        first = replace(user("Go on.", system=system), instructions=instructions)
        services.append_messages(session, [first, reply("On it.")])
    elif name == "clear":
        with contextlib.suppress(services.Conflict):
            services.clear(session)
    elif name == "undo_clear":
        latest = Clear.objects.filter(session=session, undone_at=None).order_by("-id").first()
        if latest is not None:
            services.undo_clear(session, latest.pk)
    elif name in ("pin", "unpin"):
        seqs = list(Message.objects.filter(session=session).values_list("seq", flat=True))
        if seqs:
            seq = seqs[op[1] % len(seqs)]
            with contextlib.suppress(services.Invalid, services.NotFound):
                (services.pin if name == "pin" else services.unpin)(session, seq)
    elif name == "compact":
        services.request_compaction(session)
    elif name == "undo_compaction":
        latest = Compaction.objects.filter(session=session, undone_at=None).order_by("-id").first()
        if latest is not None:
            services.undo_compaction(session, latest.pk)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    policy=st.sampled_from(POLICIES),
    operations=st.lists(operation, min_size=2, max_size=16),
)
def test_the_governed_context_always_equals_a_cold_govern(
    alice: Any, policy: dict[str, Any], operations: list[tuple[Any, ...]]
) -> None:
    session = make_session(alice, title="property", policy=policy)
    services.append_messages(session, [m for n in range(3) for m in turn(n, size=60)])
    counter = [3]
    for op in operations:
        apply(session, op, counter)
        session.refresh_from_db()
        cold = naive_governed(session, services.session_policy(session))
        # This process's carried-over work, then a process that never governed the session
        # (it reads the snapshot a previous governance left, or governs cold).
        for fresh in (False, True):
            if fresh:
                REMEMBERED.clear()
            context = services.governed_context(session)
            assert dump(context.messages) == dump(cold.messages), (op, fresh)
            assert context.report.model_dump() == cold.report.model_dump(), (op, fresh)
        # The sum the append path checks the soft threshold with, from the stored counts.
        wait_for_warm_up(session)
        REMEMBERED.clear()
        assert effective_tokens(session) == effective_history(session).tokens, op
