"""The exchanges under way in a process, which a conversation's next request waits for: the
request before it being threaded into its session, then its answer being recorded."""

from __future__ import annotations

import asyncio

from gateway.exchange import Recordings


async def test_a_request_waits_for_the_threading_then_the_recording_of_the_one_it_continues() -> (
    None
):
    recordings = Recordings()
    threaded, recorded = asyncio.Event(), asyncio.Event()
    before = ["h1", "h2"]  # the previous request's chain (a hash stands for all before it)
    after = [*before, "h3", "h4"]  # its answer and the next message

    threading = asyncio.ensure_future(threaded.wait())
    recordings.threading(threading, before)
    # Arriving while the request before is still threaded (its answer streamed back before
    # its session was found, as observe mode does): it waits for that, or it would fork.
    assert recordings.continued_by(after) == [threading]
    assert recordings.continued_by(["h1", "other", "h3"]) == []

    recording = asyncio.ensure_future(recorded.wait())
    recordings._track(recording, before)  # the answer's recording takes its place
    threaded.set()
    await threading
    assert recordings.continued_by(after) == [recording]
    recorded.set()
    await recording
    await asyncio.sleep(0)  # the done callbacks
    assert recordings.continued_by(after) == []
