#!/usr/bin/env bash
# Runs the dashboard on embedded defaults: SQLite, in-memory channel layer, eager jobs.
# Usage: scripts/run.sh [PORT]   (default 8000)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

port=${1:-8000}
ensure_python_env
say "preparing the database and the demo data"
.venv/bin/python manage.py migrate --verbosity 0
.venv/bin/python manage.py seed_demo
say "ctxhub is at http://127.0.0.1:$port/  (log in as demo / demo; Ctrl-C stops it)"
say "an admin account (the admin pages, and every user's sessions read-only): in another terminal, .venv/bin/python manage.py createsuperuser, then log in with it"
exec .venv/bin/python manage.py runserver "127.0.0.1:$port"
