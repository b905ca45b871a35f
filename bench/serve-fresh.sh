# Sourced by bench/profile.sh, bench/cpu-split.sh and bench/statements.sh (set `here` first):
# the binaries' paths, the database settings, and `serve_fresh`, one onejob server on a fresh
# PostgreSQL database.

cache=${BENCH_CACHE:-/var/cache/onejob}
onejob=${ONEJOB_TARGET_DIR:-$cache/target-bench}/release/onejob
loadgen=${LOADGEN_TARGET_DIR:-$cache/target-loadgen}/release/onejob-loadgen
work=$cache/bench-run
mkdir -p "$work" "$here/results"
export PGHOST=${BENCH_PGHOST:-127.0.0.1} PGPORT=${BENCH_PGPORT:-5432} PGUSER=${BENCH_PGUSER:-postgres}
port=${BENCH_PORT:-18080}

# serve_fresh NAME [TEMPLATE]: creates the database onejob_bench_NAME (dropping any old one;
# a file copy of the database TEMPLATE when given, such as a growth template of bench/harness.py),
# migrates it, makes an API key ($key) and starts `onejob serve --no-worker` on it ($server, logging
# to $work/NAME-serve.log, with the config bench/harness.py gives its runs). Sets $db and $url; on
# exit the server is stopped and the database dropped.
serve_fresh() {
    db=onejob_bench_$1
    url=postgres://$PGUSER@$PGHOST:$PGPORT/$db
    local copy=""
    [ -z "${2:-}" ] || copy=" TEMPLATE \"$2\" STRATEGY FILE_COPY"
    psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db$copy" >/dev/null 2>&1
    "$onejob" migrate --database "$url" >/dev/null 2>&1
    key=$("$onejob" keys create --database "$url" --tenant bench --user bench 2>/dev/null)
    # The benchmark's own config (`CONFIG` in bench/harness.py), so that a profile runs what
    # the harness measures; the provider is never called (--no-worker).
    python3 - "$here" "$port" "$url" > "$work/$1.toml" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from harness import CONFIG
print(CONFIG.format(listen=f"127.0.0.1:{sys.argv[2]}", database=sys.argv[3], concurrency=16,
                    poll_interval="2s", provider_url="http://127.0.0.1:1/v1"), end="")
PY
    "$onejob" serve --config "$work/$1.toml" --no-worker > "$work/$1-serve.log" 2>&1 &
    server=$!
    trap 'kill $server 2>/dev/null || true; wait $server 2>/dev/null || true; psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null' EXIT
}
