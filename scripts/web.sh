#!/usr/bin/env bash
# The production web server: gunicorn running WEB_CONCURRENCY uvicorn worker processes on one
# socket (default: one per core). Each process serves any page, socket and chat of any session:
# they share PostgreSQL and the Redis channel layer. The application is loaded once, before the
# workers fork (--preload), so they start in a second. Usage: scripts/web.sh [HOST:PORT]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d .venv ] && PATH="$PWD/.venv/bin:$PATH"
exec gunicorn config.asgi:application \
  --worker-class config.workers.UvicornWorker \
  --bind "${1:-0.0.0.0:8000}" \
  --workers "${WEB_CONCURRENCY:-$(nproc)}" \
  --graceful-timeout 20 \
  --no-control-socket \
  --preload \
  --forwarded-allow-ips "${FORWARDED_ALLOW_IPS:-127.0.0.1}"
