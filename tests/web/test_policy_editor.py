"""The policy editor's form: knobs grouped and labelled, percentages at the form's edge only,
every bad value refused naming its knob (never a 500), and a submission that never navigates."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client
from django.utils.html import escape

from ctxhub.governance import Policy
from sessions import services
from sessions.models import AuditEvent
from sessions.policy_form import HEADINGS, LABELS, PolicyErrors, groups, knobs, policy_from_form
from tests.factories import make_session
from tests.messages import agent_turns

pytestmark = [pytest.mark.django_db]

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def small(alice: object) -> Any:
    session = make_session(alice, title="Short run")
    services.append_messages(session, agent_turns(1, 2, "y"))
    return session


def _page(client: Client, session: Any) -> str:
    response = client.get(f"/sessions/{session.pk}/policy/")
    assert response.status_code == 200
    return response.content.decode()


def _form(page: str) -> dict[str, str]:
    """Every field the editor submits, with its value as rendered."""
    fields = dict(re.findall(r'<input id="knob-[^"]+" name="([^"]+)" value="([^"]*)"', page))
    for name, options in re.findall(
        r'<select id="knob-[^"]+" name="([^"]+)">(.*?)</select>', page, re.S
    ):
        chosen = re.search(r'<option(?: value="([^"]+)")? selected>([^<]*)<', options)
        assert chosen is not None
        fields[name] = chosen.group(1) or chosen.group(2)
    return {k: v.replace("&quot;", '"').replace("&#x27;", "'") for k, v in fields.items()}


# --- the form itself ------------------------------------------------------------------------


def test_it_never_submits_natively_as_a_get(client: Client, alice: object, small: Any) -> None:
    client.force_login(alice)
    page = _page(client, small)
    form = re.search(r"<form[^>]*policy-form[^>]*>", page, re.S)
    assert form is not None
    tag = form.group(0)
    # Enter and the Preview button submit the form: htmx must listen to "submit", and were it
    # not there, the browser would post to the preview rather than navigate with a GET.
    trigger = re.search(r'hx-trigger="([^"]*)"', tag)
    assert trigger is not None
    assert "submit" in [part.strip().split(" ")[0] for part in trigger.group(1).split(",")]
    assert 'method="post"' in tag
    assert f'action="/sessions/{small.pk}/policy/preview/"' in tag
    assert 'name="csrfmiddlewaretoken"' in page


def test_it_groups_every_knob_under_a_heading_with_a_label(
    client: Client, alice: object, small: Any
) -> None:
    every = knobs()
    assert {k.name for k in every} == set(LABELS), "each knob has a label written for people"
    found = groups(every)
    assert [g.key for g in found] == list(HEADINGS)
    assert sum(len(g.knobs) for g in found) == len(every)
    by_knob = {k.name: g.key for g in found for k in g.knobs}
    assert by_knob["masking.keep_last"] == "masking"
    assert by_knob["safety_margin"] == "budget"
    assert by_knob["drop_groups"] == "last_resort"
    client.force_login(alice)
    page = _page(client, small)
    assert "<legend>Masking old tool results</legend>" in page
    assert "Keep the last N tool results" in page
    assert '<code class="knob-name">masking.keep_last</code>' in page


def test_descriptions_name_no_other_project() -> None:
    for knob in knobs():
        for word in ("co-cli", "Duragent", "(000)", "(001)", "Claude", "RFC", "None "):
            assert word not in knob.description, (knob.name, word)


def test_json_knobs_show_an_example_and_their_shape(
    client: Client, alice: object, small: Any
) -> None:
    client.force_login(alice)
    page = _page(client, small)
    row = page.split('data-knob="window.triggers"')[1].split("</tr>")[0]
    assert "placeholder=" in row
    assert "&quot;kind&quot;: &quot;fraction&quot;" in row
    assert "JSON:" in row
    for knob in knobs():
        if knob.kind == "json":
            assert knob.example, knob.name
            assert knob.shape, knob.name


def test_fractions_are_shown_as_percentages(client: Client, alice: object, small: Any) -> None:
    client.force_login(alice)
    fields = _form(_page(client, small))
    assert fields["safety_margin"] == "10 %"
    assert fields["hysteresis.high_water"] == "100 %"
    assert fields["hysteresis.low_water"] == "40 %"
    assert fields["compaction.soft_threshold"] == "80 %"
    assert fields["reserved_output_tokens"] == "8,192"  # whole numbers with separators
    assert {k.name for k in knobs() if k.kind == "percent"} == {
        "safety_margin",
        "hysteresis.high_water",
        "hysteresis.low_water",
        "compaction.soft_threshold",
        "compaction.masked_share",
    }


def test_what_differs_from_the_default_is_marked(alice: object, client: Client) -> None:
    session = make_session(alice, policy={"masking": {"keep_last": 1}, "safety_margin": 0.125})
    services.append_messages(session, agent_turns(1, 2, "y"))
    client.force_login(alice)
    page = _page(client, session)
    assert 'data-testid="knob-mark-masking.keep_last">changed<' in page
    assert 'data-testid="knob-mark-masking.keep_first"><' in page
    assert _form(page)["safety_margin"] == "12.5 %"
    assert 'data-testid="policy-only-changed"' in page


def test_the_session_page_opens_the_editor_in_a_dialog_it_can_close(
    client: Client, alice: object, small: Any
) -> None:
    client.force_login(alice)
    page = client.get(small.get_absolute_url()).content.decode()
    assert '<script src="/static/js/policy.js" defer></script>' in page
    control = page.split(' id="policy-control"')[1].split("</details>")[0]
    dialog = re.search(r'<dialog id="policy-dialog"[^>]*>(.*)</dialog>', control, re.S)
    assert dialog is not None
    assert 'aria-labelledby="policy-dialog-title"' in dialog.group(0)
    assert '<h2 id="policy-dialog-title">' in dialog.group(1)
    # Closing needs no script: a dialog's own form closes it.
    assert re.search(r'<form method="dialog"><button[^>]*>Close</button></form>', dialog.group(1))
    # The editor still loads when the control is opened.
    assert 'id="policy-control-body"' in dialog.group(1)
    assert 'hx-trigger="toggle from:closest details once"' in dialog.group(1)


def test_a_labelled_search_is_over_the_knobs_and_the_preview_beside_them(
    client: Client, alice: object, small: Any
) -> None:
    client.force_login(alice)
    page = _page(client, small)
    assert '<label for="policy-search">Find a knob</label>' in page
    assert re.search(
        r'<input type="search" id="policy-search"[^>]*aria-controls="policy-form"', page
    )
    # Kept as typed when Save renders the editor again.
    toolbar = re.search(r'<div[^>]*id="policy-toolbar"[^>]*>', page)
    assert toolbar is not None
    assert 'hx-preserve="true"' in toolbar.group(0)
    # What the search reads of each knob: its label, its dotted name and its description.
    for knob in knobs():
        row = page.split(f'data-knob="{knob.name}"')[1].split("</tr>")[0]
        assert f'<label for="knob-{knob.name}">' in row
        assert f'<code class="knob-name">{knob.name}</code>' in row
        if knob.description:
            description = f'<div class="muted small knob-description">{escape(knob.description)}<'
            assert description in row
    # Beside the form, not in it: the preview, and the buttons that preview and save.
    form, side = page.split("</form>")
    assert 'id="policy-preview"' not in form
    assert 'id="policy-preview"' in side
    preview = re.search(r'<button[^>]*data-testid="policy-preview-button"[^>]*>', side)
    assert preview is not None
    assert 'type="submit"' in preview.group(0)
    assert 'form="policy-form"' in preview.group(0)
    assert 'data-testid="policy-save"' in side


# --- reading it back ------------------------------------------------------------------------


def test_percentages_are_stored_as_the_engines_fractions(
    client: Client, alice: object, small: Any
) -> None:
    client.force_login(alice)
    form = {
        **_form(_page(client, small)),
        "compaction.soft_threshold": "70 %",
        "hysteresis.low_water": "33.3%",
        "safety_margin": "0.2",  # a bare number is the fraction itself, as the API takes it
    }
    response = client.post(f"/sessions/{small.pk}/policy/save/", form, **HTMX)
    assert response.status_code == 200
    small.refresh_from_db()
    assert small.policy == {
        "compaction": {"soft_threshold": 0.7},
        "hysteresis": {"low_water": 0.333},
        "safety_margin": 0.2,
    }
    assert _form(response.content.decode())["hysteresis.low_water"] == "33.3 %"


def test_an_unchanged_form_round_trips_through_the_percentages() -> None:
    data = {k.name: k.shown for k in knobs()}
    assert policy_from_form(data) == Policy()


@pytest.mark.parametrize(
    ("knob", "value", "message"),
    [
        ("compaction.soft_threshold", "abc", "a percentage such as 90 %"),
        ("compaction.soft_threshold", "150 %", "less than or equal to 1 (100 %)"),
        ("safety_margin", "90", "write 90 % for 90 per cent"),
        ("safety_margin", "60 %", "less than 0.5 (50 %)"),
        ("hysteresis.low_water", "nan %", "a percentage such as 90 %"),
        ("hysteresis.low_water", "1e999 %", "a finite number"),
        ("masking.keep_last", "abc", "a whole number"),
        ("masking.keep_last", "9" * 10_001, "at most 10,000 characters"),
        ("window.triggers", "[" * 5000 + "]" * 5000, "JSON: nested too deep"),
        ("window.triggers", '[{"kind": "fraction", "value": 1.5}]', "fraction must be in (0, 1]"),
        ("window.protected_tools", '["\\ud800"]', "lone surrogate"),
        ("window.protected_tools", '["a\\u0000b"]', "NUL"),
        ("dangling_call_text", "stopped\x00", "NUL"),
    ],
)
def test_bad_input_is_refused_naming_the_knob_and_nothing_is_stored(
    client: Client, alice: object, small: Any, knob: str, value: str, message: str
) -> None:
    with pytest.raises(PolicyErrors) as refused:
        policy_from_form({knob: value})
    assert message in refused.value.errors[knob]
    client.force_login(alice)
    form = {**_form(_page(client, small)), knob: value}
    for url in ("save", "preview"):
        response = client.post(f"/sessions/{small.pk}/policy/{url}/", form, **HTMX)
        assert response.status_code == 422, url
        page = response.content.decode()
        assert 'data-testid="policy-errors"' in page
        assert f'<li data-field="{knob}">' in page
        # Beside the field, under its label: in place when saving, out of band on a preview.
        beside = page.split(f'id="knob-error-{knob}"')[1].split("</div>")[0]
        assert f'data-field="{knob}"' in beside
        assert "hx-swap-oob" in beside if url == "preview" else "hx-swap-oob" not in beside
    small.refresh_from_db()
    assert small.policy == {}
    assert not AuditEvent.objects.filter(verb="policy").exists()


def test_a_refused_save_shows_what_was_typed(client: Client, alice: object, small: Any) -> None:
    client.force_login(alice)
    form = {**_form(_page(client, small)), "masking.keep_last": "many", "masking.keep_first": "3"}
    response = client.post(f"/sessions/{small.pk}/policy/save/", form, **HTMX)
    assert response.status_code == 422
    fields = _form(response.content.decode())
    assert fields["masking.keep_last"] == "many"
    assert fields["masking.keep_first"] == "3"


def test_a_rule_between_knobs_is_shown_on_their_group(
    client: Client, alice: object, small: Any
) -> None:
    client.force_login(alice)
    form = {
        **_form(_page(client, small)),
        "hysteresis.high_water": "50 %",
        "hysteresis.low_water": "60 %",
    }
    response = client.post(f"/sessions/{small.pk}/policy/save/", form, **HTMX)
    assert response.status_code == 422
    group = (
        response.content.decode().split(' id="policy-group-hysteresis"')[1].split("</fieldset>")[0]
    )
    assert 'data-field="hysteresis"' in group
    assert "must be below high_water" in group


def test_a_preview_marks_the_changed_knobs_out_of_band(
    client: Client, alice: object, small: Any
) -> None:
    client.force_login(alice)
    form = {**_form(_page(client, small)), "masking.keep_last": "1"}
    response = client.post(f"/sessions/{small.pk}/policy/preview/", form, **HTMX)
    assert response.status_code == 200
    page = response.content.decode()
    assert 'data-testid="replay-tokens"' in page
    assert re.search(r'id="knob-mark-masking.keep_last" hx-swap-oob="true"[^>]*>changed<', page)
    assert re.search(r'id="knob-mark-masking.keep_first" hx-swap-oob="true"[^>]*><', page)
    assert "1 knob differs from the default" in page
    assert "<form" not in page, "a preview leaves the form being typed in alone"


def test_a_preview_posted_without_htmx_gives_the_editor_back_with_the_edits(
    client: Client, alice: object, small: Any
) -> None:
    client.force_login(alice)
    form = {**_form(_page(client, small)), "masking.keep_last": "1"}
    response = client.post(f"/sessions/{small.pk}/policy/preview/", form)
    assert response.status_code == 200
    page = response.content.decode()
    assert _form(page)["masking.keep_last"] == "1"
    assert 'data-testid="replay-tokens"' in page
    assert "hx-swap-oob" not in page
    small.refresh_from_db()
    assert small.policy == {}


def test_a_lone_surrogate_in_text_is_refused() -> None:
    with pytest.raises(PolicyErrors) as refused:
        policy_from_form({"window.notice": "cut {omitted} \ud800"})
    assert "lone surrogate" in refused.value.errors["window.notice"]


def test_a_lone_surrogate_sent_raw_is_never_a_500(
    client: Client, alice: object, small: Any
) -> None:
    """Encoded as if it were UTF-8, it reaches the view as a replacement character."""
    client.force_login(alice)
    form = {**_form(_page(client, small)), "window.notice": "cut {omitted} \ud800"}
    body = urlencode(form, errors="surrogatepass")
    response = client.post(
        f"/sessions/{small.pk}/policy/preview/",
        body,
        content_type="application/x-www-form-urlencoded",
        **HTMX,
    )
    assert response.status_code == 200
    small.refresh_from_db()
    assert small.policy == {}
