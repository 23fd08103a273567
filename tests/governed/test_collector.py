"""The cycle collector: a web process freezes what it loaded to serve; paused while a history is
governed whole, it comes back as it was, however pauses overlap."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
from pathlib import Path

from sessions.services.collector import YOUNG_THRESHOLD, collector_paused
from tests.processes import ROOT


def test_a_web_process_freezes_what_it_loaded_to_serve(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "import gc, config.asgi; print(gc.get_freeze_count(), *gc.get_threshold())",
        ],
        cwd=ROOT,
        env={**env, "CTXHUB_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    )
    frozen, young, *_ = map(int, shown.stdout.split())
    assert frozen > 50_000  # Django, the engine, pydantic's schemas: never walked again
    assert young == YOUNG_THRESHOLD


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
