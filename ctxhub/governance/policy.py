"""Policy: every knob of governance, with the reference designs' defaults, validated.

The hub stores ``Policy.model_dump(mode="json")`` in a JSON column and rebuilds it with
``Policy.model_validate``; a partial dict validates with defaults for the rest. An impossible
combination is refused with a message naming the field.

Defaults and where they come from:

* 10 % safety margin, 8,000-token tool results truncated ``head``, mask keeping the first 2 and
  last 5 results: Duragent (001).
* Tool outputs trimmed in older messages only, dangling calls answered "Interrupted by user.",
  the head being the first run: co-cli (000).
* Tokens as the truncation unit, ``manage_todo_list`` protected, user text capped at 20,000
  tokens: AgenticLoop RFC 005 (002).
* Eviction of outputs above 20,000 tokens: pydantic-deep (004).

Deliberate departures: Duragent caps history at 20,000 tokens to leave room for the tool loop
it does not govern; ctxhub governs between tool iterations too, so the cap would only throw
context away and is off by default. Masking is applied only when over budget (Duragent masks
always) because a masked result is lost to the model while the budget would have held it. The
sliding window has no trigger besides the budget by default: it drops context without
summarising it, so it should only do so when it must.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

Unit = Literal["tokens", "chars"]
Strategy = Literal["head", "tail", "both"]
Scope = Literal["older", "all"]
Apply = Literal["always", "over_budget", "never"]

# A truncation indicator alone takes about 30 tokens; a limit must leave room for content.
MIN_TRUNCATION_TOKENS = 64
MIN_TRUNCATION_CHARS = 256


LARGEST = 2**53
"""The largest number any knob takes: counts of tokens, lines or messages are far below it,
and a number as large as JSON can write (400 digits) would overflow the arithmetic."""


class _Model(BaseModel):
    # No infinity or NaN either: JSON has neither, but Python's parser reads 1e400 as infinity.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*")
    @classmethod
    def _not_huge(cls, value: Any) -> Any:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if number and abs(value) > LARGEST:
            raise ValueError(f"at most {LARGEST}")
        return value


class Truncation(_Model):
    """Truncation of long content: a limit, a unit, which end(s) to keep, and where it applies."""

    limit: int | None = Field(
        default=8_000,
        description="Longer content is cut down to this size; empty or 0 never cuts.",
    )
    unit: Unit = Field(
        default="tokens", description="Whether the limit counts tokens or characters."
    )
    strategy: Strategy = Field(
        default="head",
        description=(
            "Which part of cut content is kept: the start (head), the end (tail) or both ends."
        ),
    )
    scope: Scope = Field(
        default="older",
        description=(
            "'older' cuts only before the current turn, so what the model is working on now "
            "stays whole; 'all' cuts everything as soon as it is in the history."
        ),
    )
    line_count: bool = Field(
        default=True, description="Say how many lines the original had, beside the cut."
    )

    @property
    def enabled(self) -> bool:
        """Whether this truncation does anything."""
        return bool(self.limit)

    @model_validator(mode="after")
    def _room_for_content(self) -> Self:
        if not self.limit:
            return self
        if self.limit < 0:
            raise ValueError("limit must be positive (or 0 / None to disable)")
        minimum = MIN_TRUNCATION_TOKENS if self.unit == "tokens" else MIN_TRUNCATION_CHARS
        if self.limit < minimum:
            raise ValueError(
                f"limit must be at least {minimum} {self.unit}: the truncation indicator alone "
                "takes most of that"
            )
        return self


class Eviction(_Model):
    """Large tool outputs replaced by a preview and a reference to the full text in storage."""

    threshold_tokens: int | None = Field(
        default=20_000,
        description=(
            "Outputs larger than this are stored aside and replaced by a preview; empty or 0 "
            "never evicts."
        ),
    )
    preview_lines: int = Field(
        default=10, ge=0, description="At most this many lines of the output are previewed."
    )
    preview_chars: int = Field(
        default=2_000,
        ge=0,
        description="At most this many characters are previewed; no more than the threshold.",
    )
    scope: Scope = Field(
        default="all",
        description="'all' evicts as soon as the output arrives; 'older' only before this turn.",
    )
    tool_name: str = Field(
        default="read_evicted_output",
        min_length=1,
        description="The tool the preview tells the model to call to read the full output.",
    )

    @property
    def enabled(self) -> bool:
        """Whether eviction does anything."""
        return bool(self.threshold_tokens)

    @model_validator(mode="after")
    def _preview_smaller_than_threshold(self) -> Self:
        if self.threshold_tokens is not None and self.threshold_tokens < 0:
            raise ValueError("threshold_tokens must be positive (or 0 / None to disable)")
        if self.threshold_tokens and self.preview_chars > self.threshold_tokens:
            raise ValueError(
                "preview_chars must not exceed threshold_tokens: a preview larger than the "
                "output it stands for would be evicted again"
            )
        return self


class Masking(_Model):
    """Observation masking: keep the first N and last M tool results, mask the middle."""

    keep_first: int = Field(
        default=2, ge=0, description="The oldest tool results kept as they are."
    )
    keep_last: int = Field(
        default=5,
        ge=0,
        description=(
            "0 masks every older result: the results of the newest exchange (what the model "
            "just asked for) are never masked."
        ),
    )
    apply: Apply = Field(
        default="over_budget",
        description="When to mask: always, only when the history is over budget, or never.",
    )
    inputs: bool = Field(
        default=False,
        description=(
            "Also mask the long argument values of the calls whose results are masked (a file "
            "written in full goes out once); keys and short values such as paths stay."
        ),
    )

    @property
    def enabled(self) -> bool:
        return self.apply != "never"


Name = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class Dedupe(_Model):
    """Repeated reads: an older copy of an output the same tool returned again is replaced by a
    reference to the newest copy (which is sent whole), losing nothing."""

    enabled: bool = Field(
        default=True,
        description=(
            "An older copy of an output the same tool returned again becomes a short "
            "reference to the newest copy, which is sent whole: nothing is lost."
        ),
    )
    min_tokens: int = Field(
        default=200, ge=0, description="Outputs of at most this many tokens are left alone."
    )
    keys: dict[Name, Annotated[tuple[Name, ...], Field(min_length=1, max_length=10)]] = Field(
        default_factory=dict,
        max_length=100,
        description=(
            "Tools whose reads of one thing supersede each other, by the arguments naming it: "
            '{"read_file": ["path"]} makes a re-read of a path replace the older read, even '
            "when the file changed in between."
        ),
    )


class Threshold(_Model):
    """A size: a number of messages, of tokens, or a fraction of the context window."""

    kind: Literal["messages", "tokens", "fraction"]
    value: float = Field(gt=0)

    @model_validator(mode="after")
    def _valid_value(self) -> Self:
        if self.kind == "fraction" and self.value > 1:
            raise ValueError("a fraction must be in (0, 1]")
        if self.kind != "fraction" and self.value != int(self.value):
            raise ValueError(f"a {self.kind} count must be a whole number")
        return self

    def resolve(self, window_tokens: int) -> tuple[Literal["messages", "tokens"], int]:
        """This size in messages or tokens, fractions resolved against the context window."""
        if self.kind == "fraction":
            return "tokens", int(self.value * window_tokens)
        return self.kind, int(self.value)


DEFAULT_NOTICE = "[conversation truncated — {omitted} older messages omitted]"


class Window(_Model):
    """Sliding window: drop the oldest middle messages, keeping head, pins and a recent tail."""

    enabled: bool = Field(
        default=True,
        description="Drop the oldest middle messages when a trigger fires or over budget.",
    )
    triggers: tuple[Threshold, ...] = Field(
        default=(),
        description=(
            "Any trigger firing windows the history; exceeding the budget always does. A "
            "message trigger counts every message sent; a token or fraction trigger measures "
            "the whole request: system prompt, instructions, tool definitions, head and pins "
            "included."
        ),
    )
    keep: Threshold | None = Field(
        default=None,
        description=(
            "How much recent history the window keeps: the tail's messages or tokens, the "
            "current turn's request counted (pins and system prompts are kept like the head, "
            "uncounted); empty fills what the window aims at."
        ),
    )
    keep_head: bool = Field(
        default=True,
        description=(
            "Keep the start of the session (the first request and its work, up to the first "
            "answer, or the size set below) when the window drops messages."
        ),
    )
    head: Threshold | None = Field(
        default=None,
        description=(
            "How much of the start the head keeps: its first messages or tokens (closed over "
            "their tool calls' results); empty keeps the first run, up to the first answer."
        ),
    )
    protected_tools: tuple[str, ...] = Field(
        default=("manage_todo_list",),
        description=(
            "Tools whose calls and results are never dropped, such as a to-do list the agent "
            "keeps up to date."
        ),
    )
    keep_turn_aborted: bool = Field(
        default=True, description="Keep messages carrying a turn-aborted marker."
    )
    notice: str | None = Field(
        default=DEFAULT_NOTICE,
        description=(
            "The message put where the window cut, '{omitted}' standing for the count; empty "
            "cuts silently."
        ),
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.notice is not None and "{omitted}" not in self.notice:
            raise ValueError("notice must contain '{omitted}'")
        if self.keep is not None:
            for trigger in self.triggers:
                if trigger.kind == self.keep.kind and trigger.value <= self.keep.value:
                    raise ValueError(
                        f"keep ({self.keep.kind} {self.keep.value:g}) must be smaller than "
                        f"every trigger of the same kind ({trigger.value:g}), or windowing "
                        "would fire again on its own output"
                    )
        return self


class Hysteresis(_Model):
    """Governing a session, not a request: act at a high-water mark, cut down to a low-water
    mark, and between actions send what was sent before with the new messages appended, so
    the provider's prompt cache (cached input at a tenth of the price) keeps the prefix."""

    enabled: bool = Field(
        default=True,
        description="Off: every request is governed on its own, filling the budget.",
    )
    high_water: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description=(
            "Share of the history budget at which the governor acts. At 100 %, the default, it "
            "acts when the next request would pass the budget: an action costs the session "
            "the same whenever it is taken, and every request before it reads the cache."
        ),
    )
    low_water: float = Field(
        default=0.4,
        gt=0,
        lt=1,
        description="Share of the history budget an action cuts the history down to.",
    )
    min_reclaim_tokens: int = Field(
        default=2_000,
        ge=0,
        description=(
            "Below the budget, an action that would free fewer tokens is not taken: it would "
            "rewrite the cached prefix for less than the cache write costs."
        ),
    )

    @model_validator(mode="after")
    def _marks_in_order(self) -> Self:
        if self.low_water >= self.high_water:
            raise ValueError(
                f"low_water ({self.low_water:g}) must be below high_water "
                f"({self.high_water:g}), or every request would act"
            )
        return self


