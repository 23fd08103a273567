"""The fleet: every session a user may see, with what its next request carries.

Governed tokens come from each session's snapshot when it is current (a worker refreshes it
after appends), else from this process's carried state, else the session is governed here, as
long as the request's time allows; a session left over is shown with its last known figures,
marked as such, and a worker asked to refresh them.

A fleet larger than a page comes a page at a time: the database orders and filters the sessions
by what is stored (their snapshots' figures, their logs' counts), and only the page's rows are
read further and governed, so a page costs its rows whatever the fleet's size.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from django.db.models import Count, F, FloatField, Max, OuterRef, Q, Subquery
from django.db.models.functions import Cast, Coalesce, Lower, NullIf

from sessions import events, snapshots
from sessions.figures import job_words
from sessions.history import effective_tokens, is_remembered, pinned_seqs
from sessions.models import (
    ACTIVE_JOB_STATUSES,
    AgentSession,
    Compaction,
    CompactionJob,
    GovernedSnapshot,
    JobStatus,
    Pin,
    SessionGovernor,
)
from sessions.services.costs import SessionCost, session_costs
from sessions.services.governed import governed_context, session_policy, session_window
from sessions.services.limits import limits_for, stored_limits
from sessions.services.sending import stored_state

log = logging.getLogger(__name__)

# Seconds one listing may spend governing sessions nobody governed since their last change.
GOVERN_BUDGET_SECONDS = 2.0

Sort = Literal["fullest", "governed", "log", "activity", "title", "compactions"]
SORTS: tuple[Sort, ...] = ("fullest", "governed", "log", "activity", "title", "compactions")


@dataclass(frozen=True, slots=True)
class FleetRow:
    session: AgentSession
    owned: bool
    messages: int
    """Messages in the raw log."""
    log_tokens: int
    """Tokens of the raw log: everything ever stored, not what a request carries."""
    governed: int | None
    """Tokens the next request carries (None: never governed yet)."""
    governed_current: bool
    """False when ``governed`` is the figure of an earlier state of the session."""
    budget: int
    room: int
    """Tokens the request may carry in all (``Limits.room``): what ``governed`` is measured
    against, as both count the system prompt and tool definitions."""
    window: int
    threshold: int
    """Effective-history tokens at which automatic compaction starts."""
    headroom: int
    """Tokens until the next automatic compaction (negative: past the threshold)."""
    auto: bool
    compactions: int
    cost: SessionCost
    """What the session's responses cost, from the usage their providers reported."""
    status: str
    """compacting, flagged (automatic compaction paused), failed (the last job), or ""."""
    status_detail: str
    last_compaction: str = ""
    """What the latest compaction job did, in the words every page uses ("" for none)."""

    @property
    def percent(self) -> float:
        """Governed tokens as a share of the room the request has."""
        return 100.0 * (self.governed or 0) / self.room if self.room else 0.0

    @property
    def past_by(self) -> int:
        """Tokens past the automatic-compaction threshold (0 below it)."""
        return max(-self.headroom, 0)

    @property
    def last_activity(self) -> datetime:
        return self.session.updated_at


def visible_sessions(user: Any) -> Any:
    """The sessions a user may see: their own; staff see everyone's (and change only theirs)."""
    sessions = AgentSession.objects.select_related("owner")
    return sessions if user.is_staff else sessions.filter(owner=user)


PAGE_SIZE = 100
"""Sessions per page of the fleet: each row is governed (or read from its snapshot) as the page
is drawn, so a page costs its rows, not the fleet."""

State = Literal["compacting", "flagged", "failed"]
STATES: tuple[State, ...] = ("compacting", "flagged", "failed")


@dataclass(frozen=True, slots=True)
class FleetFilter:
    """Which of the sessions a user may see are listed."""

    query: str = ""
    """Words in the title or the model."""
    model: str = ""
    owner: str = ""
    """A username (staff see everyone's sessions)."""
    state: str = ""
    """One of ``STATES``, or "" for any."""


@dataclass(frozen=True, slots=True)
class FleetPage:
    rows: list[FleetRow]
    total: int
    """Sessions that match, on every page."""
    number: int
    pages: int

    @property
    def first(self) -> int:
        """The position of the page's first row among all that match (1-based; 0: none)."""
        return (self.number - 1) * PAGE_SIZE + 1 if self.rows else 0

    @property
    def last(self) -> int:
        return self.first + len(self.rows) - 1 if self.rows else 0


# Across pages the order is the stored figures': a session's snapshot (what its next request
# carried when it was last governed, refreshed by a worker after appends), its log's counts.
_ORDER: dict[Sort, tuple[Any, ...]] = {
    "fullest": (
        (Cast("snapshot__tokens", FloatField()) / NullIf("snapshot__room", 0)).desc(
            nulls_last=True
        ),
    ),
    "governed": (F("snapshot__tokens").desc(nulls_last=True),),
    "log": (F("log_tokens").desc(),),
    "activity": (F("updated_at").desc(),),
    "title": (),
    "compactions": (F("compaction_count").desc(),),
}


