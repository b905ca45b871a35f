# Sourced by bench/profile.sh and bench/cpu-split.sh (set `here` first): the binaries' paths,
# the database settings, and `serve_fresh`, one onejob server on a fresh PostgreSQL database.

cache=${BENCH_CACHE:-/var/cache/onejob}
onejob=${ONEJOB_TARGET_DIR:-$cache/target-bench}/release/onejob
loadgen=${LOADGEN_TARGET_DIR:-$cache/target-loadgen}/release/onejob-loadgen
work=$cache/bench-run
mkdir -p "$work" "$here/results"
export PGHOST=${BENCH_PGHOST:-127.0.0.1} PGPORT=${BENCH_PGPORT:-5432} PGUSER=${BENCH_PGUSER:-postgres}
port=${BENCH_PORT:-18080}

# serve_fresh NAME: creates the database onejob_bench_NAME (dropping any old one), migrates
# it, makes an API key ($key) and starts `onejob serve --no-worker` on it ($server, logging
# to $work/NAME-serve.log, the bench.chat kind of bench/harness.py). Sets $db and $url; on
# exit the server is stopped and the database dropped.
serve_fresh() {
    db=onejob_bench_$1
    url=postgres://$PGUSER@$PGHOST:$PGPORT/$db
    psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" 2>/dev/null
    "$onejob" migrate --database "$url" >/dev/null 2>&1
    key=$("$onejob" keys create --database "$url" --tenant bench --user bench 2>/dev/null)
    cat > "$work/$1.toml" <<TOML
listen = "127.0.0.1:$port"
database = "$url"
[[provider]]
name = "upstream"
adapter = "openai-chat"
base_url = "http://127.0.0.1:1/v1"
model = "bench"
[[kind]]
name = "bench.chat"
providers = ["upstream"]
[kind.params_schema]
type = "object"
required = ["prompt"]
additionalProperties = false
[kind.params_schema.properties.prompt]
type = "string"
TOML
    "$onejob" serve --config "$work/$1.toml" --no-worker > "$work/$1-serve.log" 2>&1 &
    server=$!
    trap 'kill $server 2>/dev/null || true; wait $server 2>/dev/null || true; psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null' EXIT
}
