"""Write a session's export (JSONL, or a Markdown transcript) to a file or standard output."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from sessions.models import AgentSession
from sessions.services import transfer


class Command(BaseCommand):
    help = (
        "Export a session: its log and records as JSONL (import_session reads it back), or a "
        "Markdown transcript to read."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("session", help="The session's id.")
        parser.add_argument("--format", choices=("jsonl", "markdown"), default="jsonl")
        parser.add_argument("-o", "--output", help="The file to write (default: standard output).")

    def handle(self, *args: Any, session: str, format: str, output: str | None,
               **options: Any) -> None:  # fmt: skip
        try:
            found = AgentSession.objects.filter(pk=session).first()
        except ValidationError:
            found = None
        if found is None:
            raise CommandError(f"no session {session}")
        markdown = format == "markdown"
        lines = transfer.export_markdown(found) if markdown else transfer.export_lines(found)
        if output is None:
            for line in lines:
                self.stdout.write(line, ending="")
            return
        with open(output, "w", encoding="utf-8") as file:
            file.writelines(lines)
        self.stderr.write(f"Wrote {found.title!r} to {output}.")
