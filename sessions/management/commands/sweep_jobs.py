"""Re-queue compaction jobs whose worker died or whose broker message was lost (see
``sessions.jobs.compaction.sweep``); workers started with ``--beat`` do it on their own."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from sessions.jobs.compaction import sweep


class Command(BaseCommand):
    help = "Re-queue compaction jobs whose worker died or whose message was lost."

    def handle(self, *args: Any, **options: Any) -> None:
        outcome = sweep()
        self.stdout.write(f"requeued {outcome['requeued']}, failed {outcome['failed']}")
