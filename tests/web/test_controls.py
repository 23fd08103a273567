"""The x-ray's controls: compaction preview and apply, undo, clear, pins; who may use them."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.test import Client

from ctxhub.governance import Policy
from sessions import services
from sessions.models import AuditEvent, Clear, Compaction, Pin
from tests.factories import make_session
from tests.messages import agent_turns, user

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


@pytest.fixture
def session(alice: object) -> Any:
    session = make_session(alice, title="Long run")
    # 10 turns of 5 reads: 120 messages, seqs 0-119, a turn every 12.
    services.append_messages(
        session, agent_turns(10, 5, "y " * 900, "Fix OPS-1234 on db-west-3"), auto_compact=False
    )
    return session


@pytest.fixture
def small(alice: object) -> Any:
    """Enough for the access and validation tests: a few messages, quick to store."""
    session = make_session(alice, title="Short run")
    services.append_messages(session, agent_turns(1, 2, "y"))
    return session


def _preview(client: Client, session: Any, **params: str) -> str:
    response = client.get(f"/sessions/{session.pk}/compact/preview/", params)
    assert response.status_code == 200
    return response.content.decode()


def _fingerprint(page: str) -> str:
    return page.split('name="expected" value="')[1].split('"')[0]


@pytest.mark.django_db(transaction=True)
def test_it_previews_then_compacts_exactly_the_previewed_messages(
    client: Client, alice: object, session: Any
) -> None:
    client.force_login(alice)
    preview = services.preview_compaction(session)
    page = _preview(client, session)
    assert f'data-testid="preview-summarised">{preview.messages:,}<' in page
    assert f'data-testid="preview-replaced">{len(preview.summarized_seqs):,}<' in page
    response = client.post(
        f"/sessions/{session.pk}/compact/", {"expected": _fingerprint(page), "focus": ""}
    )
    assert response.status_code == 200
    record = Compaction.objects.get(session=session)
    assert record.summarized_seqs == preview.summarized_seqs
    assert AuditEvent.objects.filter(session=session, actor=alice).exists()


def test_an_append_between_preview_and_apply_is_a_conflict(
    client: Client, alice: object, session: Any
) -> None:
    client.force_login(alice)
    page = _preview(client, session)
    services.append_messages(session, [user("one more")])
    response = client.post(f"/sessions/{session.pk}/compact/", {"expected": _fingerprint(page)})
    assert response.status_code == 409
    assert 'data-field="expected"' in response.content.decode()
    assert not Compaction.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_compact_above_a_message_keeps_it_and_what_follows(
    client: Client, alice: object, session: Any
) -> None:
    client.force_login(alice)
    page = _preview(client, session, keep_from="36")
    preview = services.preview_compaction(session, keep_from=36)
    assert preview.summarized_seqs
    assert max(preview.summarized_seqs) < 36
    assert set(range(36, 120)) <= set(preview.kept_seqs)
    assert preview.summarized_seqs != services.preview_compaction(session).summarized_seqs
    client.post(
        f"/sessions/{session.pk}/compact/",
        {"expected": _fingerprint(page), "keep_from": "36"},
    )
    assert Compaction.objects.get(session=session).last_seq < 36


@pytest.mark.parametrize(
    ("params", "field"),
    [({"keep_from": "x"}, "keep_from"), ({"keep_from": "999"}, "keep_from")],
)
def test_a_bad_preview_is_refused_naming_the_field(
    client: Client, alice: object, session: Any, params: dict[str, str], field: str
) -> None:
    client.force_login(alice)
    response = client.get(f"/sessions/{session.pk}/compact/preview/", params)
    assert response.status_code == 422
    assert f'data-field="{field}"' in response.content.decode()


@pytest.mark.django_db(transaction=True)
def test_undo_restores_what_the_model_sees(client: Client, alice: object, session: Any) -> None:
    client.force_login(alice)
    before = services.governed_context(session).tokens
    services.request_compaction(session, actor=alice)
    record = Compaction.objects.get(session=session)
    assert services.governed_context(session).tokens < before
    response = client.post(f"/sessions/{session.pk}/compactions/{record.pk}/undo/")
    assert response.status_code == 204
    assert response.headers["HX-Trigger"] == "ctxhub-changed"
    assert services.governed_context(session).tokens == before
    again = client.post(f"/sessions/{session.pk}/compactions/{record.pk}/undo/")
    assert again.status_code == 409


def test_clear_needs_the_typed_confirmation(client: Client, alice: object, session: Any) -> None:
    client.force_login(alice)
    refused = client.post(f"/sessions/{session.pk}/clear/", {"confirm": "yes"})
    assert refused.status_code == 422
    assert 'data-field="confirm"' in refused.content.decode()
    assert not Clear.objects.exists()
    done = client.post(f"/sessions/{session.pk}/clear/", {"confirm": "clear"})
    assert done.status_code == 200
    record = Clear.objects.get(session=session)
    assert f"Cleared before message #{record.from_seq}: kept" in done.content.decode()
    assert services.governed_context(session).report.messages_before == 0
    client.post(f"/sessions/{session.pk}/clears/{record.pk}/undo/")
    assert services.governed_context(session).report.messages_before == 120


def test_pin_and_unpin(client: Client, alice: object, session: Any) -> None:
    client.force_login(alice)
    assert client.post(f"/sessions/{session.pk}/pins/7/").status_code == 204
    assert services.governed_context(session).pinned == [7]
    page = client.get(f"/sessions/{session.pk}/?at=7").content.decode()
    assert 'data-testid="pinned"' in page
    assert client.post(f"/sessions/{session.pk}/pins/7/", {"pinned": "false"}).status_code == 204
    assert not Pin.objects.filter(session=session, undone_at__isnull=True).exists()
    assert client.post(f"/sessions/{session.pk}/pins/9999/").status_code == 404


# --- who may see and change ---------------------------------------------------------------

PAGES = [
    "/sessions/{pk}/",
    "/sessions/{pk}/xray/",
    "/sessions/{pk}/records/",
    "/sessions/{pk}/trajectory/",
    "/sessions/{pk}/fates/?from=0&to=3",
    "/sessions/{pk}/messages/?after=-1",
    "/sessions/{pk}/messages/?before=5",
    "/sessions/{pk}/messages/1/",
    "/sessions/{pk}/messages/1/sent/",
    "/sessions/{pk}/evicted/evicted-x/",
    "/sessions/{pk}/compact/preview/",
    "/sessions/{pk}/policy/",
]
CONTROLS = [
    "/sessions/{pk}/compact/",
    "/sessions/{pk}/policy/preview/",
    "/sessions/{pk}/policy/save/",
    "/sessions/{pk}/compactions/1/undo/",
    "/sessions/{pk}/clear/",
    "/sessions/{pk}/clears/1/undo/",
    "/sessions/{pk}/pins/3/",
    "/sessions/{pk}/auto/resume/",
    "/sessions/{pk}/recount/",
]


@pytest.mark.parametrize("url", PAGES + CONTROLS)
def test_another_users_session_is_404_everywhere(
    client: Client, bob: object, small: Any, url: str
) -> None:
    client.force_login(bob)
    target = url.format(pk=small.pk)
    response = client.post(target) if url in CONTROLS else client.get(target)
    assert response.status_code == 404


@pytest.fixture
def staff(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("carol", password="carol-pw", is_staff=True)


def test_staff_see_every_session_read_only(
    client: Client, staff: Any, small: Any, alice: Any
) -> None:
    client.force_login(staff)
    listing = client.get("/").content.decode()
    assert "Short run" in listing
    assert "alice" in listing
    page = client.get(f"/sessions/{small.pk}/").content.decode()
    assert "read-only" in page
    assert 'data-testid="compact-control"' not in page
    assert "Pin</button>" not in page


@pytest.mark.parametrize("url", CONTROLS)
def test_staff_may_not_change_another_users_session(
    client: Client, staff: Any, small: Any, url: str
) -> None:
    client.force_login(staff)
    assert client.post(url.format(pk=small.pk), {"confirm": "clear"}).status_code == 403
    assert not Clear.objects.exists()
    assert not Pin.objects.exists()


def test_staff_preview_of_another_users_session_is_refused(
    client: Client, staff: Any, small: Any
) -> None:
    client.force_login(staff)
    assert client.get(f"/sessions/{small.pk}/compact/preview/").status_code == 403


@pytest.mark.parametrize("url", CONTROLS)
def test_controls_refuse_a_request_without_the_csrf_token(alice: Any, small: Any, url: str) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    response = client.post(url.format(pk=small.pk), {"confirm": "clear"})
    assert response.status_code == 403
    assert not Clear.objects.exists()
    assert not Pin.objects.exists()
    assert not Compaction.objects.exists()


@pytest.mark.parametrize("url", CONTROLS)
def test_controls_refuse_get(client: Client, alice: Any, small: Any, url: str) -> None:
    client.force_login(alice)
    assert client.get(url.format(pk=small.pk)).status_code == 405


# --- the policy editor --------------------------------------------------------------------


def _form(client: Client, session: Any) -> dict[str, str]:
    """The editor's fields with their current values, as a browser would submit them."""
    page = client.get(f"/sessions/{session.pk}/policy/").content.decode()
    fields = dict(re.findall(r'<input id="knob-[^"]+" name="([^"]+)" value="([^"]*)"', page))
    for name, options in re.findall(
        r'<select id="knob-[^"]+" name="([^"]+)">(.*?)</select>', page, re.S
    ):
        chosen = re.search(r'<option(?: value="([^"]+)")? selected>([^<]*)<', options)
        assert chosen is not None, name
        fields[name] = chosen.group(1) or chosen.group(2)
    return {k: html.unescape(v) for k, v in fields.items()}


