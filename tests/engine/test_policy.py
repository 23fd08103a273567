"""Policy: defaults from the reference designs, validation naming the field, JSON round trip."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from ctxhub.governance import Policy


def test_defaults_follow_the_reference_designs() -> None:
    policy = Policy()
    assert policy.safety_margin == 0.10
    assert (policy.tool_output.limit, policy.tool_output.strategy) == (8_000, "head")
    assert policy.tool_output.scope == "older"
    assert (policy.masking.keep_first, policy.masking.keep_last) == (2, 5)
    assert policy.eviction.threshold_tokens == 20_000
    assert policy.text.limit == 20_000
    assert policy.window.protected_tools == ("manage_todo_list",)
    assert policy.window.notice.startswith("[conversation truncated — ")
    assert policy.dangling_call_text == "Interrupted by user."


def test_json_round_trip() -> None:
    policy = Policy.model_validate(
        {
            "context_window": 64_000,
            "tool_output": {"limit": 500, "unit": "chars", "strategy": "both"},
            "window": {
                "triggers": [{"kind": "messages", "value": 80}, {"kind": "fraction", "value": 0.8}],
                "keep": {"kind": "messages", "value": 40},
            },
        }
    )
    stored = json.loads(json.dumps(policy.model_dump(mode="json")))
    assert Policy.model_validate(stored) == policy


def test_overrides_are_what_differs_from_the_defaults_and_read_back_whole() -> None:
    assert Policy().overrides() == {}
    # A value set to its default is not an override; nested knobs keep their nesting.
    submitted = {
        "context_window": 64_000,
        "safety_margin": 0.10,
        "tool_output": {"limit": 500, "strategy": "head"},
        "window": {"keep": {"kind": "messages", "value": 40}},
    }
    policy = Policy.model_validate(submitted)
    assert policy.overrides() == {
        "context_window": 64_000,
        "tool_output": {"limit": 500},
        "window": {"keep": {"kind": "messages", "value": 40}},
    }
    assert Policy.model_validate(policy.overrides()) == policy


def test_partial_dict_takes_defaults_for_the_rest() -> None:
    policy = Policy.model_validate({"masking": {"keep_last": 1}})
    assert policy.masking.keep_last == 1
    assert policy.masking.keep_first == 2
    assert policy.tool_output == Policy().tool_output


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"tool_output": {"limit": 10}}, "tool_output", "at least 64 tokens"),
        ({"text": {"limit": 100, "unit": "chars"}}, "text", "at least 256 chars"),
        ({"safety_margin": 0.7}, "safety_margin", "less than 0.5"),
        ({"masking": {"keep_first": -1}}, "masking.keep_first", "greater than or equal"),
        (
            {
                "window": {
                    "triggers": [{"kind": "messages", "value": 10}],
                    "keep": {"kind": "messages", "value": 20},
                }
            },
            "window",
            "keep (messages 20) must be smaller",
        ),
        ({"window": {"keep": {"kind": "fraction", "value": 1.5}}}, "window.keep", "fraction"),
        ({"window": {"notice": "omitted some"}}, "window", "{omitted}"),
        ({"eviction": {"threshold_tokens": 100}}, "eviction", "preview_chars"),
        ({"context_window": 8000}, "reserved_output_tokens", "no room for history"),
        ({"surprise": 1}, "surprise", "Extra inputs"),
    ],
)
def test_impossible_combinations_are_refused_naming_the_field(
    data: dict[str, object], field: str, words: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        Policy.model_validate(data)
    message = str(caught.value)
    assert field in message
    assert words in message


def test_zero_or_none_disables() -> None:
    policy = Policy.model_validate(
        {
            "tool_output": {"limit": 0},
            "eviction": {"threshold_tokens": None},
            "masking": {"apply": "never"},
            "history_cap_tokens": 0,
        }
    )
    assert not policy.tool_output.enabled
    assert not policy.eviction.enabled
    assert not policy.masking.enabled
    # Keeping no result masks every older one.
    assert Policy.model_validate({"masking": {"keep_first": 0, "keep_last": 0}}).masking.enabled
