#!/usr/bin/env bash
# onejob's benchmark harness: builds, installs the peers, runs bench/harness.py, and writes
# BENCHMARKS.md, bench/plot.svg and bench/results/*.json.
#
#   bench/run.sh                       everything, 3 runs per configuration
#   bench/run.sh --quick               smoke run (1 run, small counts)
#   bench/run.sh --parts intake,peers  some parts (machine ceiling intake peers dispatch e2e gateway growth steady rss worked
#                                      nodes footprint citus)
#   bench/run.sh --skip-build ...      use the binaries already built
#   bench/run.sh --report-only         rewrite BENCHMARKS.md and bench/plot.svg from bench/results/
#   bench/run.sh --help                all options of bench/harness.py
#
# Environment (defaults): BENCH_CACHE=/var/cache/onejob, ONEJOB_TARGET_DIR=$BENCH_CACHE/target-bench,
# LOADGEN_TARGET_DIR=$BENCH_CACHE/target-loadgen, BENCH_PEERS=$BENCH_CACHE/bench-peers,
# BENCH_PGHOST=127.0.0.1 BENCH_PGPORT=5432 BENCH_PGUSER=postgres, BENCH_PORT=18080, BENCH_DB=onejob_bench (database prefix),
# BENCH_PG_URL_QUERY= (query of onejob's database URLs, e.g. sslmode=disable; none: TLS if offered).
#
# Never run it while a build of your own is running on this machine: the numbers are only as
# quiet as the machine.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
export BENCH_CACHE=${BENCH_CACHE:-/var/cache/onejob}
export ONEJOB_TARGET_DIR=${ONEJOB_TARGET_DIR:-$BENCH_CACHE/target-bench}
export LOADGEN_TARGET_DIR=${LOADGEN_TARGET_DIR:-$BENCH_CACHE/target-loadgen}
export BENCH_PEERS=${BENCH_PEERS:-$BENCH_CACHE/bench-peers}

# The peers' versions, pinned so that runs compare like with like (bump deliberately).
GRAPHILE_WORKER_VERSION=${GRAPHILE_WORKER_VERSION:-0.17.3}
PG_BOSS_VERSION=${PG_BOSS_VERSION:-10.4.2}
NODE_PG_VERSION=${NODE_PG_VERSION:-8.23.1}
PROCRASTINATE_VERSION=${PROCRASTINATE_VERSION:-3.10.0}

skip_build=0
report_only=0
parts=""
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --skip-build) skip_build=1 ;;
        --report-only) report_only=1 ;;
        --parts) parts=$2; args+=("$1" "$2"); shift ;;
        --parts=*) parts=${1#--parts=}; args+=("$1") ;;
        -h|--help) sed -n '2,19p' "$0"; echo; exec python3 "$here/harness.py" --help ;;
        *) args+=("$1") ;;
    esac
    shift
done

if [ "$report_only" = 1 ]; then
    exec python3 "$here/report.py"
fi

say() { printf '[run.sh] %s\n' "$*" >&2; }
wants() { [ -z "$parts" ] || [[ ",$parts," == *",$1,"* ]]; }

host=${BENCH_PGHOST:-127.0.0.1}
port=${BENCH_PGPORT:-5432}
if ! pg_isready -q -h "$host" -p "$port"; then
    say "PostgreSQL is not answering on $host:$port"
    exit 1
fi

if [ "$skip_build" = 0 ]; then
    say "building onejob and onejob-fake (release) into $ONEJOB_TARGET_DIR"
    if ! (cd "$root" && CARGO_TARGET_DIR=$ONEJOB_TARGET_DIR cargo build --release -p onejob -p onejob-fake); then
        # Others edit crates/ while this runs: a working tree caught mid-edit may not build.
        if [ -x "$ONEJOB_TARGET_DIR/release/onejob" ] && [ -x "$ONEJOB_TARGET_DIR/release/onejob-fake" ]; then
            built=$(date -u -r "$ONEJOB_TARGET_DIR/release/onejob" +%FT%TZ)
            export BENCH_BUILD_NOTE="the working tree did not build at $(date -u +%FT%TZ); measured the last binary that built ($built)"
            say "WARNING: $BENCH_BUILD_NOTE"
        else
            exit 1
        fi
    fi
    say "building bench/loadgen (release) into $LOADGEN_TARGET_DIR"
    (cd "$here/loadgen" && CARGO_TARGET_DIR=$LOADGEN_TARGET_DIR cargo build --release --locked)
fi

if wants peers || wants worked; then
    node_dir=$BENCH_PEERS/node
    want_node="graphile-worker@$GRAPHILE_WORKER_VERSION pg-boss@$PG_BOSS_VERSION pg@$NODE_PG_VERSION"
    have_node=$(cd "$node_dir" 2>/dev/null && node -e '
        const v = (p) => { try { return require(p + "/package.json").version } catch { return "none" } };
        console.log(`graphile-worker@${v("graphile-worker")} pg-boss@${v("pg-boss")} pg@${v("pg")}`)' \
        2>/dev/null || true)
    if [ "$have_node" != "$want_node" ]; then
        say "installing $want_node into $node_dir (npm registry)"
        mkdir -p "$node_dir"
        [ -f "$node_dir/package.json" ] || echo '{"name":"onejob-bench-peers","private":true}' > "$node_dir/package.json"
        # shellcheck disable=SC2086
        (cd "$node_dir" && npm install --no-audit --no-fund --save-exact $want_node)
    fi
fi
if wants peers; then
    venv=$BENCH_PEERS/venv
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('procrastinate') != '$PROCRASTINATE_VERSION')" 2>/dev/null; then
        say "installing procrastinate==$PROCRASTINATE_VERSION into $venv (PyPI)"
        "$venv/bin/pip" install -q "procrastinate==$PROCRASTINATE_VERSION"
    fi
fi

say "load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
exec python3 "$here/harness.py" "${args[@]}"
