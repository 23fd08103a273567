"""Create the demo user and demo sessions, so a first run shows something real."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from pydantic_ai.messages import ModelMessage, ModelResponse

from sessions import services
from sessions.demo import (
    DEMO_SESSIONS,
    TOUR,
    TOUR_PINNED_REQUEST,
    TOUR_POLICY,
    demo_messages,
    tour_messages,
)
from sessions.models import AgentSession, Message, MessageSource
from sessions.services.governed import refresh_snapshot

DEMO_USERNAME = "demo"
DEMO_PASSWORD = "demo"

SENT_REQUESTS = 40
"""How many of a demo session's model requests are recorded as sent, spread over its log: its
trajectory plots what each carried, and each opens as it was sent."""


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
                rows = _recorded(session, demo_messages(spec))
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
            rows = _recorded(session, tour_messages())
            pinned = next(row.seq for row in rows if TOUR_PINNED_REQUEST in str(row.payload))
            services.pin(session, pinned)
        refresh_snapshot(session)
        self.stdout.write(f"  {TOUR.title}: {len(rows)} messages")


def _recorded(session: AgentSession, messages: list[ModelMessage]) -> list[Message]:
    """``messages`` appended as their agent sent them: up to ``SENT_REQUESTS`` of the model
    requests before its answers are sent (governed and recorded, as an agent's pull is), spread
    evenly; compacting is left to what follows (an append would start it)."""
    answers = [i for i, message in enumerate(messages) if i and isinstance(message, ModelResponse)]
    if len(answers) > SENT_REQUESTS:
        answers = [answers[i * len(answers) // SENT_REQUESTS] for i in range(SENT_REQUESTS)]
    rows: list[Message] = []
    start = 0
    for end in [*answers, len(messages)]:
        rows += services.append_messages(
            session, messages[start:end], source=MessageSource.DEMO, auto_compact=False
        )
        if end < len(messages):
            services.send_context(session)
        start = end
    return rows
