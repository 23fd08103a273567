# Shared set-up steps of scripts/run.sh and scripts/test.sh. Sourced, not run.

say() { printf '\033[1m==> [%4ss] %s\033[0m\n' "$SECONDS" "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi
}

apt_updated=""
apt_install() {
  command -v apt-get >/dev/null || return 1
  if [ -z "$apt_updated" ]; then as_root apt-get update -qq || return 1; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# The locked Python environment in .venv (Python 3.12 from .python-version).
ensure_python_env() {
  if ! command -v uv >/dev/null; then
    say "installing uv"
    python3 -m pip install --quiet --user uv 2>/dev/null || python3 -m pip install --quiet uv
    export PATH="$HOME/.local/bin:$PATH"
  fi
  say "syncing the Python environment (uv sync --frozen)"
  uv sync --frozen --quiet
}

# A server binary from PATH, or PostgreSQL's versioned directory.
find_bin() {
  local name=$1 dir
  if command -v "$name" >/dev/null; then command -v "$name"; return; fi
  for dir in /usr/lib/postgresql/*/bin; do
    [ -x "$dir/$name" ] && { echo "$dir/$name"; return; }
  done
  return 1
}

ensure_system_package() {  # ensure_system_package BINARY DEBIAN_PACKAGE
  find_bin "$1" >/dev/null && return
  say "installing $2"
  apt_install "$2" || die "$1 is missing and could not be installed; install $2 and retry"
  find_bin "$1" >/dev/null || die "$2 installed, but $1 is still not found"
}

free_port() {
  .venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# A throwaway PostgreSQL cluster and Redis server under $1 (stop them with stop_services).
start_services() {
  local dir=$1 initdb pg_ctl redis pg_port redis_port
  initdb=$(find_bin initdb) pg_ctl=$(find_bin pg_ctl) redis=$(find_bin redis-server)
  pg_port=$(free_port) redis_port=$(free_port)
  mkdir -p "$dir/pg" "$dir/redis"
  # initdb refuses to run as root: the cluster belongs to the postgres user then.
  local run_pg=()
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    chown -R postgres "$dir/pg"
    run_pg=(runuser -u postgres --)
  fi
  say "starting PostgreSQL on port $pg_port and Redis on port $redis_port"
  "${run_pg[@]}" "$initdb" -D "$dir/pg/data" -A trust -U postgres --no-sync >/dev/null
  "${run_pg[@]}" "$pg_ctl" -D "$dir/pg/data" -l "$dir/pg/log" -w -o \
    "-p $pg_port -k $dir/pg -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off" start >/dev/null
  "$redis" --port "$redis_port" --bind 127.0.0.1 --daemonize yes --save '' --appendonly no \
    --dir "$dir/redis" --pidfile "$dir/redis/redis.pid" --logfile "$dir/redis/log"
  export DATABASE_URL="postgres://postgres@127.0.0.1:$pg_port/ctxhub"
  export REDIS_URL="redis://127.0.0.1:$redis_port/0"
}

stop_services() {
  local dir=$1 run_pg=()
  [ "$(id -u)" = 0 ] && run_pg=(runuser -u postgres --)
  "${run_pg[@]}" "$(find_bin pg_ctl)" -D "$dir/pg/data" -m immediate stop >/dev/null 2>&1 || true
  local pid
  if [ -f "$dir/redis/redis.pid" ]; then
    pid=$(cat "$dir/redis/redis.pid")
    kill "$pid" 2>/dev/null || true
    # Redis writes its log and removes its pid file as it exits: removing the directory
    # meanwhile fails ("Directory not empty"), so wait for it (at most 5 s).
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
  fi
  rm -rf "$dir"
}
