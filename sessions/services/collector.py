"""Python's cycle collector: set for a serving process, and paused while a long history is
governed whole, or a transcript imported.

A web or worker process loads tens of thousands of objects it keeps until it ends (Django's URL
resolvers and models, pydantic's schemas, the engine): ``tune_for_serving`` freezes them out of
the collector, whose full collections otherwise walk them again and again (0.3 s each under
load), and makes the youngest generation's collections rarer. Under the load benchmark a web
process spent 1.3 s in collections per 35 s of serving, 0.2 s after.

Governing a long stored history whole makes hundreds of thousands of objects that live on (its
messages' facts, the report's entries), and importing a transcript makes its messages. Each
time enough of them pile up, the collector walks every object the process holds, these
included: a build of 20,000 messages spent a third of its time in collections that found
nothing to free, an import of agents' transcripts a seventh. Paused, the collector walks them
once, as the pause ends. The pause is the process's: overlapping ones (threads governing at
once) end with the last, and the collector comes back as it was.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 10_000
"""Allocations between two collections of the youngest generation (Python's default: 700). A
request makes thousands of objects that die with it: at 700 a collection ran every few dozen
requests, each walking what the requests in flight held."""


def tune_for_serving() -> None:
    """Freeze what the process holds now (all it loaded to serve) and collect the youngest
    generation less often. Called once loaded: by a web process before its workers fork, and by
    a worker once ready."""
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])


_lock = threading.Lock()
_pauses = 0
_was_enabled = False


@contextmanager
def collector_paused() -> Iterator[None]:
    global _pauses, _was_enabled
    with _lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            resume = _pauses == 0 and _was_enabled
            if resume:
                gc.enable()
        if resume:
            # Everything made meanwhile is still young: one collection now walks it once and
            # moves what lives on past the young generations, here rather than in whatever
            # request allocates next.
            gc.collect(1)
