#!/bin/sh
# A throwaway PostgreSQL for the test suite: a cluster in var/pg on a localhost port (and a unix
# socket in var/pg), trust auth for loopback and socket connections only, tuned for speed over
# durability. Installs Debian's package when run as root; reuses a cluster already running.
# Prints the DATABASE_URL to use (messages go to stderr). `ensure_postgres.sh stop` stops it.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${PG_DIR:-$ROOT/var/pg}
# Root runs the cluster as `postgres`, which cannot pass through a var/ the server made
# owner-only (0700, config/secrets.py): the cluster then lives in the temp folder instead.
if [ -z "${PG_DIR:-}" ] && [ "$(id -u)" = 0 ] && [ -d "$ROOT/var" ] &&
  ! runuser -u postgres -- test -x "$ROOT/var" 2>/dev/null; then
  DIR=${TMPDIR:-/tmp}/mlx-test-pg-$(printf %s "$ROOT" | cksum | cut -d' ' -f1)
fi
# A port of its own per checkout (54000-54999 from the directory's checksum), so two clones on
# one machine (a developer's and CI's) never meet.
PORT=${PG_PORT:-$((54000 + $(printf %s "$DIR" | cksum | cut -d' ' -f1) % 1000))}
DATA=$DIR/data
URL="postgres://postgres@localhost:$PORT/mlx"

fail() {
  echo "ensure_postgres: $*" >&2
  exit 1
}

find_bindir() {
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -rV); do
    [ -x "$dir/initdb" ] && { echo "$dir"; return; }
  done
  initdb=$(command -v initdb 2>/dev/null) && dirname "$initdb"
}

. "$ROOT/scripts/apt_install.sh"
BIN=$(find_bindir) || true
if [ -z "$BIN" ]; then
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 ||
    fail "PostgreSQL is not installed (Debian/Ubuntu: sudo apt-get install postgresql)"
  echo "installing PostgreSQL (postgresql) for the test suite" >&2
  apt_install postgresql || fail "could not install postgresql with apt-get"
  BIN=$(find_bindir) || fail "postgresql is installed but its initdb was not found"
fi

# PostgreSQL refuses to run as root: root runs the cluster as the `postgres` user.
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || fail "there is no postgres user to run the cluster as"
  as_pg() { runuser -u postgres -- "$@"; }
else
  as_pg() { "$@"; }
fi

running() { as_pg "$BIN/pg_ctl" status -D "$DATA" >/dev/null 2>&1; }

if [ "${1:-}" = stop ]; then
  if running; then as_pg "$BIN/pg_ctl" stop -D "$DATA" -m fast -w >&2; else echo "not running" >&2; fi
  exit 0
fi
[ $# = 0 ] || fail "usage: $0 [stop]"

if [ ! -s "$DATA/PG_VERSION" ]; then
  echo "creating a PostgreSQL cluster in $DATA" >&2
  mkdir -p "$DIR" || fail "cannot create $DIR"
  [ "$(id -u)" = 0 ] && chown postgres: "$DIR"
  as_pg test -w "$DIR" || fail "$DIR is not writable by the postgres user (nor a path it can reach)"
  rm -rf "$DATA"
  as_pg "$BIN/initdb" -D "$DATA" -U postgres -A trust -E UTF8 --locale=C --no-sync >"$DIR/initdb.log" 2>&1 ||
    { cat "$DIR/initdb.log" >&2; fail "initdb failed"; }
  # A throwaway cluster: no crash safety, hence no fsync.
  cat >>"$DATA/postgresql.conf" <<EOF
listen_addresses = 'localhost'
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
fi

if ! running; then
  as_pg "$BIN/pg_ctl" start -D "$DATA" -l "$DIR/server.log" -w -t 60 -o "-p $PORT -k '$DIR'" >/dev/null ||
    { tail -n 20 "$DIR/server.log" >&2; fail "PostgreSQL did not start (log: $DIR/server.log)"; }
fi
"$BIN/pg_isready" -q -h localhost -p "$PORT" ||
  fail "the cluster in $DATA runs but does not answer on localhost:$PORT (stop it: $0 stop)"

psql() { "$BIN/psql" -X -q -h localhost -p "$PORT" -U postgres -d postgres -tAc "$1"; }
[ "$(psql "SELECT 1 FROM pg_database WHERE datname = 'mlx'")" = 1 ] ||
  psql "CREATE DATABASE mlx" || fail "could not create the database mlx"
echo "$URL"
