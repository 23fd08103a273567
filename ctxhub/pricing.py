"""What model usage costs in money, from the price data genai-prices ships (no network).

Models are named as the project names them, ``"provider:name"`` (``"openai:gpt-4o"``,
``"anthropic:claude-sonnet-4-5"``, ``"google-gla:gemini-2.5-pro"``), or by a response's own
``model_name`` with its ``provider_name``. A provider genai-prices does not know (``offline``,
``ollama``) or a model it does not list has no price: None, never a cost of 0. A name without a
provider is matched by genai-prices on the name alone.

Token counts follow pydantic-ai's ``RequestUsage`` and genai-prices' ``Usage``: ``input_tokens``
is every input token, those read from and written to the cache included; cache reads and writes
are priced at the provider's own rates where it has them, else as plain input (as genai-prices
prices them).

The prices are genai-prices' bundled snapshot, held here: nothing in this module fetches, and an
update another part of the process may start (``genai_prices.UpdatePrices``, pydantic-ai's
``update_in_background()``) never changes what it computes.

::

    price("anthropic:claude-sonnet-4-5", TokenUsage(input_tokens=12_000, cache_read_tokens=10_000))
    price_requests("openai:gpt-4o", [(usage, response.timestamp) for ...])   # a whole session
    cache_weighting("anthropic:claude-sonnet-4-5", [(sent, unchanged_prefix), ...]).ratio
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import ROUND_FLOOR, Decimal, localcontext
from functools import cache
from typing import TYPE_CHECKING

from genai_prices import Usage
from genai_prices import __version__ as _genai_prices_version
from genai_prices.data_snapshot import DataSnapshot
from genai_prices.types import ModelPrice, TieredPrices, calc_unit_price

if TYPE_CHECKING:
    from genai_prices.types import ModelInfo, Provider

PRICES_VERSION: str = _genai_prices_version
"""The release of genai-prices whose bundled data every price here comes from."""
USD = "USD"
ZERO = Decimal(0)
# genai-prices prices tokens per million (``input_mtok``, ``cache_read_mtok``, ...).
_PER_MILLION = 1_000_000
# The sum of many requests is computed from their mean (see ``price_requests``), which Decimal
# rounds at 28 digits; a request's exact price has far fewer decimals than this, so rounding the
# sum here gives back the exact sum.
_EXACT = Decimal("1e-15")
_MEAN_QUANTUM = Decimal("1e-20")
"""The finest a group's mean request counts tokens: far below what any price can tell."""


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """The tokens of one model request, as its provider reported them."""

    input_tokens: int = 0
    """Every input token, cached ones included."""
    cache_read_tokens: int = 0
    """Input tokens read from the provider's cache (part of ``input_tokens``)."""
    cache_write_tokens: int = 0
    """Input tokens written to the provider's cache (part of ``input_tokens``)."""
    output_tokens: int = 0
    cache_write_1h_tokens: int = 0
    """Cache writes kept for an hour (part of ``cache_write_tokens``), dearer at Anthropic."""

    def __post_init__(self) -> None:
        counts = (
            self.input_tokens,
            self.cache_read_tokens,
            self.cache_write_tokens,
            self.output_tokens,
            self.cache_write_1h_tokens,
        )
        if min(counts) < 0:
            raise ValueError(f"token counts cannot be negative: {self}")
        if self.cache_read_tokens + self.cache_write_tokens > self.input_tokens:
            raise ValueError(f"cache reads and writes are part of the input tokens: {self}")
        if self.cache_write_1h_tokens > self.cache_write_tokens:
            raise ValueError(f"one-hour cache writes are part of the cache writes: {self}")


@dataclass(frozen=True, slots=True)
class Price:
    """A price in ``currency``, broken down; ``total`` also holds any fee per request."""

    input: Decimal
    """Input tokens neither read from nor written to the cache."""
    cache_read: Decimal
    cache_write: Decimal
    output: Decimal
    total: Decimal
    currency: str = USD

    @property
    def other(self) -> Decimal:
        """What the total holds beyond the tokens (a fee per request, where there is one)."""
        return self.total - self.input - self.cache_read - self.cache_write - self.output

    def __add__(self, other: Price) -> Price:
        if other.currency != self.currency:
            raise ValueError(f"cannot add {other.currency} to {self.currency}")
        return Price(
            input=self.input + other.input,
            cache_read=self.cache_read + other.cache_read,
            cache_write=self.cache_write + other.cache_write,
            output=self.output + other.output,
            total=self.total + other.total,
            currency=self.currency,
        )


