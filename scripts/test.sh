#!/usr/bin/env bash
# Runs the whole test suite against real services: a throwaway PostgreSQL and Redis, a real
# Celery worker, a real ASGI server and headless Chromium. Then a smoke run on the embedded
# default (SQLite, in-memory channel layer, eager jobs). Extra arguments go to the main run.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ensure_python_env
ensure_system_package initdb postgresql
ensure_system_package redis-server redis-server
ensure_system_package chromium chromium
ensure_system_package docker-compose docker-compose  # validates docker-compose.yml offline
export CTXHUB_CHROMIUM=${CTXHUB_CHROMIUM:-$(find_bin chromium)}

work=$(mktemp -d "${TMPDIR:-/tmp}/ctxhub-test.XXXXXX")
chmod 755 "$work"  # the PostgreSQL cluster below it belongs to another user when run as root
trap 'kill $(jobs -p) 2>/dev/null || true; stop_services "$work/services"; rm -rf "$work"' EXIT
start_services "$work/services"

# Lint, types and the smoke run go beside the main run, which spends much of its time waiting
# for servers, workers and browsers; their output follows it.
say "lint and types, and the smoke run on the embedded default (SQLite, in-memory layer, eager jobs), beside the suite"
(.venv/bin/ruff check . && .venv/bin/mypy ctxhub config sessions gateway transcripts) >"$work/lint.log" 2>&1 &
lint=$!
env -u DATABASE_URL -u REDIS_URL CTXHUB_DATA_DIR="$work/embedded" \
  .venv/bin/pytest -m smoke -p no:cacheprovider -q >"$work/smoke.log" 2>&1 &
smoke=$!

# The job tests spend most of their time waiting for real workers to start, die and time out,
# and the browser tests for servers and Chromium: a whole run gives each its own pytest beside
# the rest (own test database, own Redis database), the browser tests once the smoke run has
# freed its core. Arguments select tests for one run instead.
jobs=""
browser=""
main=("$@")
if [ $# -eq 0 ]; then
  say "job tests with real Celery workers, beside the suite"
  DATABASE_URL="${DATABASE_URL%/*}/ctxhub_jobs" REDIS_URL="${REDIS_URL%/*}/1" \
    .venv/bin/pytest tests/jobs -p no:cacheprovider >"$work/jobs.log" 2>&1 &
  jobs=$!
  say "browser tests in headless Chromium, beside the suite once the smoke run is done"
  (
    while kill -0 "$smoke" 2>/dev/null; do sleep 1; done
    DATABASE_URL="${DATABASE_URL%/*}/ctxhub_browser" REDIS_URL="${REDIS_URL%/*}/2" \
      exec .venv/bin/pytest tests/browser -p no:cacheprovider
  ) >"$work/browser.log" 2>&1 &
  browser=$!
  main=(--ignore=tests/jobs --ignore=tests/browser)
fi

say "test suite on PostgreSQL + Redis"
status=0
.venv/bin/pytest "${main[@]}" || status=$?
if [ -n "$jobs" ]; then
  say "job tests"
  wait "$jobs" || status=1
  cat "$work/jobs.log"
fi
if [ -n "$browser" ]; then
  say "browser tests"
  wait "$browser" || status=1
  cat "$work/browser.log"
fi

say "lint and types"
wait "$lint" || status=1
cat "$work/lint.log"
say "smoke run on the embedded default"
wait "$smoke" || status=1
cat "$work/smoke.log"
exit "$status"
