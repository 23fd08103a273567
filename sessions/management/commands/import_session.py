"""Import a session from an export file, as a new session of the given user."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from sessions import services
from sessions.services import transfer


class Command(BaseCommand):
    help = (
        "Import an export (JSONL) as a new session of --owner. Every line is checked first; "
        "a bad one is named and nothing is stored."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("file", help="The export file (JSONL).")
        parser.add_argument("--owner", required=True, help="The username the session is for.")

    def handle(self, *args: Any, file: str, owner: str, **options: Any) -> None:
        user = get_user_model().objects.filter(username=owner).first()
        if user is None:
            raise CommandError(f"no user {owner!r}")
        try:
            with open(file, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"{file}: {exc}") from None
        try:
            session = transfer.import_session(text, user)
        except services.ServiceError as error:
            raise CommandError(f"{file}: {error.message}") from None
        self.stdout.write(
            f"Imported {session.title!r} as session {session.pk} "
            f"({session.messages.count()} messages)."
        )