def test_the_editor_lists_every_knob_with_its_default(
    client: Client, alice: object, small: Any
) -> None:
    client.force_login(alice)
    fields = _form(client, small)
    for name in ("masking.keep_last", "window.triggers", "compaction.soft_threshold",
                 "eviction.threshold_tokens", "tool_output.strategy", "drop_groups"):  # fmt: skip
        assert name in fields
    assert fields["masking.keep_last"] == "5"
    assert fields["drop_groups"] == "true"


def test_an_unchanged_form_stores_no_overrides(client: Client, alice: object, small: Any) -> None:
    client.force_login(alice)
    response = client.post(f"/sessions/{small.pk}/policy/save/", _form(client, small))
    assert response.status_code == 200
    small.refresh_from_db()
    assert small.policy == {}


def test_preview_replays_the_session_under_the_edited_policy_without_saving(
    client: Client, alice: object, session: Any
) -> None:
    client.force_login(alice)
    form = {**_form(client, session), "masking.keep_last": "1", "masking.apply": "always"}
    response = client.post(f"/sessions/{session.pk}/policy/preview/", form)
    assert response.status_code == 200
    edited = services.governed_context(
        session, policy=Policy.model_validate({"masking": {"keep_last": 1, "apply": "always"}})
    )
    page = response.content.decode()
    assert f'data-testid="replay-tokens">{edited.tokens:,}<' in page
    assert edited.tokens < services.governed_context(session).tokens
    session.refresh_from_db()
    assert session.policy == {}


