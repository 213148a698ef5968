#!/bin/sh
# `make test`: the whole suite on SQLite, and again on a throwaway PostgreSQL
# (scripts/ensure_postgres.sh) less what is marked database_independent, in two lanes that run
# at once so both cores stay busy (one pytest alone leaves one idle while a server starts or a
# subprocess is waited for):
#   lane 1: the SQLite pass of everything but the paths below
#   lane 2: the PostgreSQL pass, then the SQLite pass of the paths below (about as long)
# Each pytest runs its tests in order in one process. Lane 2's output is printed whole after
# lane 1's. Exits non-zero if any pass failed.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
# The engine room (its thread with real models, and its units since they joined it) runs in
# lane 2; the GGUF conversion tests checked against llama.cpp moved to lane 1 with them.
LANE2_PATHS="tests/engine"
cd "$ROOT"
mkdir -p -m 700 var && mkdir -p -m 700 var/log  # owner-only when made here, as the server makes var/
LANE2_LOG=var/log/test-lane2.log
url=$(sh scripts/ensure_postgres.sh) || exit 1

lane2() {
  echo "=== make test: on PostgreSQL, all but what is marked database_independent ==="
  DATABASE_URL=$url "$PYTHON" -m pytest -m "not database_independent" -p no:cacheprovider
  postgres_rc=$?
  echo "=== make test: on SQLite, $LANE2_PATHS ==="
  # shellcheck disable=SC2086
  "$PYTHON" -m pytest -p no:cacheprovider $LANE2_PATHS
  sqlite_rc=$?
  echo "=== lane 2: PostgreSQL pass exit $postgres_rc, SQLite pass exit $sqlite_rc ==="
  [ "$postgres_rc" -eq 0 ] && [ "$sqlite_rc" -eq 0 ]
}

echo "=== make test: lane 2 (PostgreSQL, then SQLite on $LANE2_PATHS) runs beside, into $LANE2_LOG ==="
lane2 >"$LANE2_LOG" 2>&1 &
lane2_pid=$!
# Whatever ends this script ends lane 2 too.
trap 'kill $lane2_pid 2>/dev/null' EXIT INT TERM

echo "=== make test: lane 1, on SQLite, all but $LANE2_PATHS ==="
ignored=$(for path in $LANE2_PATHS; do printf -- '--ignore=%s ' "$path"; done)
# shellcheck disable=SC2086
"$PYTHON" -m pytest $ignored
lane1_rc=$?

wait $lane2_pid
lane2_rc=$?
trap - EXIT INT TERM
echo "=== make test: lane 2 (ran beside lane 1) ==="
cat "$LANE2_LOG"
echo "=== make test: lane 1 exit $lane1_rc, lane 2 exit $lane2_rc ==="
[ "$lane1_rc" -eq 0 ] && [ "$lane2_rc" -eq 0 ]
