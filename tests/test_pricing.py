"""Pricing: genai-prices' own numbers, broken down, for models as the project names them."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from genai_prices import Usage, calc_price, data_snapshot

from ctxhub.pricing import (
    NO_COST,
    Price,
    TokenUsage,
    cache_weighting,
    model_ref,
    price,
    price_requests,
)

AT = datetime(2026, 11, 1, 12, tzinfo=UTC)
MTOK = Decimal(1_000_000)


def _usage(
    inputs: int, reads: int = 0, writes: int = 0, outputs: int = 0, hour: int = 0
) -> TokenUsage:
    return TokenUsage(
        input_tokens=inputs,
        cache_read_tokens=reads,
        cache_write_tokens=writes,
        output_tokens=outputs,
        cache_write_1h_tokens=hour,
    )


def _theirs(usage: TokenUsage, name: str, provider: str) -> Any:
    """genai-prices' own calculation of the same usage."""
    return calc_price(
        Usage(
            input_tokens=usage.input_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            cache_write_1h_tokens=usage.cache_write_1h_tokens,
            output_tokens=usage.output_tokens,
        ),
        name,
        provider_id=provider,
        genai_request_timestamp=AT,
    )


MODELS = [
    ("openai:gpt-4o", "gpt-4o", "openai"),
    ("openai:gpt-5", "gpt-5", "openai"),
    ("anthropic:claude-sonnet-4-5", "claude-sonnet-4-5", "anthropic"),
    ("anthropic:claude-haiku-4-5", "claude-haiku-4-5", "anthropic"),
    ("google-gla:gemini-2.5-pro", "gemini-2.5-pro", "google"),
    ("google-gla:gemini-2.5-flash", "gemini-2.5-flash", "google"),
]
USAGES = [
    _usage(1_200, outputs=80),
    _usage(12_000, reads=10_000, writes=1_000, outputs=300),
    _usage(250_000, reads=180_000, writes=20_000, outputs=4_000),  # past a 200k tier
    _usage(50_000, writes=30_000, hour=10_000, outputs=1),
]


class TestPrice:
    @pytest.mark.parametrize(("model", "name", "provider"), MODELS)
    @pytest.mark.parametrize("usage", USAGES, ids=lambda u: f"in{u.input_tokens}")
    def test_it_is_genai_prices_own_price(
        self, model: str, name: str, provider: str, usage: TokenUsage
    ) -> None:
        ours = price(model, usage, at=AT)
        theirs = _theirs(usage, name, provider)
        assert ours is not None
        assert ours.total == theirs.total_price
        assert ours.output == theirs.output_price
        assert ours.input + ours.cache_read + ours.cache_write == theirs.input_price
        assert ours.other == 0
        assert ours.currency == "USD"

    def test_a_response_s_own_model_and_provider_price_the_same(self) -> None:
        usage = _usage(12_000, reads=10_000, outputs=300)
        assert price("gpt-4o-2024-08-06", usage, provider="openai", at=AT) == price(
            "openai:gpt-4o-2024-08-06", usage, at=AT
        )

    @pytest.mark.parametrize(
        "model",
        ["offline:demo", "offline:extractive", "ollama:llama3", "openai:no-such-model", "", "x:"],
    )
    def test_a_model_genai_prices_does_not_know_has_no_price(self, model: str) -> None:
        assert price(model, _usage(1_000, outputs=10), at=AT) is None
        assert price_requests(model, [(_usage(1_000), AT)]) is None
        assert cache_weighting(model, [(1_000, 0)], at=AT) is None

    def test_anthropic_prices_cache_reads_and_writes_apart_from_input(self) -> None:
        model = "anthropic:claude-sonnet-4-5"  # $3 input, $0.30 reads, $3.75 writes per MTok
        plain, reads, writes, hour = (
            price(model, usage, at=AT)
            for usage in (
                _usage(10_000),
                _usage(10_000, reads=10_000),
                _usage(10_000, writes=10_000),
                _usage(10_000, writes=10_000, hour=10_000),
            )
        )
        assert plain is not None
        assert reads is not None
        assert writes is not None
        assert hour is not None
        assert (plain.input, plain.cache_read, plain.cache_write) == (Decimal("0.03"), 0, 0)
        assert (reads.input, reads.cache_read, reads.cache_write) == (0, Decimal("0.003"), 0)
        assert (writes.input, writes.cache_read, writes.cache_write) == (0, 0, Decimal("0.0375"))
        assert hour.cache_write == Decimal("0.06")  # kept an hour: $6 per MTok
        assert reads.total < plain.total < writes.total < hour.total

    def test_without_a_cache_write_price_writes_cost_plain_input(self) -> None:
        model = "openai:gpt-4o"  # $2.50 input, $1.25 reads, no write price
        found = price(model, _usage(10_000, reads=4_000, writes=6_000), at=AT)
        assert found is not None
        assert found.input == 0
        assert found.cache_read == Decimal(4_000) * Decimal("1.25") / MTOK
        assert found.cache_write == Decimal(6_000) * Decimal("2.5") / MTOK

    def test_counts_that_do_not_add_up_are_refused(self) -> None:
        with pytest.raises(ValueError, match="part of the input"):
            _usage(100, reads=80, writes=30)
        with pytest.raises(ValueError, match="negative"):
            _usage(-1)
        with pytest.raises(ValueError, match="one-hour"):
            _usage(100, writes=10, hour=20)


