"""``manage.py create_api_key USERNAME --scopes read,write,govern [--expires DAYS]``."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from sessions.api.keys import SCOPES, create_key
from sessions.services import ServiceError


class Command(BaseCommand):
    help = "Make an API key for a user and print it (once: only its digest is stored)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--scopes", default="read", help=f"comma-separated, among {', '.join(SCOPES)}"
        )
        parser.add_argument("--expires", type=int, default=None, help="days until it expires")
        parser.add_argument("--name", default="", help="what the key is for")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"no user {options['username']!r}")
        scopes = [s.strip() for s in options["scopes"].split(",") if s.strip()]
        try:
            key, text = create_key(
                user,
                name=options["name"] or f"{user.get_username()}'s key",
                scopes=scopes,
                expires_days=options["expires"],
                via="manage.py create_api_key",
            )
        except ServiceError as error:
            raise CommandError(error.message) from None
        self.stdout.write(text)
        expiry = f", expires {key.expires_at:%Y-%m-%d}" if key.expires_at else ""
        self.stderr.write(f"scopes {','.join(key.scopes)}{expiry}; it is not shown again")
