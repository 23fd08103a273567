from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sessions import services
from tests.factories import make_session
from tests.messages import reply, tool_call, tool_result, user
from tests.tracing import recorded_spans


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on for the test, its spans kept in memory."""
    with recorded_spans() as exporter:
        yield exporter


@pytest.fixture
def session(alice: Any) -> Any:
    """Eight turns of long, distinct tool outputs in a 20,000-token window: governance has to
    act."""
    session = make_session(alice, model="openai:gpt-4o", context_window=20_000)
    services.append_messages(session, migration(), auto_compact=False)
    return session


def migration() -> list[Any]:
    """An agent's history: eight turns of three long, distinct tool outputs each (65,000
    tokens)."""
    history: list[Any] = []
    for turn in range(8):
        history.append(user(f"Migrate db-west-{turn}"))
        for call in range(3):
            output = "".join(f"{turn}.{call}: row {row} migrated\n" for row in range(300))
            history += [
                tool_call("read_log", id=f"c{turn}_{call}", job=f"m{turn}"),
                tool_result("read_log", output, id=f"c{turn}_{call}"),
            ]
        history.append(reply(f"db-west-{turn} migrated"))
    return history
