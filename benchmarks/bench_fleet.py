"""The fleet page of a user with 10,000 sessions, against the same page of a user with 100.

Run from the repository root (PostgreSQL recommended; without DATABASE_URL a throwaway SQLite
file is used):

    DATABASE_URL=postgres://... .venv/bin/python benchmarks/bench_fleet.py

Once per database it stores 100 sessions through the services (an agent's turns appended, each
session governed once so its snapshot is current, as a worker leaves it after appends) for one
user, and for another user 10,000: the same 100, each copied 100 times row for row (messages,
snapshot), so every one of them reads as a governed session. Then, each in a fresh process
(nothing cached in Python), the full request/response cycle through Django's test client (the
view, the services, the template; no network):

* baseline: the fleet of 100 sessions (one page, ordered by its rows' figures);
* fullest, log, title, page 50: the fleet of 10,000 sessions, its first page by each sort,
  and its 50th page by activity;
* search and filter: a search by title and a filter by model, over the 10,000.

Each process times its first request (templates, URL patterns and the tokenizer load with it)
and then the median of a few more (what a running web process serves); each figure is the
median over ``REPEATS`` processes. Ratios are against the baseline measured in the same run: a
page costs its rows, not the fleet. Results go to benchmarks/results/fleet.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_governed import ROOT, setup_django

SESSIONS = 10_000
TEMPLATES = 100
REPEATS = 3
SMALL, LARGE = "fleet-bench-100", "fleet-bench-10000"
PAGES = {
    "baseline": (SMALL, "/"),
    "fullest": (LARGE, "/"),
    "log": (LARGE, "/?sort=log"),
    "title": (LARGE, "/?sort=title"),
    "page_50": (LARGE, "/?sort=activity&page=50"),
    "search": (LARGE, "/?q=parser"),
    "model": (LARGE, "/?model=openai:gpt-4o-mini"),
}
LABELS = {
    "baseline": "100 sessions, first page (baseline)",
    "fullest": "10,000 sessions, first page, fullest",
    "log": "10,000 sessions, first page, by raw log",
    "title": "10,000 sessions, first page, by title",
    "page_50": "10,000 sessions, page 50, by activity",
    "search": "10,000 sessions, search by title",
    "model": "10,000 sessions, filtered by model",
}
MODELS = ("openai:gpt-4o", "openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5")
SUBJECTS = ("parser", "billing", "gateway", "scheduler", "exporter")


def stored_fleets() -> None:
    """The two users' sessions, storing them first if this database has none."""
    from django.contrib.auth import get_user_model
    from django.db import reset_queries, transaction

    from sessions.models import AgentSession

    users = get_user_model().objects
    stored = AgentSession.objects.filter(owner__username__in=(SMALL, LARGE)).count()
    if stored == TEMPLATES + SESSIONS:
        return
    if stored:
        sys.exit(
            f"a run stopped midway left {stored:,} sessions of {SMALL} and {LARGE}: "
            "use an empty database"
        )
    small, _ = users.get_or_create(username=SMALL)
    large, _ = users.get_or_create(username=LARGE)
    started = time.perf_counter()
    templates = [_governed_session(small, n) for n in range(TEMPLATES)]
    rows = [_rows_of(template) for template in templates]
    for copy in range(SESSIONS // TEMPLATES):
        with transaction.atomic():
            _copied(templates, rows, large, copy)
        reset_queries()  # a settings module with DEBUG keeps every statement otherwise
    print(f"stored {TEMPLATES} + {SESSIONS:,} sessions in {time.perf_counter() - started:.0f} s")


def _governed_session(owner: object, n: int) -> object:
    from histories import HistoryGenerator

    from sessions import services
    from sessions.models import AgentSession
    from sessions.services.governed import refresh_snapshot

    session = AgentSession.objects.create(
        owner=owner,
        title=f"Fix the {SUBJECTS[n % len(SUBJECTS)]} ({n})",
        model=MODELS[n % len(MODELS)],
    )
    stream = HistoryGenerator(seed=n, output_bytes=(200, 4_000 * (1 + n % 7))).messages()
    services.append_messages(session, [next(stream) for _ in range(12 + n % 20)])
    refresh_snapshot(session)
    return session


def _rows_of(template: object) -> tuple[list[dict], dict | None]:  # type: ignore[type-arg]
    """A session's message rows and snapshot row, as copies take them."""
    from sessions.models import GovernedSnapshot, Message

    messages = list(Message.objects.filter(session=template).values())
    for row in messages:
        row.pop("id")
    return messages, GovernedSnapshot.objects.filter(session=template).values().first()


def _copied(templates: list, rows: list, owner: object, copy: int) -> None:  # type: ignore[type-arg]
    """Each template session, its messages and snapshot, copied for ``owner``."""
    from sessions.models import AgentSession, GovernedSnapshot, Message

    sessions, messages, snapshots = [], [], []
    kept = ("model", "policy", "revision", "log_tokens", "log_messages", "tool_definitions")
    for template, (message_rows, snapshot) in zip(templates, rows, strict=True):
        session = AgentSession(
            owner=owner,
            title=f"{template.title} #{copy}",
            **{name: getattr(template, name) for name in kept},
        )
        sessions.append(session)
        messages += [Message(**{**row, "session_id": session.pk}) for row in message_rows]
        if snapshot is not None:
            snapshots.append(GovernedSnapshot(**{**snapshot, "session_id": session.pk}))
    AgentSession.objects.bulk_create(sessions)
    Message.objects.bulk_create(messages, batch_size=2_000)
    GovernedSnapshot.objects.bulk_create(snapshots)


WARM = 5


def measure(what: str) -> tuple[float, float]:
    """The page ``what`` in this (fresh) process: seconds to the last byte of its first
    request (the process's templates, URL patterns and tokenizer loaded with it) and the median
    of the ``WARM`` requests after it (what a running web process serves)."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    username, url = PAGES[what]
    client = Client(SERVER_NAME="localhost")
    client.force_login(get_user_model().objects.get(username=username))
    times = []
    for _ in range(1 + WARM):
        started = time.perf_counter()
        response = client.get(url)
        times.append(time.perf_counter() - started)
        assert response.status_code == 200, (url, response.status_code)
        assert b'data-testid="fleet-row"' in response.content, url
    return times[0], statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--measure", choices=PAGES)
    args = parser.parse_args()
    setup_django()
    if args.measure:
        print(*measure(args.measure))
        return
    import subprocess

    stored_fleets()
    runs: dict[str, list[list[float]]] = {what: [] for what in PAGES}
    for _ in range(REPEATS):
        for what in PAGES:
            out = subprocess.run(
                [sys.executable, __file__, "--measure", what],
                check=True,
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
            runs[what].append([float(v) for v in out.stdout.strip().splitlines()[-1].split()])
    first = {what: statistics.median(r[0] for r in times) for what, times in runs.items()}
    warm = {what: statistics.median(r[1] for r in times) for what, times in runs.items()}
    print(f"\nThe fleet page: medians of {REPEATS} fresh processes ({WARM} warm requests each)\n")
    print("| page | first request s | ratio | warm request s | ratio |")
    print("|---|---:|---:|---:|---:|")
    for what in PAGES:
        print(
            f"| {LABELS[what]} | {first[what]:.3f} | {first[what] / first['baseline']:.2f} "
            f"| {warm[what]:.3f} | {warm[what] / warm['baseline']:.2f} |"
        )
    out = ROOT / "benchmarks" / "results" / "fleet.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps({"sessions": SESSIONS, "runs": runs, "first": first, "warm": warm}, indent=2)
    )


if __name__ == "__main__":
    main()