def test_save_stores_only_what_differs_audited(client: Client, alice: object, small: Any) -> None:
    client.force_login(alice)
    form = {**_form(client, small), "masking.keep_last": "1", "safety_margin": "0.2"}
    response = client.post(f"/sessions/{small.pk}/policy/save/", form)
    assert response.status_code == 200
    assert response.headers["HX-Trigger"] == "ctxhub-changed"
    small.refresh_from_db()
    assert small.policy == {"masking": {"keep_last": 1}, "safety_margin": 0.2}
    event = AuditEvent.objects.get(session=small, verb="policy")
    assert event.actor == alice
    assert event.data["after"] == small.policy


def test_a_silent_window_and_read_keys_are_saved(client: Client, alice: object, small: Any) -> None:
    client.force_login(alice)
    form = {**_form(client, small), "window.notice": "", "dedupe.keys": '{"read_file": ["path"]}'}
    response = client.post(f"/sessions/{small.pk}/policy/save/", form)
    assert response.status_code == 200
    small.refresh_from_db()
    assert small.policy == {"window": {"notice": None}, "dedupe": {"keys": {"read_file": ["path"]}}}


@pytest.mark.parametrize(
    ("knob", "value", "message"),
    [
        ("safety_margin", "0.9", "less than 0.5"),
        ("masking.keep_last", "many", "a whole number"),
        ("tool_output.strategy", "middle", "one of head, tail, both"),
        ("window.triggers", "[{", "JSON"),
        ("window.notice", "no placeholder", "{omitted}"),
        ("dedupe.keys", '{"read_file": []}', "read_file: Tuple should have at least 1 item"),
        ("dedupe.keys", '{"": ["path"]}', "String should have at least 1 character"),
        ("reserved_output_tokens", "10000000", "leaves no room for history"),
    ],
)
def test_a_refused_knob_is_named_and_nothing_is_saved(
    client: Client, alice: object, small: Any, knob: str, value: str, message: str
) -> None:
    client.force_login(alice)
    form = {**_form(client, small), knob: value}
    saved = client.post(f"/sessions/{small.pk}/policy/save/", form)
    assert saved.status_code == 422
    page = html.unescape(saved.content.decode())
    assert message in page
    group = knob.rsplit(".", 1)[0] if knob == "window.notice" else knob
    assert f'data-field="{group}"' in page
    preview = client.post(f"/sessions/{small.pk}/policy/preview/", form)
    assert preview.status_code == 422
    assert 'data-testid="policy-errors"' in preview.content.decode()
    small.refresh_from_db()
    assert small.policy == {}
    assert not AuditEvent.objects.filter(verb="policy").exists()


@pytest.mark.parametrize(
    "url",
    [
        "/sessions/{pk}/messages/99999999999/",
        "/sessions/{pk}/messages/99999999999/sent/",
        "/sessions/{pk}/pins/99999999999/",
        "/sessions/{pk}/compactions/99999999999/undo/",
    ],
)
def test_a_seq_beyond_the_database_is_a_404(
    client: Client, alice: object, small: Any, url: str
) -> None:
    client.force_login(alice)
    target = url.format(pk=small.pk)
    response = client.post(target) if "messages" not in url else client.get(target)
    assert response.status_code == 404


@pytest.mark.parametrize("query", ["?at=99999999999", "fates/?from=0&to=99999999999"])
def test_a_seq_parameter_beyond_the_database_is_a_400(
    client: Client, alice: object, small: Any, query: str
) -> None:
    client.force_login(alice)
    assert client.get(f"/sessions/{small.pk}/{query}").status_code == 400
    preview = client.get(f"/sessions/{small.pk}/compact/preview/?keep_from=99999999999")
    assert preview.status_code == 422
