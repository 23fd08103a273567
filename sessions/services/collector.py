"""Python's cycle collector paused while a long history is governed whole, or a transcript
imported.

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