class CompactionPolicy(_Model):
    """When a hub summarises a stored session unasked: before the next request must drop
    anything (the soft threshold), and once the window has left out or masked a stretch of
    messages no summary covers, so the model reads a summary of them rather than a gap."""

    auto: bool = Field(
        default=True,
        description=(
            "Compact in the background: past the soft threshold, and when the model stops "
            "seeing a stretch of messages no summary covers."
        ),
    )
    soft_threshold: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description=(
            "Share of the history budget the history may reach before a background "
            "compaction starts; below 100 % so it runs before governance must drop."
        ),
    )
    hidden_messages: int = Field(
        default=20,
        ge=1,
        le=LARGEST,
        description=(
            "Compact once the next request leaves out this many messages no summary covers "
            "(the window dropped them)."
        ),
    )
    masked_share: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description=("Or once it masks this share of the tool results no summary covers."),
    )
    cache_ttl_seconds: int = Field(
        default=300,
        ge=0,
        le=LARGEST,
        description=(
            "How long the provider keeps a prompt cache (Anthropic's and OpenAI's default: 5 "
            "minutes). A compaction for what the window hid waits until the Governor acts "
            "anyway or the cache has gone cold, so rewriting the request costs nothing more."
        ),
    )
    min_interval_seconds: int = Field(
        default=600,
        ge=0,
        le=LARGEST,
        description="At most one compaction for what the window hid in this many seconds.",
    )


