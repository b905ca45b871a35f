#!/usr/bin/env bash
# Where an onejob intake spends its time: runs `onejob serve --no-worker` on a fresh
# PostgreSQL database, drives it with onejob-loadgen, and meanwhile
#   - samples pg_stat_activity every 10 ms (what the database backends wait on),
#   - records onejob's CPU profile with `perf record -e cpu-clock` (if perf works here),
#   - reads onejob's CPU time per request and the database's WAL / transaction counters.
# Writes bench/results/profile-<clients>.txt. Run bench/run.sh once first (it builds).
#
#   bench/profile.sh [CLIENTS=8] [JOBS=6000] [new|replay]   (replay: the jobs are created
#   first, unprofiled, then the same keys are replayed under the profilers)
#   NOANALYZE=1 bench/profile.sh ...   skips the ANALYZE after the warm-up (this server runs
#   with autovacuum = off; without statistics the key lookup uses the wrong index)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
clients=${1:-8}
jobs=${2:-6000}
mode=${3:-new}
out=$here/results/profile-$mode-$clients${NOANALYZE:+-noanalyze}.txt
# shellcheck source=bench/serve-fresh.sh
. "$here/serve-fresh.sh"
serve_fresh profile
"$loadgen" intake --addr "127.0.0.1:$port" --key "$key" --clients "$clients" --jobs 500 --warmup 0 --prefix warm >/dev/null 2>&1
replay_args=()
if [ "$mode" = replay ]; then
    "$loadgen" intake --addr "127.0.0.1:$port" --key "$key" --clients "$clients" --jobs "$jobs" --warmup 0 --prefix p >/dev/null 2>&1
    replay_args=(--replay-only)
fi
[ -n "${NOANALYZE:-}" ] || psql -X -q -d "$db" -c "ANALYZE"

snap() { psql -X -At -d postgres -c "SELECT wal_sync || ' ' || wal_bytes || ' ' || pg_snapshot_xmax(pg_current_snapshot())::text FROM pg_stat_wal"; }
read -r sync0 bytes0 xid0 < <(snap)
echo "SELECT coalesce(wait_event_type, 'CPU') || ':' || coalesce(wait_event, '-') || ' | ' || state || ' | ' || left(regexp_replace(query, '\s+', ' ', 'g'), 60) FROM pg_stat_activity WHERE datname = '$db' AND state <> 'idle' \\watch 0.01" \
    | psql -X -At -d postgres > "$work/profile-waits.txt" 2>/dev/null &
sampler=$!
perf_ok=0
if perf record -e cpu-clock -F 999 -o "$work/profile.perf" -p "$server" >/dev/null 2>&1 & then
    perf_pid=$!; perf_ok=1
fi
result=$("$loadgen" intake --addr "127.0.0.1:$port" --key "$key" --clients "$clients" --jobs "$jobs" --warmup 0 --prefix p "${replay_args[@]}" --pid "$server" 2>/dev/null)
[ "$perf_ok" = 1 ] && kill -INT "$perf_pid" 2>/dev/null && wait "$perf_pid" 2>/dev/null || true
kill "$sampler" 2>/dev/null || true
kill "$server"; wait "$server" 2>/dev/null || true
sleep 0.3
read -r sync1 bytes1 xid1 < <(snap)

{
    echo "# onejob intake profile: $clients clients, $jobs $mode submissions, PostgreSQL, ${NOANALYZE:+NO }ANALYZE after the warm-up, $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    echo "$result" | python3 -c '
import json, sys
d = json.load(sys.stdin); r = d.get("intake") or d["replay"]
print("req/s %.0f  p50 %.2f ms  p99 %.2f ms  onejob CPU %.0f us/request" % (r["rps"], r["p50_ms"], r["p99_ms"], r["server_cpu_us_per_ok"]))'
    echo "write transactions: $((xid1 - xid0)) for $jobs submissions; WAL syncs: $((sync1 - sync0)); WAL bytes per job: $(( (bytes1 - bytes0) / jobs ))"
    echo "(cluster-wide counters: other databases' traffic is included)"
    echo
    echo "## database backends not idle, by wait event and statement (10 ms samples)"
    grep -v '^$' "$work/profile-waits.txt" | sort | uniq -c | sort -rn | sed -n '1,25p'
    if [ "$perf_ok" = 1 ] && [ -s "$work/profile.perf" ]; then
        echo
        echo "## onejob CPU by shared object (perf, cpu-clock)"
        perf report -i "$work/profile.perf" --no-children --sort dso 2>/dev/null | grep -v '^#' | grep -v '^$' | sed -n '1,8p'
        echo
        echo "## onejob CPU by symbol (top 30)"
        perf report -i "$work/profile.perf" --no-children --sort sym 2>/dev/null | grep -v '^#' | grep -v '^$' | sed -n '1,30p'
    fi
} > "$out"
cat "$out"
