"""Importing agents' transcripts in bulk, on the embedded default (SQLite, no services).

Writes a folder of sessions as the agents write them (the suite's fixtures: half Claude Code
sessions, half Codex rollouts, about 500 lines each), then times
``manage.py import_transcripts`` over it in a fresh data directory, as a user would run it on
``~/.claude/projects``; then once more, which must add nothing; then the replay of one imported
session (what ctxhub would have done).

Run from the repository root:

    .venv/bin/python benchmarks/bench_import.py             # 1,000 sessions
    .venv/bin/python benchmarks/bench_import.py --quick     # 100

Results go to ``benchmarks/results/import.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "import.json"
PYTHON = ROOT / ".venv" / "bin" / "python"
sys.path.insert(0, str(ROOT))

from tests.transcripts.fixtures import claude_code, codex  # noqa: E402

CLAUDE_TURNS = 125
"""About 500 lines a Claude Code session (``write_session``: ~3.8 lines a response)."""
CODEX_TURNS = 60
"""About 500 lines a Codex rollout."""


def write_sessions(root: Path, count: int) -> int:
    """``count`` sessions under ``root``, half of each format; their lines."""
    lines = 0
    for number in range(count):
        if number % 2:
            path = root / "codex" / f"rollout-{number:05}.jsonl"
            codex.write_session(path, seed=number, turns=CODEX_TURNS)
        else:
            name = f"{number:08}-0000-4000-8000-000000000000.jsonl"
            path = root / "claude" / "-home-dev-shop" / name
            claude_code.write_session(path, seed=number, turns=CLAUDE_TURNS)
        lines += sum(1 for _ in path.open("rb"))
    return lines


def manage(data: Path, *args: str) -> str:
    env = {
        key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "REDIS_URL")
    }
    env["CTXHUB_DATA_DIR"] = str(data)
    done = subprocess.run(
        [str(PYTHON), "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True
    )
    return done.stdout.decode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1_000)
    parser.add_argument("--quick", action="store_true", help="100 sessions")
    options = parser.parse_args()
    count = 100 if options.quick else options.sessions
    with tempfile.TemporaryDirectory(prefix="ctxhub-import-") as scratch:
        root, data = Path(scratch) / "transcripts", Path(scratch) / "data"
        started = time.perf_counter()
        lines = write_sessions(root, count)
        written = time.perf_counter() - started
        manage(data, "migrate", "--verbosity", "0")
        manage(
            data,
            "shell",
            "-c",
            "from django.contrib.auth.models import User; User.objects.create_user('bench')",
        )
        started = time.perf_counter()
        first = manage(data, "import_transcripts", str(root), "--owner", "bench")
        imported = time.perf_counter() - started
        started = time.perf_counter()
        again = manage(data, "import_transcripts", str(root), "--owner", "bench")
        reimported = time.perf_counter() - started
        stored = re.search(r"([\d,]+) messages", first.splitlines()[-1])
        messages = int(stored[1].replace(",", "")) if stored else 0
        nothing = "0 new sessions, 0 messages" in again
        replay = manage(
            data,
            "shell",
            "-c",
            "import time\n"
            "from transcripts.models import Transcript\n"
            "from transcripts.whatif import replay\n"
            "from sessions.services.governed import session_policy\n"
            "s = Transcript.objects.order_by('pk').first().session\n"
            "t = time.perf_counter(); w = replay(s, session_policy(s))\n"
            "print(len(w.rows), time.perf_counter() - t)",
        ).split()
    result = {
        "sessions": count,
        "lines": lines,
        "messages_stored": messages,
        "write_seconds": round(written, 1),
        "import_seconds": round(imported, 1),
        "messages_per_second": round(messages / imported),
        "reimport_seconds": round(reimported, 1),
        "reimport_added_nothing": nothing,
        "replay_requests": int(replay[-2]),
        "replay_seconds": round(float(replay[-1]), 2),
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
