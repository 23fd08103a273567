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
trap 'stop_services "$work/services"; rm -rf "$work"' EXIT
start_services "$work/services"

say "lint and types"
.venv/bin/ruff check .
.venv/bin/mypy ctxhub sessions

say "test suite on PostgreSQL + Redis"
.venv/bin/pytest "$@"

say "smoke run on the embedded default (SQLite, in-memory layer, eager jobs)"
env -u DATABASE_URL -u REDIS_URL CTXHUB_DATA_DIR="$work/embedded" \
  .venv/bin/pytest -m smoke -p no:cacheprovider -q