class TestModelRef:
    def test_it_splits_the_provider_off_once(self) -> None:
        assert model_ref("openai:gpt-4o") == ("openai", "gpt-4o")
        assert model_ref("bedrock:us.anthropic.claude-sonnet-4-5-20250929-v1:0") == (
            "bedrock",
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        )
        assert model_ref("gpt-4o") == (None, "gpt-4o")

    def test_a_name_without_provider_is_matched_by_name(self) -> None:
        assert price("gpt-4o", _usage(1_000), at=AT) == price("openai:gpt-4o", _usage(1_000), at=AT)


class TestPriceRequests:
    def test_it_is_the_sum_of_each_request_s_price_exactly(self) -> None:
        model = "anthropic:claude-sonnet-4-5"  # tiered: past 200k input tokens, dearer
        requests = [
            (_usage(1_000 + 7 * i, reads=i * 3, writes=11, outputs=13 + i), AT + timedelta(hours=i))
            for i in range(40)
        ] + [(_usage(200_001 + i, reads=150_000, writes=i, outputs=7), AT) for i in range(7)]
        total = price_requests(model, requests)
        each = [price(model, usage, at=at) for usage, at in requests]
        assert None not in each
        assert total == sum((p for p in each if p is not None), NO_COST)

    def test_a_mean_whose_parts_round_past_its_whole_is_still_priced(self) -> None:
        """Divided apart, a group's mean cache read and write could exceed its mean input in
        the last digit, which genai-prices refuses (a session page failed on it)."""
        sent = [(29_914, 20_669), (68_711, 59_093), (30_254, 17_167), (86_001, 4_023)]
        sent += [(52_760, 44_230), (76_477, 42_106)]
        model = "anthropic:claude-sonnet-4-5"
        requests = [
            (_usage(tokens, reads=prefix, writes=tokens - prefix, outputs=0), AT)
            for tokens, prefix in sent
        ]
        each = [price(model, usage, at=at) for usage, at in requests]
        assert None not in each
        assert price_requests(model, requests) == sum((p for p in each if p is not None), NO_COST)
        found = cache_weighting(model, sent, at=AT)
        assert found is not None
        assert found.requests == 6

    def test_no_requests_cost_nothing(self) -> None:
        assert price_requests("openai:gpt-4o", []) == NO_COST

    def test_prices_add_up_by_part(self) -> None:
        one = Price(Decimal(1), Decimal(2), Decimal(3), Decimal(4), Decimal(11))
        assert one + one == Price(Decimal(2), Decimal(4), Decimal(6), Decimal(8), Decimal(22))
        assert (one + one).other == Decimal(2)


class TestCacheWeighting:
    def test_a_growing_prefix_read_from_the_cache_costs_a_share_of_uncached_input(self) -> None:
        # Claude Sonnet 4.5: $3 input, $0.30 cache reads, $3.75 cache writes per MTok.
        # In millionths of a dollar:
        # 1,000 sent, none cached: 1,000 written              = 3,750
        # 1,500 sent, 1,000 cached: 1,000 read, 500 written   = 300 + 1,875 = 2,175
        # 2,000 sent, 1,500 cached: 1,500 read, 500 written   = 450 + 1,875 = 2,325
        # cached 8,250 against 4,500 tokens at $3, 13,500 uncached: 11/18.
        found = cache_weighting(
            "anthropic:claude-sonnet-4-5", [(1_000, 0), (1_500, 1_000), (2_000, 1_500)], at=AT
        )
        assert found is not None
        assert found.cached.total == Decimal(8_250) / MTOK
        assert found.uncached.total == Decimal(13_500) / MTOK
        assert found.ratio == Decimal(8_250) / Decimal(13_500)
        assert found.saved == Decimal(5_250) / MTOK
        assert found.requests == 3

    def test_without_a_write_price_the_new_tokens_cost_plain_input(self) -> None:
        # GPT-4o: $2.50 input, $1.25 cache reads; the tokens not read cost plain input.
        found = cache_weighting("openai:gpt-4o", [(1_000, 0), (2_000, 1_000)], at=AT)
        assert found is not None
        assert found.cached.total == (Decimal(2_000) * Decimal("2.5") + 1_250) / MTOK
        assert found.uncached.total == Decimal(3_000) * Decimal("2.5") / MTOK
        assert found.ratio == Decimal(6_250) / Decimal(7_500)


class TestNoNetwork:
    def test_pricing_opens_no_connection(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def refuse(*args: object) -> None:
            raise AssertionError("pricing tried the network")

        monkeypatch.setattr(socket.socket, "connect", refuse)
        monkeypatch.setattr(socket, "create_connection", refuse)
        assert price("openai:gpt-4o", _usage(1_000), at=AT) is not None

    def test_an_auto_update_elsewhere_in_the_process_changes_nothing(self) -> None:
        before = price("openai:gpt-4o", _usage(1_000), at=AT)
        # What genai_prices.UpdatePrices installs once it has fetched: here, no prices at all.
        data_snapshot.set_custom_snapshot(
            data_snapshot.DataSnapshot(providers=[], from_auto_update=True)
        )
        try:
            with pytest.raises(LookupError):
                calc_price(Usage(input_tokens=1_000), "gpt-4o", provider_id="openai")
            assert price("openai:gpt-4o", _usage(1_000), at=AT) == before
        finally:
            data_snapshot.set_custom_snapshot(None)
