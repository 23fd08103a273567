"""Create the demo user and demo sessions, so a first run shows something real."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from sessions import services
from sessions.demo import (
    DEMO_SESSIONS,
    TOUR,
    TOUR_PINNED_REQUEST,
    TOUR_POLICY,
    demo_messages,
    tour_messages,
)
from sessions.models import AgentSession, MessageSource
from sessions.services.governed import refresh_snapshot

DEMO_USERNAME = "demo"
DEMO_PASSWORD = "demo"


class Command(BaseCommand):
    help = "Create the demo user (demo / demo) and its demo sessions. Safe to run again."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--username", default=DEMO_USERNAME)
        parser.add_argument("--password", default=DEMO_PASSWORD)
        parser.add_argument(
            "--force",
            action="store_true",
            help="Seed even in production mode (the demo login is public knowledge).",
        )

    def handle(self, *args: Any, username: str, password: str, force: bool, **options: Any) -> None:
        if settings.PRODUCTION and not force:
            raise CommandError(
                f"refusing to create the {username} / {password} login in production mode "
                "(CTXHUB_PRODUCTION=true): anyone could log in with it. Pass --force to seed "
                "anyway, on a server nobody else can reach."
            )
        user, created = get_user_model().objects.get_or_create(username=username)
        if created:
            user.set_password(password)
            user.save()
        for spec in DEMO_SESSIONS:
            if AgentSession.objects.filter(owner=user, title=spec.title).exists():
                continue
            with transaction.atomic():
                session = AgentSession.objects.create(
                    owner=user,
                    title=spec.title,
                    model=spec.model,
                    context_window=spec.context_window,
                )
                # A history loaded at once, as it was recorded: compacting it is left to
                # whoever opens it.
                rows = services.append_messages(
                    session, demo_messages(spec), source=MessageSource.DEMO, auto_compact=False
                )
            # As an agent's append would: a session past its soft threshold is compacted
            # (here, or by a worker when there is one).
            services.auto_compact(session)
            # Governed once here, so the first listing shows every demo session's figures
            # (budget included) without governing them within its request.
            refresh_snapshot(session)
            self.stdout.write(f"  {spec.title}: {len(rows)} messages")
        self._seed_tour(user)
        self.stdout.write(self.style.SUCCESS(f"Demo data ready; log in as {username} / {password}"))

    def _seed_tour(self, user: Any) -> None:
        """The tour: one short run where every governance action shows, a message pinned."""
        if AgentSession.objects.filter(owner=user, title=TOUR.title).exists():
            return
        with transaction.atomic():
            session = AgentSession.objects.create(
                owner=user, title=TOUR.title, model=TOUR.model, policy=TOUR_POLICY
            )
            rows = services.append_messages(
                session, tour_messages(), source=MessageSource.DEMO, auto_compact=False
            )
            pinned = next(row.seq for row in rows if TOUR_PINNED_REQUEST in str(row.payload))
            services.pin(session, pinned)
        refresh_snapshot(session)
        self.stdout.write(f"  {TOUR.title}: {len(rows)} messages")
