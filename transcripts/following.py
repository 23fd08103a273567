"""Following transcripts as their agents write them: the folders are looked at a few times a
second, and a file that grew is read from where its last read stopped (``importing``), so a
running session's new lines are in the hub, and pushed to its open pages, as they are written.

A response the agent is still writing is read once its last line is there, or once its file
has been quiet for ``QUIET_SECONDS`` (an agent stopped mid-answer leaves it unfinished for
good).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import close_old_connections

from transcripts.importing import FileImport, import_file, transcript_files

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5
QUIET_SECONDS = 2.0


@dataclass
class _Seen:
    size: int
    mtime: float
    changed: float
    """When it last changed (by this process's clock)."""
    held: bool
    """Whether its last read stopped before its end."""


class Follower:
    """Keeps ``owner``'s sessions up to date with the transcripts under ``paths``."""

    def __init__(
        self,
        paths: Sequence[Path],
        owner: Any,
        *,
        reported: Callable[[FileImport], None] | None = None,
    ) -> None:
        self.paths = list(paths)
        self.owner = owner
        self.reported = reported
        self._seen: dict[Path, _Seen] = {}

    def poll(self, now: float | None = None) -> list[FileImport]:
        """One look at the folders: every file that grew (or has been quiet long enough to
        finish what it held back) is read."""
        now = time.monotonic() if now is None else now
        done: list[FileImport] = []
        for path in transcript_files(self.paths):
            try:
                stat = path.stat()
            except OSError:
                continue
            seen = self._seen.get(path)
            changed = seen is None or (stat.st_size, stat.st_mtime) != (seen.size, seen.mtime)
            quiet = seen is not None and seen.held and now - seen.changed >= QUIET_SECONDS
            if not changed and not quiet:
                continue
            final = quiet and not changed
            report = import_file(path, self.owner, final=final)
            # Read to its end but for a line with no newline yet, or for a group that may still
            # grow: looked at again once quiet (a final read is not tried twice).
            held = not final and not report.problem and report.end < stat.st_size
            last_change = now if changed or seen is None else seen.changed
            self._seen[path] = _Seen(stat.st_size, stat.st_mtime, last_change, held)
            if report.added or report.problem:
                done.append(report)
                if self.reported is not None:
                    self.reported(report)
        return done

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.poll()
            except Exception:  # a bad moment (the database away): the next look tries again
                log.exception("following transcripts failed; trying again")
            finally:
                close_old_connections()
            stop.wait(POLL_SECONDS)


_started = threading.Lock()
_following: threading.Thread | None = None


def follow_from_settings(**kwargs: Any) -> None:
    """Follows ``CTXHUB_FOLLOW`` for ``CTXHUB_FOLLOW_OWNER`` in a daemon thread of this
    process, once (connected to ``request_started`` when set)."""
    global _following
    with _started:
        if _following is not None:
            return
        owner = get_user_model().objects.filter(username=settings.CTXHUB_FOLLOW_OWNER).first()
        if owner is None:
            log.error(
                "CTXHUB_FOLLOW_OWNER %r is no user: nothing followed", settings.CTXHUB_FOLLOW_OWNER
            )
            _following = threading.Thread()  # tried: not again on every request
            return
        follower = Follower(settings.CTXHUB_FOLLOW, owner)
        _following = threading.Thread(
            target=follower.run, args=(threading.Event(),), name="transcripts", daemon=True
        )
        _following.start()
        log.info("following %s for %s", ", ".join(map(str, settings.CTXHUB_FOLLOW)), owner)
