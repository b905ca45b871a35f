#!/usr/bin/env bash
# What each of onejob's SQL statements costs the database during a long intake run (new jobs
# or replays), on an empty database or on a copy of a growth template (bench/harness.py
# --keep-templates leaves them as onejob_bench_tpl_<size>): pg_stat_statements' time, buffers
# (hit, read from the OS, dirtied, written by the backend itself) and WAL (bytes, full-page
# images) per call, and pg_stat_bgwriter's buffer writes per job. Compare sizes to see where
# growth costs. Writes bench/results/statements-<clients>-<size>[-prewarmed][-<MODE>].txt.
# Run bench/run.sh once first (it builds).
#
#   bench/statements.sh [CLIENTS=8] [JOBS=300000] [TEMPLATE]
#   PREWARM=1 bench/statements.sh ...   loads the key's unique index into shared buffers first
#                                       (pg_prewarm), as a server that has run for a while has
#   MODE=replay bench/statements.sh ... measures replays instead: the JOBS keys are created
#                                       first, unmeasured, then submitted again
#   PERF=1 bench/statements.sh ...      also records the intake writer's backend with perf for
#                                       15 s from 8 s into the run: its CPU per job, by symbol
#
# Needs pg_stat_statements loaded, and is best read with track_io_timing on (as superuser,
# then restart PostgreSQL; reset both the same way after):
#   ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements';
#   ALTER SYSTEM SET track_io_timing = on;
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
clients=${1:-8}
jobs=${2:-300000}
template=${3:-}
size=0
[ -z "$template" ] || size=$(psql -X -At -h "${BENCH_PGHOST:-127.0.0.1}" -U "${BENCH_PGUSER:-postgres}" -d "$template" -c "SELECT count(*) FROM jobs")
mode=${MODE:-new}
case "$mode" in
    new) replay_args=() ;;
    replay) replay_args=(--replay-only) ;;
    *) echo "MODE is new or replay" >&2; exit 2 ;;
esac
out=$here/results/statements-$clients-$size${PREWARM:+-prewarmed}${MODE:+-$mode}.txt
# shellcheck source=bench/serve-fresh.sh
. "$here/serve-fresh.sh"
if [ "$(psql -X -At -d postgres -c "SELECT count(*) FROM pg_settings WHERE name = 'pg_stat_statements.max'")" != 1 ]; then
    echo "pg_stat_statements is not loaded: see the head of $0" >&2
    exit 1
fi
psql -X -q -d postgres -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
serve_fresh statements "$template"
"$loadgen" intake --addr "127.0.0.1:$port" --key "$key" --clients "$clients" --jobs 2000 --warmup 0 --prefix w --pid $server >/dev/null
psql -X -q -d "$db" -c ANALYZE
if [ "$mode" = replay ]; then
    "$loadgen" intake --addr "127.0.0.1:$port" --key "$key" --clients "$clients" --jobs "$jobs" --warmup 0 --prefix m --pid $server >/dev/null
fi
if [ -n "${PREWARM:-}" ]; then
    psql -X -q -d "$db" -c "CREATE EXTENSION IF NOT EXISTS pg_prewarm" -c "SELECT pg_prewarm('jobs_one_per_key_scope')" >/dev/null
fi

counters() {
    psql -X -At -d postgres -c "SELECT checkpoints_timed + checkpoints_req, buffers_checkpoint, buffers_clean,
        buffers_backend, buffers_alloc, (SELECT wal_bytes FROM pg_stat_wal), (SELECT wal_fpi FROM pg_stat_wal),
        (SELECT blks_read FROM pg_stat_database WHERE datname = '$db') FROM pg_stat_bgwriter" | tr '|' ' '
}
psql -X -q -d postgres -c "SELECT pg_stat_statements_reset()" >/dev/null
read -r ck0 bc0 bcl0 bb0 ba0 wb0 fpi0 br0 < <(counters)
if [ -n "${PERF:-}" ]; then
    (
        sleep 8
        writer=$(psql -X -At -d postgres -c "SELECT pid FROM pg_stat_activity WHERE datname = '$db' AND query LIKE 'WITH inserted%' LIMIT 1")
        jobs0=$(psql -X -At -d "$db" -c "SELECT last_value FROM job_events_id_seq")
        perf record -e cpu-clock -F 2999 -o "$work/statements.perf" -p "$writer" -- sleep 15 >/dev/null 2>&1
        jobs1=$(psql -X -At -d "$db" -c "SELECT last_value FROM job_events_id_seq")
        echo "$((jobs1 - jobs0))" > "$work/statements.perf.jobs"
    ) &
    profiler=$!
