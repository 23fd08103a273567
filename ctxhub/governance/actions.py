"""When a Governor acts, and which action: the one that costs the session least, as providers
bill cached and written input, over the requests until the next."""

from __future__ import annotations

from ._work import Work
from .assemble import sent_tokens
from .governed import Acted
from .pipeline import (
    Setup,
    Steps,
    act,
    new_work,
)
from .plans import Plan, replay
from .steps.mask import mask
from .steps.window import replay_window, triggered


def action_due(setup: Setup, work: Work, high_water: float) -> Acted | None:
    """Why the replayed request calls for an action, or None when it may go as it is. A
    trigger firing calls for one whatever the action reclaims (the high-water mark's call is
    weighed against the cache it breaks): the user asked for the window to move then."""
    if work.exact_over(setup.limit()):
        return "over_budget"
    if triggered(work):
        return "trigger"
    if work.exact_over(setup.limit(high_water)):
        return "high_water"
    return None


def cheapest_action(
    setup: Setup, plan: Plan, previous: Work, growth: int, *, started: bool
) -> tuple[Work, Steps]:
    """The action that costs the session least per request until the next, each candidate
    costed as a provider bills cached and written input: masking a batch of older results
    alone, within the window as it stands (which keeps the request's prefix up to the first
    result it masks), or moving the window too (which rewrites everything after the head, but
    leaves more room before the next action). Only moving the window is sure to reach the
    low-water mark (and to quiet the window's triggers, where that can be done); the others
    must at least get under the high-water mark and leave no trigger firing. Each is costed
    against the ``previous`` request, grown (what the provider's cache holds). A new start
    (``started``) has no cached prefix to keep: it takes the most room, at the low-water mark."""
    hysteresis = setup.policy.hysteresis
    low, high = setup.limit(hysteresis.low_water), setup.limit(hysteresis.high_water)
    full = act(setup, low)
    tried = [full]
    if sent_tokens(full[0]) < low // 2 and any(name == "window" for name, _ in full[1]):
        # The window stopped far below the mark, at a message too large for the room left:
        # aiming at the high-water mark keeps the context that message and those after it
        # carry, rather than a request of next to nothing (unless a trigger would fire on it).
        tried.append(act(setup, high))
        if not triggered(tried[-1][0]):
            full = tried[-1]
    candidates = [full]
    masking = setup.policy.masking
    if not started and masking.enabled:
        if masking.apply == "over_budget":
            # Masking always masks by its rule on every request, not by the batch.
            tried.append(_remasked(setup, plan))
            candidates.append(tried[-1])
        if plan.cut is not None:
            tried.append(act(setup, low, masked_enough=high))
            if not any(name == "window" for name, _ in tried[-1][1]):  # masking alone did
                candidates.append(tried[-1])
    fitting = [c for c in candidates[1:] if not c[0].exact_over(high) and not triggered(c[0])]
    pace = max(growth, setup.budget // 100, 1)
    chosen = (
        min(
            [full, *fitting],
            key=lambda action: _cost_per_request(previous, action[0], high, pace),
        )
        if fitting
        else full
    )
    for work, _ in tried:
        chosen[0].materialised |= work.materialised  # read to weigh the plans tried
    return chosen


def _remasked(setup: Setup, plan: Plan) -> tuple[Work, Steps]:
    """``plan`` with masking planned again over the messages its window keeps."""
    probe = new_work(setup, setup.limit())
    if plan.cut is not None:
        replay_window(probe, plan.head_end, plan.cut, plan.spared, plan.omitted)
    mask(probe)
    # An action writes its own budget note where the conversation stands: the old one goes.
    if probe.mask_span is None or probe.mask_span == plan.mask_span:
        return replay(setup, plan.model_copy(update={"note": None}))
    return replay(setup, plan.model_copy(update={"mask_span": probe.mask_span, "note": None}))


def _cost_per_request(before: Work, after: Work, high: int, pace: int) -> float:
    """Cache-weighted input per request from this action to the next: the action's request
    (its unchanged prefix read from the cache, the rest written), then requests growing by
    ``pace`` until the high-water mark (each read from the cache but what it adds)."""
    tokens = sent_tokens(after)
    prefix = _unchanged_prefix(before, after)
    following = max(high - tokens, 0) / pace
    action = CACHE_WRITE * (tokens - prefix) + CACHE_READ * prefix
    rest = following * (CACHE_READ * (tokens + high) / 2 + CACHE_WRITE * pace)
    return (action + rest) / (following + 1)


CACHE_READ, CACHE_WRITE = 0.1, 1.25
"""What providers bill for cached input read and written, per input token (Anthropic's)."""


def _unchanged_prefix(before: Work, after: Work) -> int:
    """Tokens of the leading messages two plans of one history send alike."""
    total = 0
    kept_before, kept_after = before.kept, after.kept
    for position in range(len(kept_after)):
        notices = (
            before.notice if before.notice_before == position else None,
            after.notice if after.notice_before == position else None,
        )
        if notices != (None, None):
            if notices[0] != notices[1]:
                break
            total += after.notice_tokens()
        notes = (
            before.note_message if before.note_before == position else None,
            after.note_message if after.note_before == position else None,
        )
        if notes != (None, None):
            if notes[0] != notes[1]:
                break
            total += after.note_tokens()
        if kept_before[position] != kept_after[position]:
            break
        if kept_after[position]:
            # None stands for the message as it is (not read: it may load on demand).
            if before.messages[position] != after.messages[position]:
                break
            total += after.tokens[position]
    return total
