"""A session's limits, from one source: its window, the history budget, the Governor's marks
and the soft threshold of automatic compaction. The x-ray, the fleet, the trajectory, the jobs,
the API and the chat all read them here, so no two show a different budget for one session.

The budget is the engine's: the window less what every request carries besides the history
(the system prompt, instructions and tool definitions), the tokens reserved for the answer and
the safety margin. Those fixed tokens are known once the session has been governed; until then
(a session never governed, or listed without governing it) the budget leaves them out.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctxhub.governance import Policy
from sessions.models import AgentSession, GovernedSnapshot, SentRequest
from sessions.services.governed import GovernedContext, session_policy, session_window


@dataclass(frozen=True, slots=True)
class Limits:
    window: int
    room: int
    """Tokens a request may carry in all, system prompt and tool definitions included: the
    window less the tokens reserved for the answer and the safety margin."""
    budget: int
    """Tokens the history may take in a request: the room less what every request carries
    besides it."""
    high_water: int
    """Where the Governor acts (a request past it is cut down to ``low_water``)."""
    low_water: int
    soft_threshold: int
    """Effective-history tokens past which the session is compacted in the background."""


def limits_for(policy: Policy, window: int, budget: int) -> Limits:
    """The limits of a policy, a window and the engine's budget under them."""
    hysteresis = policy.hysteresis
    return Limits(
        window=window,
        room=max(policy.request_room(window), 0),
        budget=budget,
        high_water=int(budget * hysteresis.high_water),
        low_water=int(budget * hysteresis.low_water),
        soft_threshold=int(budget * policy.compaction.soft_threshold),
    )


def session_limits(session: AgentSession, context: GovernedContext | None = None) -> Limits:
    """The session's limits: from its governed context when the caller has it, else from what
    is stored without governing (``stored_limits``)."""
    if context is None:
        return stored_limits(session)
    report = context.report
    return limits_for(session_policy(session), report.window_tokens, report.budget_tokens)


def stored_limits(session: AgentSession, policy: Policy | None = None) -> Limits:
    """The session's limits without governing it (cheap enough for every append): the fixed
    tokens its latest request sent carried (else its snapshot's), under its policy and window
    now; none when it was never governed."""
    policy = policy or session_policy(session)
    window = session_window(session)
    return limits_for(policy, window, policy.history_budget(window, _fixed_tokens(session, policy)))


def _fixed_tokens(session: AgentSession, policy: Policy) -> int:
    """What the session's requests carry besides the history, as its last governed budget
    tells: the room its window left less that budget."""
    sent = (
        SentRequest.objects.filter(session=session)
        .order_by("-number")
        .values_list("window_tokens", "budget_tokens")
        .first()
    )
    if sent is not None:
        window, budget = sent
        return max(policy.history_budget(window) - budget, 0)
    snapshot = GovernedSnapshot.objects.filter(session=session, budget__isnull=False)
    known = snapshot.values_list("budget", flat=True).first()
    if known is None:
        return 0
    return max(policy.history_budget(session_window(session)) - known, 0)