NO_COST = Price(ZERO, ZERO, ZERO, ZERO, ZERO)


def model_ref(model: str) -> tuple[str | None, str]:
    """The provider and the model's name in a model string: ``"openai:gpt-4o"`` → ``("openai",
    "gpt-4o")``; the name keeps any later colon (``"bedrock:…-v1:0"``); no provider: None."""
    provider, colon, name = model.partition(":")
    return (provider.strip() or None, name.strip()) if colon else (None, model.strip())


def price(
    model: str, usage: TokenUsage, *, provider: str | None = None, at: datetime | None = None
) -> Price | None:
    """What one request of ``usage`` cost (None: genai-prices has no price for the model).

    ``provider`` given, ``model`` is the bare name the provider reported (a response's
    ``model_name``); ``at`` is when the request was made, for prices that changed (now if None).
    """
    found = _lookup(model, provider)
    if found is None:
        return None
    return _price(found, _counts(usage), at or datetime.now(UTC))


def price_requests(
    model: str,
    requests: Iterable[tuple[TokenUsage, datetime | None]],
    *,
    provider: str | None = None,
) -> Price | None:
    """The sum of ``price`` over many requests of one model, each at its own time (now if None).

    Exact and fast for a session of thousands of requests: requests that genai-prices prices at
    the same rates (the same dated price and the same tier of input tokens) are priced together,
    as their mean request times their number, which is the sum of their prices because a price
    is linear in the tokens at given rates and the mean stays in the tier.
    """
    found = _lookup(model, provider)
    if found is None:
        return None
    info = found[1]
    now = datetime.now(UTC)
    tiers: dict[int, tuple[int, ...]] = {}
    groups: dict[tuple[int, int], _Group] = {}
    for usage, at in requests:
        when = at or now
        period = _period(info, when)
        if period not in tiers:
            tiers[period] = _tier_starts(info.get_prices(when))
        tier = sum(usage.input_tokens > start for start in tiers[period])
        groups.setdefault((period, tier), _Group(when)).add(usage)
    total = NO_COST
    for group in groups.values():
        total += group.price(found)
    return total


@dataclass(frozen=True, slots=True)
class CacheWeighting:
    """The input of a run of requests priced with the provider's cache, and all uncached."""

    cached: Price
    uncached: Price
    requests: int

    @property
    def ratio(self) -> Decimal | None:
        """What the cache makes the input cost, as a share of the uncached cost."""
        return self.cached.total / self.uncached.total if self.uncached.total else None

    @property
    def saved(self) -> Decimal:
        return self.uncached.total - self.cached.total


def cache_weighting(
    model: str,
    requests: Iterable[tuple[int, int]],
    *,
    provider: str | None = None,
    at: datetime | None = None,
) -> CacheWeighting | None:
    """The input cost of a session's requests, each ``(sent, prefix)``: ``sent`` input tokens of
    which the unchanged ``prefix`` is read from the cache and the rest written to it (billed at
    the provider's cache-write price where it has one, else as plain input), against the same
    tokens all uncached. None when the model has no price."""
    sent = list(requests)
    when = at or datetime.now(UTC)
    cached = price_requests(
        model,
        (
            (
                TokenUsage(
                    input_tokens=tokens,
                    cache_read_tokens=prefix,
                    cache_write_tokens=tokens - prefix,
                ),
                when,
            )
            for tokens, prefix in sent
        ),
        provider=provider,
    )
    uncached = price_requests(
        model, ((TokenUsage(input_tokens=tokens), when) for tokens, _ in sent), provider=provider
    )
    if cached is None or uncached is None:
        return None
    return CacheWeighting(cached=cached, uncached=uncached, requests=len(sent))


# --- genai-prices ---------------------------------------------------------------------------

_Found = tuple["Provider", "ModelInfo"]
_Counts = Mapping[str, int | Decimal]
_KEYS = (
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_1h_tokens",
    "output_tokens",
)


@cache
def _snapshot() -> DataSnapshot:
    """genai-prices' bundled prices (``get_snapshot()`` would follow an auto-update). Loaded on
    first use: the data takes a second to import."""
    from genai_prices.data import providers

    return DataSnapshot(providers=providers, from_auto_update=False)


