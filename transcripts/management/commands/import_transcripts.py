"""Import Claude Code and Codex transcripts into a user's sessions, and (``--follow``) keep
them up to date as the agents write them."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from transcripts.following import Follower
from transcripts.importing import FileImport, import_file, transcript_files
from transcripts.models import Format


class Command(BaseCommand):
    help = (
        "Import agents' transcripts (Claude Code's ~/.claude/projects, Codex's ~/.codex/sessions:"
        " files or folders, searched through) as sessions of --owner. Importing again adds only "
        "what was written since; --follow keeps reading as the agents write."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("paths", nargs="+", type=Path, help="Transcript files or folders.")
        parser.add_argument("--owner", required=True, help="The username the sessions are for.")
        parser.add_argument(
            "--format", choices=Format.values, help="Read only files of this format."
        )
        parser.add_argument(
            "--follow", action="store_true", help="Keep reading new lines until interrupted."
        )

    def handle(self, *args: Any, paths: list[Path], owner: str, **options: Any) -> None:
        user = get_user_model().objects.filter(username=owner).first()
        if user is None:
            raise CommandError(f"no user {owner!r}")
        missing = [str(path) for path in paths if not path.exists()]
        if missing:
            raise CommandError(f"no such file or folder: {', '.join(missing)}")
        files = list(transcript_files(paths))
        totals = _Totals()
        for number, path in enumerate(files, 1):
            try:
                report = import_file(path, user, format=options["format"])
            except OSError as exc:
                report = FileImport(str(path), problem=str(exc))
            totals.add(report)
            self._progress(number, len(files), totals)
            if report.problem and report.format:
                self.stderr.write(f"\n{path}: {report.problem}")
            for line, why in report.broken:
                self.stderr.write(f"\n{path}:{line}: skipped, {why}")
        self.stdout.write(f"\n{totals.summary(len(files))}")
        if options["follow"]:
            self._follow(paths, user)

    def _progress(self, number: int, total: int, totals: _Totals) -> None:
        if not sys.stdout.isatty() and number != total and number % 100:
            return  # a log, not a terminal: a line every hundred files
        width = 30
        filled = width * number // max(total, 1)
        bar = "#" * filled + "." * (width - filled)
        end = "\r" if sys.stdout.isatty() else "\n"
        self.stdout.write(
            f"[{bar}] {number:,}/{total:,} files, {totals.messages:,} messages", ending=end
        )

    def _follow(self, paths: list[Path], user: Any) -> None:
        self.stdout.write("Following; Ctrl-C stops.")

        def reported(report: FileImport) -> None:
            if report.problem:
                self.stderr.write(f"{report.name}: {report.problem}")
            else:
                self.stdout.write(
                    f"{time.strftime('%H:%M:%S')} {report.name}: +{report.messages} messages"
                    + (f", +{report.compactions} compactions" if report.compactions else "")
                )

        follower = Follower(paths, user, reported=reported)
        follower.poll()  # what it holds now is in: the next looks read only what grows
        stop = threading.Event()
        try:
            follower.run(stop)
        except KeyboardInterrupt:
            stop.set()


class _Totals:
    def __init__(self) -> None:
        self.files = self.sessions = self.messages = self.compactions = self.broken = 0
        self.skipped = 0

    def add(self, report: FileImport) -> None:
        if report.problem:
            self.skipped += 1
            return
        self.files += report.added
        self.sessions += report.created
        self.messages += report.messages
        self.compactions += report.compactions
        self.broken += len(report.broken)

    def summary(self, total: int) -> str:
        return (
            f"{total:,} files: {self.sessions:,} new sessions, {self.messages:,} messages, "
            f"{self.compactions:,} compactions added from {self.files:,}; "
            f"{total - self.files - self.skipped:,} had nothing new, {self.skipped:,} were "
            f"not read, {self.broken:,} lines could not be read"
        )