def fleet(
    user: Any, *, sort: Sort = "fullest", page: int = 1, where: FleetFilter | None = None
) -> FleetPage:
    """The page ``page`` of the sessions ``user`` may see that ``where`` lets through, sorted
    by ``sort``. A fleet that fits on one page is ordered by the figures its rows show, as they
    are now; a larger one by the figures stored (``_ORDER``), its page's rows governed."""
    sessions = _matching(user, where or FleetFilter())
    total = sessions.count()
    pages = max(1, -(-total // PAGE_SIZE))
    number = min(max(page, 1), pages)
    if total <= PAGE_SIZE:
        return FleetPage(sort_rows(_rows(user, list(sessions)), sort), total, number, pages)
    ordered = sessions.order_by(*_ORDER[sort], Lower("title"), "pk")
    start = (number - 1) * PAGE_SIZE
    chosen = list(ordered[start : start + PAGE_SIZE])
    by_id = {row.session.pk: row for row in _rows(user, chosen)}
    return FleetPage([by_id[s.pk] for s in chosen], total, number, pages)


def fleet_choices(user: Any) -> dict[str, list[str]]:
    """What the fleet's filters offer: the models of the sessions ``user`` may see, and (for
    staff, who see everyone's) their owners."""
    sessions = visible_sessions(user).order_by()
    models = sorted(sessions.values_list("model", flat=True).distinct())
    owners = (
        sorted(sessions.values_list("owner__username", flat=True).distinct())
        if user.is_staff
        else []
    )
    return {"models": models, "owners": owners}


def _matching(user: Any, where: FleetFilter) -> Any:
    latest_job = CompactionJob.objects.filter(session=OuterRef("pk")).order_by("-created_at")
    compactions = (
        Compaction.objects.filter(session=OuterRef("pk"), undone_at__isnull=True)
        .order_by()
        .values("session")
        .annotate(count=Count("pk"))
        .values("count")
    )
    sessions = visible_sessions(user).annotate(
        compaction_count=Coalesce(Subquery(compactions), 0),
        governor_version=Coalesce(
            Subquery(SessionGovernor.objects.filter(session=OuterRef("pk")).values("version")[:1]),
            0,
        ),
    )
    if term := where.query.strip():
        sessions = sessions.filter(Q(title__icontains=term) | Q(model__icontains=term))
    if where.model:
        sessions = sessions.filter(model=where.model)
    if where.owner and user.is_staff:
        sessions = sessions.filter(owner__username=where.owner)
    if where.state == "flagged":
        sessions = sessions.exclude(auto_compaction_paused="")
    elif where.state:
        statuses = ACTIVE_JOB_STATUSES if where.state == "compacting" else (JobStatus.FAILED,)
        sessions = sessions.alias(latest_job=Subquery(latest_job.values("status")[:1])).filter(
            latest_job__in=statuses
        )
    return sessions


def _rows(user: Any, sessions: list[AgentSession]) -> list[FleetRow]:
    """The rows of ``sessions``, in no particular order."""
    ids = [s.pk for s in sessions]
    pins: dict[Any, list[int]] = {}
    for session_id, seq in (
        Pin.objects.filter(session__in=ids, undone_at__isnull=True)
        .order_by("seq")
        .values_list("session_id", "seq")
    ):
        pins.setdefault(session_id, []).append(seq)
    known: dict[Any, dict[str, Any]] = {
        row["session_id"]: dict(row)
        for row in GovernedSnapshot.objects.filter(session__in=ids).values(
            "session_id", "key", "tokens", "budget"
        )
    }
    statuses = _statuses(ids)
    costs = session_costs(sessions)
    deadline = time.monotonic() + GOVERN_BUDGET_SECONDS
    # Sessions this process carries first: governing them costs next to nothing.
    listed = []
    for s in sorted(sessions, key=lambda s: not is_remembered(s)):
        try:
            row = _row(
                s,
                user,
                costs[s.pk],
                pins.get(s.pk, []),
                known.get(s.pk),
                statuses.get(s.pk),
                deadline,
            )
        except Exception as error:
            row = _faulted_row(s, user, costs[s.pk], error)
        listed.append(row)
    return listed


def _stored_figures(session: Any, user: Any, cost: SessionCost) -> dict[str, Any]:
    """What a row shows from the listing's own queries, whether or not the session governs."""
    return {
        "session": session,
        "owned": session.owner_id == user.pk,
        "messages": session.log_messages,
        "log_tokens": session.log_tokens or 0,
        "compactions": session.compaction_count,
        "cost": cost,
    }


def _faulted_row(session: Any, user: Any, cost: SessionCost, error: Exception) -> FleetRow:
    """The row of a session that cannot be governed (a stored row no longer reads): what is
    known, and the fault, so one session never takes the listing down."""
    log.error("fleet row of session %s", session.pk, exc_info=error)
    return FleetRow(
        **_stored_figures(session, user, cost),
        governed=None,
        governed_current=False,
        budget=0,
        room=0,
        window=session.context_window or 0,
        threshold=0,
        headroom=0,
        auto=False,
        status="failed",
        status_detail=f"cannot be governed: {type(error).__name__}: {str(error)[:200]}",
    )


def _row(
    session: Any,
    user: Any,
    cost: SessionCost,
    pins: list[int],
    snapshot: dict[str, Any] | None,
    status: tuple[str, str, str] | None,
    deadline: float,
) -> FleetRow:
    policy = session_policy(session)
    version = session.governor_version
    governed, current, budget = governed_figures(session, pins, version, snapshot, deadline)
    limits = limits_for(policy, session_window(session), budget)
    state, detail, last = status or ("", "", "")
    if session.auto_compaction_paused and not state:
        state, detail = "flagged", session.auto_compaction_paused
    return FleetRow(
        **_stored_figures(session, user, cost),
        governed=governed,
        governed_current=current,
        budget=limits.budget,
        room=limits.room,
        window=limits.window,
        threshold=limits.soft_threshold,
        headroom=limits.soft_threshold - effective_tokens(session),
        auto=policy.compaction.auto and not session.auto_compaction_paused,
        status=state,
        status_detail=detail,
        last_compaction=last,
    )


def governed_figures(
    session: AgentSession,
    pins: list[int],
    governor_version: int,
    snapshot: dict[str, Any] | None,
    deadline: float,
) -> tuple[int | None, bool, int]:
    """Governed tokens, whether they are current, and the budget: from the snapshot if it is
    current, else governed here before ``deadline`` (``time.monotonic()``), else the last
    known figure (None if none), with a worker asked to refresh it."""
    if (
        snapshot is not None
        and snapshot["tokens"] is not None
        and snapshot["key"] == snapshots.key(session, pins, governor_version)
    ):
        return snapshot["tokens"], True, snapshot["budget"]
    if is_remembered(session) or time.monotonic() < deadline:
        context = governed_context(session)
        return context.tokens, True, context.report.budget_tokens
    events.send(events.snapshot_stale, session=session)
    budget = stored_limits(session).budget
    return (None if snapshot is None else snapshot["tokens"]), False, budget


def session_figures(session: AgentSession, deadline: float) -> tuple[int | None, bool, int]:
    """``governed_figures`` of one session, reading its pins and snapshot."""
    row = GovernedSnapshot.objects.filter(session=session).values("key", "tokens", "budget")
    snapshot = row.first()
    version = stored_state(session).version
    found = None if snapshot is None else dict(snapshot)
    return governed_figures(session, pinned_seqs(session), version, found, deadline)


def _statuses(ids: list[Any]) -> dict[Any, tuple[str, str, str]]:
    """Each session's job status (one compacting now, or its latest job failed) and what its
    latest job did, in words."""
    found: dict[Any, tuple[str, str, str]] = {}
    latest = (
        CompactionJob.objects.filter(session__in=ids)
        .values("session_id")
        .annotate(newest=Max("created_at"))
    )
    newest = {row["session_id"]: row["newest"] for row in latest}
    for job in CompactionJob.objects.filter(session__in=ids, created_at__in=newest.values()):
        if job.created_at != newest.get(job.session_id):
            continue
        said = job_words(job)
        if job.status in ACTIVE_JOB_STATUSES:
            why = job.plan.get("detail") if job.trigger == "auto" else None
            doing = f"compaction {job.status}" + (f" (automatic: {why})" if why else "")
            found[job.session_id] = ("compacting", doing, said)
        elif job.status == JobStatus.FAILED:
            found[job.session_id] = ("failed", job.error or "the last compaction failed", said)
        else:
            found[job.session_id] = ("", "", said)
    return found


def sort_rows(rows: list[FleetRow], sort: Sort) -> list[FleetRow]:
    keys: dict[Sort, Any] = {
        "fullest": lambda r: (-r.percent, r.session.title.lower()),
        "governed": lambda r: (-(r.governed or 0), r.session.title.lower()),
        "log": lambda r: (-r.log_tokens, r.session.title.lower()),
        "activity": lambda r: -r.last_activity.timestamp(),
        "title": lambda r: r.session.title.lower(),
        "compactions": lambda r: (-r.compactions, r.session.title.lower()),
    }
    return sorted(rows, key=keys[sort])