class Awareness(_Model):
    """What the model is told about its own governed context, so it can work with it."""

    recall: bool = Field(
        default=True,
        description=(
            "Give the model a tool to search what governance no longer sends in full "
            "(masked, cut, evicted, dropped and summarised messages); notices and summaries "
            "name it."
        ),
    )
    recall_tool_name: str = Field(
        default="recall",
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z_][A-Za-z0-9_-]*$",
        description="The name of that tool, as the model calls it.",
    )
    budget_note: bool = Field(
        default=False,
        description=(
            "Tell the model its window, the tokens in use and the governor's next action in a "
            "short note written where the conversation stands when the governor acts; it stays "
            "there, word for word, until the next action, so the cached prefix is kept."
        ),
    )


class Policy(_Model):
    """Every knob of context governance; see the module docstring for where defaults come from."""

    context_window: int | None = Field(
        default=None, gt=0, description="Override of the model's context window, in tokens."
    )
    reserved_output_tokens: int = Field(
        default=8_192,
        ge=0,
        description="Room kept free for the model's answer; the history never takes it.",
    )
    safety_margin: float = Field(
        default=0.10,
        ge=0,
        lt=0.5,
        description=(
            "Share of the context window kept free, since token counts are estimates; below 50 %."
        ),
    )
    history_cap_tokens: int | None = Field(
        default=None,
        description="A cap on the history's tokens below the budget; empty or 0 means no cap.",
    )
    dangling_call_text: str = Field(
        default="Interrupted by user.",
        description=(
            "The result given to a tool call that never got one (the run was stopped), so "
            "the model is not sent a call without its answer."
        ),
    )
    tool_output: Truncation = Truncation()
    """Truncation of tool outputs, and of tool-call arguments (long string values cut, the
    JSON kept valid), by the same limit."""
    text: Truncation = Truncation(limit=20_000, strategy="both")
    eviction: Eviction = Eviction()
    masking: Masking = Masking()
    dedupe: Dedupe = Dedupe()
    window: Window = Window()
    drop_groups: bool = Field(
        default=True,
        description=(
            "When still over budget, drop the current turn's oldest tool exchanges (a call "
            "with its results), keeping the newest."
        ),
    )
    shrink_newest: bool = Field(
        default=True,
        description="Last resort: shrink the newest tool outputs proportionally to fit.",
    )
    hysteresis: Hysteresis = Hysteresis()
    compaction: CompactionPolicy = CompactionPolicy()
    awareness: Awareness = Awareness()

    def request_room(self, window_tokens: int) -> int:
        """Tokens a whole request may carry in a window (system prompt, instructions and tool
        definitions included): the window less reserved output and the safety margin."""
        window = self.context_window or window_tokens
        return window - self.reserved_output_tokens - int(window * self.safety_margin)

    def history_budget(self, window_tokens: int, fixed_tokens: int = 0) -> int:
        """Tokens the history may take in a window: the request's room less ``fixed_tokens``
        (system prompt, instructions, tool definitions), capped."""
        budget = self.request_room(window_tokens) - fixed_tokens
        if self.history_cap_tokens:
            budget = min(budget, self.history_cap_tokens)
        return max(budget, 0)

    def overrides(self) -> dict[str, Any]:
        """The knobs that differ from the defaults, as nested JSON: all a stored policy needs
        (it reads back as this policy, and follows a default that changes later)."""
        return _changed(self.model_dump(mode="json"), Policy().model_dump(mode="json"))

    def least_window(self) -> int:
        """The smallest context window that leaves the history any room under this policy."""
        window = max(1, int((self.reserved_output_tokens + 1) / (1 - self.safety_margin)) - 2)
        while window - self.reserved_output_tokens - int(window * self.safety_margin) <= 0:
            window += 1
        return window

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.history_cap_tokens is not None and self.history_cap_tokens < 0:
            raise ValueError("history_cap_tokens must be positive (or 0 / None for no cap)")
        if self.context_window is not None:
            margin = int(self.context_window * self.safety_margin)
            if self.reserved_output_tokens + margin >= self.context_window:
                raise ValueError(
                    "reserved_output_tokens plus the safety margin leave no room for history "
                    f"in a context_window of {self.context_window}; the least window for "
                    f"them is {self.least_window()}"
                )
        return self


def _changed(values: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    changed: dict[str, Any] = {}
    for key, value in values.items():
        default = defaults.get(key)
        if isinstance(value, dict) and isinstance(default, dict):
            if inner := _changed(value, default):
                changed[key] = inner
        elif value != default:
            changed[key] = value
    return changed
