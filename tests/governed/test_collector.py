"""The cycle collector paused while a history is governed whole comes back as it was, however
pauses overlap."""

from __future__ import annotations

import gc
import threading

from sessions.services.collector import collector_paused


def test_overlapping_pauses_end_with_the_last() -> None:
    assert gc.isenabled()
    inside = threading.Event()
    leave = threading.Event()

    def other() -> None:
        with collector_paused():
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=other)
    with collector_paused():
        assert not gc.isenabled()
        thread.start()
        assert inside.wait(10)
    assert not gc.isenabled()  # the other thread still governs
    leave.set()
    thread.join(10)
    assert gc.isenabled()


def test_a_collector_turned_off_stays_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
