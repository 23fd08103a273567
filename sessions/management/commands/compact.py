"""Compact a stored session from the command line: preview, queue, and follow the job."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from sessions import services
from sessions.models import AgentSession, CompactionJob


class Command(BaseCommand):
    help = (
        "Preview or compact a session. Without --preview, a compaction job is queued (run by a "
        "worker, or here when jobs run in-process) and followed until it finishes."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("session", help="The session's id.")
        parser.add_argument("--focus", default="", help="What the summary must keep above all.")
        parser.add_argument("--preview", action="store_true", help="Show the plan; change nothing.")
        parser.add_argument("--timeout", type=float, default=900, help="Seconds to follow the job.")

    def handle(self, *args: Any, session: str, focus: str, preview: bool, timeout: float,
               **options: Any) -> None:  # fmt: skip
        found = AgentSession.objects.filter(pk=session).first()
        if found is None:
            raise CommandError(f"no session {session}")
        if preview:
            plan = services.preview_compaction(found, focus=focus)
            if not plan.nothing_to_compact:
                self.stdout.write(
                    f"Would summarise {len(plan.summarized_seqs)} messages "
                    f"(#{plan.first_seq}..#{plan.last_seq}) and keep {len(plan.kept_seqs)}."
                )
            self.stdout.write(f"{plan.message[0].upper()}{plan.message[1:]}.")
            return
        try:
            request = services.request_compaction(found, focus=focus)
        except services.Conflict as conflict:
            raise CommandError(conflict.message) from None
        job = request.job
        self.stdout.write(f"Job {job.pk} {'queued' if request.created else 'already requested'}.")
        deadline = time.monotonic() + timeout
        seen: dict[str, Any] = {}
        while time.monotonic() < deadline:
            job = CompactionJob.objects.get(pk=job.pk)
            if job.progress != seen:
                seen = job.progress
                self.stdout.write(f"  {job.status}: {seen}")
            if not job.active:
                break
            time.sleep(0.5)
        if job.status == "failed":
            raise CommandError(f"compaction failed: {job.error}")
        if job.active:
            raise CommandError(f"job still {job.status} after {timeout:g} s")
        self.stdout.write(self.style.SUCCESS(f"Done: {job.outcome} {job.result}"))