def _lookup(model: str, provider: str | None) -> _Found | None:
    provider_id, name = (provider, model) if provider else model_ref(model)
    if not name:
        return None
    try:
        return _snapshot().find_provider_model(name, None, provider_id, None)
    except LookupError:  # genai-prices knows neither the provider nor the model
        return None


def _counts(usage: TokenUsage) -> dict[str, int]:
    return {key: getattr(usage, key) for key in _KEYS}


def _price(found: _Found, counts: _Counts, at: datetime) -> Price:
    """genai-prices' price of one request, with its input split into the cache's parts at the
    rates it used (the rest of its input price is the uncached input)."""
    provider, info = found
    calculation = info.calc_price(Usage(**counts), provider, genai_request_timestamp=at)
    rates = calculation.model_price
    total_input = counts["input_tokens"]

    def cost(tokens: int | Decimal, *keys: str) -> Decimal:
        # A cache rate the model lacks leaves those tokens in the broader unit: cache writes
        # kept an hour → cache writes → input.
        rate = next((r for k in keys if (r := getattr(rates, k)) is not None), None)
        return calc_unit_price(rate, tokens, total_input, _PER_MILLION)

    one_hour = counts["cache_write_1h_tokens"]
    cache_read = cost(counts["cache_read_tokens"], "cache_read_mtok", "input_mtok")
    hour_writes = cost(one_hour, "cache_write_1h_mtok", "cache_write_mtok", "input_mtok")
    other_writes = cost(counts["cache_write_tokens"] - one_hour, "cache_write_mtok", "input_mtok")
    cache_write = hour_writes + other_writes
    return Price(
        input=calculation.input_price - cache_read - cache_write,
        cache_read=cache_read,
        cache_write=cache_write,
        output=calculation.output_price,
        total=calculation.total_price,
    )


def _period(info: ModelInfo, at: datetime) -> int:
    """Which of the model's dated prices genai-prices uses at ``at`` (0 when it has one)."""
    if isinstance(info.prices, ModelPrice):
        return 0
    chosen = info.get_prices(at)
    return next(i for i, dated in enumerate(info.prices) if dated.prices is chosen)


def _tier_starts(rates: ModelPrice) -> tuple[int, ...]:
    """The input-token counts past which a rate of the model changes (a request's tier is how
    many it is past)."""
    return tuple(
        sorted(
            {
                tier.start
                for rate in vars(rates).values()
                if isinstance(rate, TieredPrices)
                for tier in rate.tiers
            }
        )
    )


@dataclass(slots=True)
class _Group:
    """Requests priced at the same rates, summed."""

    at: datetime
    requests: int = 0
    sums: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_KEYS, 0))

    def add(self, usage: TokenUsage) -> None:
        self.requests += 1
        for key in _KEYS:
            self.sums[key] += getattr(usage, key)

    def price(self, found: _Found) -> Price:
        n = self.requests
        if n == 1:
            return _price(found, self.sums, self.at)
        with localcontext() as exact:
            # The mean's parts and the sums genai-prices makes of them stay exact.
            exact.prec = 60
            mean = _price(found, self._means(), self.at)
        return Price(
            input=(mean.input * n).quantize(_EXACT),
            cache_read=(mean.cache_read * n).quantize(_EXACT),
            cache_write=(mean.cache_write * n).quantize(_EXACT),
            output=(mean.output * n).quantize(_EXACT),
            total=(mean.total * n).quantize(_EXACT),
            currency=mean.currency,
        )

    def _means(self) -> dict[str, Decimal]:
        """The mean request's counts: each finest part rounded down to ``_MEAN_QUANTUM`` tokens,
        and what holds parts made of them, so that no part exceeds its whole by a rounding
        (genai-prices refuses a cache read over the input; divided apart, 20,669 / 6 read and
        29,914 / 6 input could)."""
        sums = self.sums

        def mean(total: int) -> Decimal:
            return (Decimal(total) / self.requests).quantize(_MEAN_QUANTUM, rounding=ROUND_FLOOR)

        hour = mean(sums["cache_write_1h_tokens"])
        write = hour + mean(sums["cache_write_tokens"] - sums["cache_write_1h_tokens"])
        read = mean(sums["cache_read_tokens"])
        uncached = sums["input_tokens"] - sums["cache_read_tokens"] - sums["cache_write_tokens"]
        return {
            "input_tokens": read + write + mean(uncached),
            "cache_read_tokens": read,
            "cache_write_tokens": write,
            "cache_write_1h_tokens": hour,
            "output_tokens": mean(sums["output_tokens"]),
        }
