"""Prompt-cache benchmark: what a whole session pays, request by request, with and without
hysteresis.

A generated agentic session is governed before every model request, as an agent's
``ContextGovernor`` does, by one ``Governor`` with the default policy (hysteresis on) and by one
with hysteresis off (every request governed on its own, filling the budget), at a small (32k)
and a large (128k) context window. Each request is compared with the request before it: the
unchanged prefix is the longest run of leading messages byte-identical (as JSON) to the
previous request's. Providers bill that prefix as cached input, so the cost of request *k* is
taken as Anthropic bills it:

    cost_k = 0.1 * prefix_k + 1.25 * (tokens_k - prefix_k)

and set against sending every request uncached (``tokens_k``).

Run from the repository root:  .venv/bin/python benchmarks/bench_prefix.py
Results are printed as markdown and written to benchmarks/results/prefix.json.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from histories import HistoryGenerator
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest

from ctxhub.governance import Governor, Hysteresis, Policy
from ctxhub.governance.counting import message_tokens
from ctxhub.governance.tokens import tokenizer_for

MODEL = "openai:gpt-4o"
MESSAGES = 400
OUTPUT_BYTES = (200, 8_000)
"""Tool outputs of a coding agent: a grep, a test run, a file read (eviction and truncation
have their own benchmarks)."""
WINDOWS = (32_000, 128_000)
CACHE_READ, CACHE_WRITE = 0.1, 1.25


@dataclass
class Request:
    tokens: int
    prefix: int
    """Tokens of the leading messages unchanged since the previous request."""
    kept: float
    """``prefix`` as a share of the previous request's tokens (1.0 for the first)."""
    fits: bool
    """Within the budget."""
    acted: str | None


SEED = 11
OTHER_SESSIONS = ((3, (200, 8_000)), (11, (200, 4_000)), (11, (500, 20_000)))
"""Other seeds and output sizes, to show how much the result depends on the session."""


def session(seed: int = SEED, output_bytes: tuple[int, int] = OUTPUT_BYTES) -> list[ModelMessage]:
    stream = HistoryGenerator(seed=seed, output_bytes=output_bytes).messages()
    return [next(stream) for _ in range(MESSAGES)]


def requests(history: list[ModelMessage], policy: Policy) -> list[Request]:
    """Every request of the session governed in turn: before each, the history ends with the
    request the model answers (a user prompt or tool results)."""
    governor = Governor(policy, model=MODEL)
    tokenizer = tokenizer_for(MODEL)
    previous: list[bytes] = []
    previous_tokens = 0
    out: list[Request] = []
    for end in range(1, len(history) + 1):
        if not isinstance(history[end - 1], ModelRequest):
            continue
        governed = governor.govern(history[:end])
        sent = [ModelMessagesTypeAdapter.dump_json([m]) for m in governed.messages]
        counts = [message_tokens(m, tokenizer) for m in governed.messages]
        same = 0
        while same < min(len(sent), len(previous)) and sent[same] == previous[same]:
            same += 1
        prefix = sum(counts[:same])
        kept = prefix / previous_tokens if previous_tokens else 1.0
        tokens = governed.tokens_after
        out.append(Request(tokens, prefix, kept, governed.fits, governed.acted))
        previous, previous_tokens = sent, tokens
    return out


def figures(run: list[Request]) -> dict[str, float]:
    later = run[1:]  # the first request has nothing before it to keep
    cost = sum(CACHE_READ * r.prefix + CACHE_WRITE * (r.tokens - r.prefix) for r in run)
    return {
        "requests": len(run),
        "median_prefix_share": statistics.median(r.prefix / r.tokens for r in later),
        "keeping_90": sum(r.kept >= 0.9 for r in later) / len(later),
        "median_tokens": statistics.median(r.tokens for r in run),
        "max_tokens": max(r.tokens for r in run),
        "over_budget": sum(not r.fits for r in run),
        "actions": sum(r.acted is not None for r in later),
        "cost_vs_uncached": cost / sum(r.tokens for r in run),
    }


def compare(history: list[ModelMessage], window: int) -> dict[str, dict[str, float]]:
    """The session at one window, with and without hysteresis."""
    policy = Policy(context_window=window)
    off = policy.model_copy(update={"hysteresis": Hysteresis(enabled=False)})
    runs = {
        "hysteresis": figures(requests(history, policy)),
        "no_hysteresis": figures(requests(history, off)),
    }
    ratio = runs["hysteresis"]["cost_vs_uncached"] / runs["no_hysteresis"]["cost_vs_uncached"]
    runs["hysteresis"]["cost_vs_no_hysteresis"] = ratio
    assert all(f["over_budget"] == 0 for f in runs.values()), "a request passed its budget"
    return runs


def main() -> None:
    history = session()
    results = {str(window): compare(history, window) for window in WINDOWS}
    print(
        "| window | governor | requests | median prefix kept | requests keeping ≥ 90 % "
        "| tokens sent (median / max) | actions | cache-weighted cost vs uncached |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for window, runs in results.items():
        for name, f in runs.items():
            print(
                f"| {int(window) // 1000}k | {name.replace('_', ' ')} | {f['requests']} "
                f"| {f['median_prefix_share']:.0%} | {f['keeping_90']:.0%} "
                f"| {f['median_tokens']:,.0f} / {f['max_tokens']:,.0f} "
                f"| {f['actions'] if name == 'hysteresis' else 'every request'} "
                f"| {f['cost_vs_uncached']:.2f}x |"
            )
        ratio = runs["hysteresis"]["cost_vs_no_hysteresis"]
        print(f"| {int(window) // 1000}k | cost, hysteresis / none | | | | | | **{ratio:.2f}x** |")
    print()
    print("| session (seed, output bytes) | window | keeping ≥ 90 %, with / without | cost ratio |")
    print("|---|---|---|---|")
    others: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for seed, sizes in OTHER_SESSIONS:
        name = f"seed {seed}, {sizes[0]:,}-{sizes[1]:,}"
        history = session(seed, sizes)
        others[name] = {str(window): compare(history, window) for window in WINDOWS}
        for window, runs in others[name].items():
            on, off = runs["hysteresis"], runs["no_hysteresis"]
            print(
                f"| {name} | {int(window) // 1000}k | {on['keeping_90']:.0%} / "
                f"{off['keeping_90']:.0%} | {on['cost_vs_no_hysteresis']:.2f}x |"
            )
    out = Path(__file__).resolve().parent / "results" / "prefix.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"session": results, "others": others}, indent=2) + "\n")


if __name__ == "__main__":
    main()
