"""Server time of the dashboard's session x-ray on a stored 20,000-message session, against
loading and parsing its whole log.

Run from the repository root (PostgreSQL recommended; without DATABASE_URL a throwaway SQLite
file is used):

    DATABASE_URL=postgres://... .venv/bin/python benchmarks/bench_dashboard.py

It reuses the session ``bench_governed.py`` stores (storing it first if needed) and measures,
each in a fresh process, the full request/response cycle through Django's test client (the
view, the services, the templates; no network):

* baseline: every payload of the log read and parsed with ``ModelMessagesTypeAdapter``;
* page, fresh process: the x-ray page (header, categories, zone strip, trajectory, records,
  the newest 200 messages with their fates) in a process that never governed the session;
* page after an append: the same page in a process that showed it once, after one more
  message was appended (what a person watching a live session pays);
* x-ray and fates after an append: the two fragments a live page re-renders after a change;
* fleet: the session list with this session in it, in a fresh process.

After each append the session's snapshot is refreshed outside the clock, as a worker does on
the full stack.

Ratios are against the baseline of the same run. Results go to
benchmarks/results/dashboard-<profile>.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_governed import (
    MESSAGES,
    in_fresh_process,
    setup_django,
    stored_session,
    write_results,
)

REPEATS = 3
WHAT = ("baseline", "page", "page_after_append", "fragments_after_append", "fleet")


def _client(session: object) -> object:
    from django.test import Client

    client = Client(SERVER_NAME="localhost")
    client.force_login(session.owner)  # type: ignore[attr-defined]
    return client


def _get(client: object, url: str) -> None:
    response = client.get(url)  # type: ignore[attr-defined]
    assert response.status_code == 200, (url, response.status_code)


def measure(what: str, session_id: str) -> float:
    """One measurement, in this (fresh) process."""
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    from sessions import services
    from sessions.models import AgentSession, Message

    session = AgentSession.objects.select_related("owner").get(pk=session_id)
    page = f"/sessions/{session.pk}/"
    if what == "baseline":
        started = time.perf_counter()
        payloads = list(
            Message.objects.filter(session=session)
            .order_by("seq")
            .values_list("payload", flat=True)
        )
        ModelMessagesTypeAdapter.validate_python(payloads)
        return time.perf_counter() - started
    client = _client(session)
    if what in ("page", "fleet"):
        started = time.perf_counter()
        _get(client, page if what == "page" else "/")
        return time.perf_counter() - started
    _get(client, page)  # this process showed the page once
    from sessions.services.governed import wait_for_warm_up

    wait_for_warm_up(session)
    from histories import HistoryGenerator

    services.append_message(session, next(HistoryGenerator(seed=99).messages()))
    last = session.messages.order_by("-seq").values_list("seq", flat=True).first()
    started = time.perf_counter()
    if what == "page_after_append":
        _get(client, page)
    else:
        _get(client, f"{page}xray/")
        _get(client, f"{page}fates/?from={last - 199}&to={last}")
    elapsed = time.perf_counter() - started
    # What a worker does after every append, so the next fresh process finds a snapshot.
    from sessions.tasks import settle_session

    settle_session(str(session.pk), False)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", choices=["agentic", "chatty"], default="agentic")
    parser.add_argument("--messages", type=int, default=MESSAGES)
    parser.add_argument("--measure", choices=WHAT)
    parser.add_argument("--session")
    args = parser.parse_args()
    setup_django()
    if args.measure:
        print(measure(args.measure, args.session))
        return
    session_id = stored_session(args.profile, args.messages)
    in_fresh_process("page", session_id, __file__)  # leaves the snapshot any governed session has
    results: dict[str, list[float]] = {what: [] for what in WHAT}
    for _ in range(REPEATS):
        for what in WHAT:
            results[what].append(in_fresh_process(what, session_id, __file__))
    medians = {what: statistics.median(times) for what, times in results.items()}
    base = medians["baseline"]
    labels = {
        "baseline": "load + parse the whole log (baseline)",
        "page": "x-ray page, fresh process",
        "page_after_append": "x-ray page after one append, same process",
        "fragments_after_append": "x-ray + fates fragments after one append",
        "fleet": "fleet page, fresh process",
    }
    print(f"\n{args.profile} session, {args.messages:,} messages, medians of {REPEATS} runs\n")
    print("| request | median s | ratio to baseline |")
    print("|---|---:|---:|")
    for what, median in medians.items():
        print(f"| {labels[what]} | {median:.3f} | {median / base:.3f} |")
    write_results(f"dashboard-{args.profile}", args.profile, args.messages, results, medians)


if __name__ == "__main__":
    main()