fi
result=$("$loadgen" intake --addr "127.0.0.1:$port" --key "$key" --clients "$clients" --jobs "$jobs" --warmup 0 --prefix m "${replay_args[@]}" --pid $server)
[ -z "${PERF:-}" ] || wait "$profiler"
kill "$server"; wait "$server" 2>/dev/null || true  # its backends exit and flush their statistics
sleep 0.5
read -r ck1 bc1 bcl1 bb1 ba1 wb1 fpi1 br1 < <(counters)

{
    echo "# statement costs during intake ($mode submissions): $clients clients, $jobs jobs, $size existing jobs${PREWARM:+ (key index prewarmed)}, PostgreSQL,"
    echo "# $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg), shared_buffers $(psql -X -At -d postgres -c 'SHOW shared_buffers'), track_io_timing $(psql -X -At -d postgres -c 'SHOW track_io_timing'), full_page_writes $(psql -X -At -d postgres -c 'SHOW full_page_writes')"
    echo
    echo "$result" | python3 -c '
import json, sys
d = json.load(sys.stdin); r = d.get("intake") or d["replay"]
print("req/s %.0f  p50 %.2f ms  p99 %.2f ms" % (r["rps"], r["p50_ms"], r["p99_ms"]))'
    per() { python3 -c "print(f'{($2 - $1) / $jobs:.3f}')"; }
    echo "per job (cluster-wide): WAL $(per "$wb0" "$wb1") B, full-page images $(per "$fpi0" "$fpi1"), blocks read from the OS (this database) $(per "$br0" "$br1")"
    echo "per job, buffers written by: checkpointer $(per "$bc0" "$bc1"), background writer $(per "$bcl0" "$bcl1"), backends $(per "$bb0" "$bb1"); allocated $(per "$ba0" "$ba1"); checkpoints $((ck1 - ck0))"
    echo
    echo "## statements of this database, by total time (per call: ms; buffers; WAL bytes and full-page images)"
    psql -X -d postgres -P pager=off -c "SELECT calls, round(total_exec_time::numeric / 1000, 1) AS total_s,
            round((total_exec_time / calls)::numeric, 3) AS mean_ms, round(rows::numeric / calls, 1) AS rows,
            round(shared_blks_hit::numeric / calls, 1) AS hit, round(shared_blks_read::numeric / calls, 2) AS read,
            round(shared_blks_dirtied::numeric / calls, 2) AS dirtied, round(shared_blks_written::numeric / calls, 2) AS written,
            round((blk_read_time / calls)::numeric, 3) AS read_ms, round((blk_write_time / calls)::numeric, 3) AS write_ms,
            round(wal_bytes::numeric / calls) AS wal_b, round(wal_fpi::numeric / calls, 2) AS fpi,
            left(regexp_replace(query, '\s+', ' ', 'g'), 48) AS statement
        FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
        WHERE d.datname = '$db' AND calls > 100 ORDER BY total_exec_time DESC LIMIT 8"
    if [ -n "${PERF:-}" ]; then
        echo
        echo "## the intake writer's backend under perf (15 s, cpu-clock)"
        ms=$(perf report -i "$work/statements.perf" --stdio -g none 2>/dev/null | sed -n 's/^# Event count (approx.): //p')
        n=$(cat "$work/statements.perf.jobs")
        echo "CPU $((ms / 1000000)) ms for $n jobs (counted by their \`created\` events' sequence): $((ms / 1000 / n)) us per job"
        perf report -i "$work/statements.perf" --no-children --sort dso -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | sed -n '1,4p'
        perf report -i "$work/statements.perf" --no-children --sort sym -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | sed -n '1,25p'
    fi
} > "$out"
cat "$out"
