#!/usr/bin/env bash
# Hostile input (RELIABILITY.md): schemathesis against a running onejob's /openapi.json
# (all checks, stateful phase included), then the cargo-fuzz targets for a bounded time.
#
#   chaos/hostile.sh [--quick|--full]
#
# --quick (CI): schemathesis for 60 s, no fuzzing (the sanitizer build of onejob alone takes
# longer than CI's quick form may). --full: schemathesis for 10 min, each fuzz target 5 min.
#
# schemathesis lives in a venv under /var/cache/onejob (created, then reused); cargo-fuzz is
# installed from crates.io when missing. The fuzzers need a nightly toolchain or, on stable,
# RUSTC_BOOTSTRAP=1 (used when no nightly is installed).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=quick
[ "${1:-}" = "--full" ] && mode=full
if [ "$mode" = full ]; then examples=300; fuzz_seconds=300; st_time=600; else examples=25; fuzz_seconds=0; st_time=60; fi

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/onejob/target}"
export CARGO_TERM_COLOR=never
out="${ONEJOB_CHAOS_OUT:-$PWD/chaos/out}"
mkdir -p "$out"
bin="$CARGO_TARGET_DIR/debug/onejob"
[ -x "$bin" ] || cargo build --locked -p onejob --bins

echo "== schemathesis ($mode)"
venv=/var/cache/onejob/venv-schemathesis
if [ ! -x "$venv/bin/schemathesis" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check schemathesis
fi
work="$(mktemp -d)"
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
db="sqlite://$work/onejob.db"
"$bin" migrate --database "$db" 2>/dev/null
key="$("$bin" keys create --database "$db" --tenant schemathesis --user st --operator)"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
RUST_LOG=warn "$bin" serve --demo --database "$db" --listen "127.0.0.1:$port" >"$out/schemathesis-server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.2; done
# Real jobs for the path `id`s and configured kinds for the bodies, so that the generated
# requests reach the handlers behind the 404s and 400s, not only the refusals.
jobs=""
for n in 1 2 3; do
  id="$(curl -fs "http://127.0.0.1:$port/v1/jobs" -H "Authorization: Bearer $key" \
    -H "Idempotency-Key: schemathesis-seed-$n" -H 'Content-Type: application/json' \
    -d "{\"kind\": \"chat.completion\", \"params\": {\"prompt\": \"seed $n\"}}" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')"
  jobs="$jobs\"$id\", "
done
# The dashboard (/ui) is HTML for browsers and not in the API document; the browser test
# (e2e/) covers it.
# `positive_data_acceptance` is off for POST /v1/jobs and the gateway's POSTs only:
# which kinds (and models) exist and what their params must look like is configuration that
# the static document cannot state (RELIABILITY.md). Every other check runs on every
# operation.
cat >"$work/schemathesis.toml" <<TOML
[checks]
enabled = true

[dictionaries.jobs]
values = [${jobs}]

[dictionaries.kinds]
values = ["chat.completion", "image.generate", "chat.fast"]

[dictionaries.models]
values = ["fast"]

[parameters]
"path.id" = { dictionary = "jobs", probability = 0.7 }
"body.kind" = { dictionary = "kinds", probability = 0.7 }
"body.model" = { dictionary = "models", probability = 0.7 }

[[operations]]
include-operation-id = "submitJob"
checks.positive_data_acceptance.enabled = false

[[operations]]
include-operation-id = "createChatCompletion"
checks.positive_data_acceptance.enabled = false

[[operations]]
include-operation-id = "createEmbedding"
checks.positive_data_acceptance.enabled = false

[[operations]]
include-operation-id = "createResponse"
checks.positive_data_acceptance.enabled = false

[[operations]]
include-operation-id = "createImage"
checks.positive_data_acceptance.enabled = false

[[operations]]
include-operation-id = "createMessage"
checks.positive_data_acceptance.enabled = false
TOML
"$venv/bin/schemathesis" --config-file "$work/schemathesis.toml" run \
  "http://127.0.0.1:$port/openapi.json" \
  --header "Authorization: Bearer $key" \
  --max-examples "$examples" \
  --max-time "$st_time" \
  --workers 1 \
  --request-timeout 20 \
  --report junit --report-dir "$out/schemathesis" \
  --seed 20261130 \
  2>&1 | tee "$out/schemathesis.txt" | tail -n 40
status=${PIPESTATUS[0]}
if grep -q '^\[5[0-9][0-9]\]' "$out/schemathesis.txt"; then
  echo "schemathesis saw a 5xx"; exit 1
fi
[ "$status" = 0 ] || { echo "schemathesis found failures (see $out/schemathesis.txt)"; exit 1; }

if [ "$fuzz_seconds" = 0 ] || [ -n "${ONEJOB_SKIP_FUZZ:-}" ]; then
  echo "== hostile input passed (fuzzing runs with --full)"
  exit 0
fi
echo "== cargo fuzz ($mode: ${fuzz_seconds}s per target)"
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
toolchain=()
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  toolchain=(+nightly)
else
  export RUSTC_BOOTSTRAP=1
fi
for target in idempotency_key fingerprint config; do
  mkdir -p "$out/fuzz-corpus/$target"
  cargo "${toolchain[@]}" fuzz run --fuzz-dir chaos/fuzz "$target" \
    "$out/fuzz-corpus/$target" "chaos/fuzz/corpus/$target" \
    -- -max_total_time="$fuzz_seconds" -max_len=4096 -print_final_stats=1 2>&1 \
    | tee "$out/fuzz-$target.txt" | grep -E "Done|stat::number_of_executed_units|ERROR|panicked" || true
  if grep -qE "ERROR: libFuzzer|panicked at|SUMMARY: " "$out/fuzz-$target.txt"; then
    echo "fuzz target $target failed (see $out/fuzz-$target.txt)"; exit 1
  fi
done
echo "== hostile input passed"
