#!/usr/bin/env bash
# onejob's fault suite (RELIABILITY.md): storm across nodes, crashes mid-attempt, database
# restarts, a node killed mid-storm, PostgreSQL failovers (one whose old primary stays up
# but stops committing), gateway callers that go away mid-call (on PostgreSQL with and
# without a separate worker, and on SQLite), the offline history checker, and hostile input.
#
#   chaos/run.sh [--quick|--full] [TEST-NAME-FILTER]
#
# --quick (the default, what CI runs) scales the scenarios down; --full gives the figures in
# RELIABILITY.md. Histories (JSON lines), reports and node logs go to $ONEJOB_CHAOS_OUT
# (default chaos/out/). Needs PostgreSQL at $ONEJOB_TEST_POSTGRES (default
# postgres://postgres@127.0.0.1:5432/postgres) and PostgreSQL's server binaries (initdb,
# pg_ctl) for the restart scenario, which runs its own throwaway cluster.
set -euo pipefail
cd "$(dirname "$0")/.."

scale=quick
case "${1:-}" in
  --quick) shift ;;
  --full) scale=full; shift ;;
esac

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/onejob/target}"
export CARGO_TERM_COLOR=never
export ONEJOB_CHAOS_SCALE="$scale"
export ONEJOB_CHAOS_OUT="${ONEJOB_CHAOS_OUT:-$PWD/chaos/out}"
export ONEJOB_BIN="$CARGO_TARGET_DIR/debug/onejob"
mkdir -p "$ONEJOB_CHAOS_OUT"

echo "== build (onejob, the suite, the checker)"
cargo build --locked -p onejob --bins
cargo build --locked -p onejob-chaos --bins --tests

echo "== fault scenarios ($scale): storm, crash, restart, killstorm, prune, fairness, failover, wedged, citus, vanished"
cargo test --locked -p onejob-chaos --test chaos -- --ignored --test-threads=1 --nocapture "$@"

echo "== offline history checker over the recorded histories"
"$CARGO_TARGET_DIR/debug/onejob-chaos-check" "$ONEJOB_CHAOS_OUT"/*.jsonl

if [ -z "${1:-}" ]; then
  echo "== hostile input ($scale): schemathesis, fuzzing"
  chaos/hostile.sh "--$scale"
fi
echo "== fault suite ($scale) passed"
