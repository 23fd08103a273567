"""One budget per session: the x-ray, the fleet, the trajectory, the compaction preview, the API
and the automatic-compaction threshold all read the session's limits from one place."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from sessions import services
from sessions.api.keys import create_key
from sessions.models import AgentSession
from sessions.services.fleet import fleet
from sessions.trajectory import trajectory
from sessions.xray import xray

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.smoke]


def test_every_view_of_a_demo_session_states_the_same_budget_and_window() -> None:
    call_command("seed_demo", stdout=None)
    demo = get_user_model().objects.get(username="demo")
    key = create_key(demo, name="limits", scopes=["read", "write", "govern"])[1]
    api = Client(headers={"Authorization": f"Bearer {key}"})
    rows = {row.session.pk: row for row in fleet(demo).rows}
    sessions = list(AgentSession.objects.filter(owner=demo))
    assert len(sessions) >= 3
    for session in sessions:
        context = services.governed_context(session)
        limits = services.session_limits(session, context)
        shown: dict[str, Any] = {
            "x-ray": (xray(context).budget, xray(context).window),
            "fleet": (rows[session.pk].budget, rows[session.pk].window),
            "trajectory": (lambda t: (t["budget"], t["window"]))(trajectory(session, limits)),
        }
        report = api.get(f"/api/v1/sessions/{session.pk}/context").json()["report"]
        shown["api"] = (report["budget_tokens"], report["window_tokens"])
        preview = services.preview_compaction(session)
        shown["compaction preview"] = (limits.budget, preview.window_tokens)
        assert set(shown.values()) == {(limits.budget, limits.window)}, (session.title, shown)
        # What the API sent is now the session's latest request: the threshold of automatic
        # compaction is read from it without governing, and agrees.
        assert services.soft_threshold(session) == limits.soft_threshold, session.title
        assert rows[session.pk].threshold == limits.soft_threshold, session.title
