#!/usr/bin/env bash
# bench/retention.sh [OLD_JOBS] [NEW_JOBS]: how fast retention deletes while intake runs.
#
# A fresh PostgreSQL database gets OLD_JOBS (default 100000) finished jobs, made by onejob's
# own intake and then marked cancelled two days ago (one `created` event each, no attempt).
# Then two phases, each `onejob serve` with its worker on onejob-fake (zero latency) and the
# load generator submitting NEW_JOBS (default 20000) new jobs with 8 clients:
#   A. retention off: the intake rate alone;
#   B. retention on (finished_after 1 day, every 1 s, batch 500): the intake rate meanwhile,
#      and the rows deleted per second until the old jobs are gone.
# Prints one JSON document and writes it to bench/results/retention.json. Uses the release
# binaries bench/run.sh builds ($ONEJOB_TARGET_DIR, $LOADGEN_TARGET_DIR). Run it on a quiet
# machine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
CACHE=${BENCH_CACHE:-/var/cache/onejob}
ONEJOB=${ONEJOB_TARGET_DIR:-$CACHE/target-bench}/release/onejob
FAKE=${ONEJOB_TARGET_DIR:-$CACHE/target-bench}/release/onejob-fake
LOADGEN=${LOADGEN_TARGET_DIR:-$CACHE/target-loadgen}/release/onejob-loadgen
OLD=${1:-100000}
NEW=${2:-20000}
PG=postgres://postgres@127.0.0.1:5432
DB=onejob_bench_retention
URL=$PG/$DB
PORT=18090
FAKE_PORT=18091
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true' EXIT

psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB" >/dev/null
"$ONEJOB" migrate --database "$URL" >/dev/null
KEY=$("$ONEJOB" keys create --database "$URL" --tenant bench --user bench 2>/dev/null)
"$FAKE" --listen "127.0.0.1:$FAKE_PORT" >"$WORK/fake.log" 2>&1 &

config() { # config RETENTION(0/1) > toml
    cat <<TOML
listen = "127.0.0.1:$PORT"
database = "$URL"
[worker]
concurrency = 16
[[provider]]
name = "fake"
adapter = "fake"
base_url = "http://127.0.0.1:$FAKE_PORT"
[[kind]]
name = "bench.chat"
providers = ["fake"]
TOML
    if [ "$1" = 1 ]; then
        printf '[retention]\nfinished_after = "1d"\nevery = "1s"\nbatch = 500\n'
    fi
}
serve() { # serve CONFIG [--no-worker]
    "$ONEJOB" serve --config "$1" ${2:-} >>"$WORK/serve.log" 2>&1 &
    SERVE=$!
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null && return; sleep 0.1; done
    echo "onejob did not start: $WORK/serve.log" >&2; exit 1
}
stop() { kill "$SERVE"; wait "$SERVE" 2>/dev/null || true; }
count() { psql "$URL" -Atc "$1"; }

config 0 >"$WORK/off.toml"
config 1 >"$WORK/on.toml"

echo "filling $OLD old jobs" >&2
serve "$WORK/off.toml" --no-worker
"$LOADGEN" intake --addr "127.0.0.1:$PORT" --key "$KEY" --kind bench.chat --clients 8 --jobs "$OLD" --warmup 0 --prefix old >/dev/null
stop
count "UPDATE jobs SET state = 'cancelled', dispatch_at = NULL, updated_at = now() - interval '2 days'" >/dev/null
count "VACUUM ANALYZE" >/dev/null
old_events=$(count "SELECT count(*) FROM job_events")

echo "phase A: intake, retention off" >&2
serve "$WORK/off.toml"
A=$("$LOADGEN" intake --addr "127.0.0.1:$PORT" --key "$KEY" --kind bench.chat --clients 8 --jobs "$NEW" --warmup 500 --prefix a)
stop

echo "phase B: intake, retention on" >&2
serve "$WORK/on.toml"
start=$(date +%s.%N)
"$LOADGEN" intake --addr "127.0.0.1:$PORT" --key "$KEY" --kind bench.chat --clients 8 --jobs "$NEW" --warmup 500 --prefix b >"$WORK/b.json" &
GEN=$!
left_at_intake_end=""
while true; do
    left=$(count "SELECT count(*) FROM jobs WHERE updated_at < now() - interval '1 day'")
    if [ -z "$left_at_intake_end" ] && ! kill -0 $GEN 2>/dev/null; then left_at_intake_end=$left; fi
    [ "$left" = 0 ] && break
    sleep 0.2
done
drained=$(date +%s.%N)
wait $GEN
B=$(cat "$WORK/b.json")
stop

python3 - "$OLD" "$old_events" "$start" "$drained" "$left_at_intake_end" "$A" "$B" <<'PY' | tee "$here/results/retention.json"
import json, sys
old, events, start, drained, left = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
a, b = json.loads(sys.argv[6]), json.loads(sys.argv[7])
seconds = drained - start
print(json.dumps({
    "old_jobs": old, "old_events": events,
    "drain_s": round(seconds, 2),
    "jobs_deleted_per_s": round(old / seconds),
    "rows_deleted_per_s": round((old + events) / seconds),
    "old_left_when_intake_ended": int(left) if left else 0,
    "intake_without_retention_per_s": round(a["intake"]["rps"]),
    "intake_with_retention_per_s": round(b["intake"]["rps"]),
    "intake_p99_ms": {"without": a["intake"]["p99_ms"], "with": b["intake"]["p99_ms"]},
}, indent=2))
PY
