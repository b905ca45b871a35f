#!/usr/bin/env bash
# A/B of two onejob binaries: the same bench parts for each, which goes first in ABBA order per
# round, then after/before ratios with their spread (bench/ab.py does the work).
#
#   bench/ab.sh BEFORE AFTER                 3 rounds (about 2 minutes per binary per round)
#   bench/ab.sh BEFORE AFTER --rounds 5      more rounds, a tighter spread
#   bench/ab.sh BEFORE AFTER --worked-defaults   only the worked part at onejob's defaults
#                                            (1 and 2 processes, 20,000 jobs queued)
#   bench/ab.sh --summarize DIR              print an earlier A/B's table again
#
# Parts: intake new/replay at 8 and 32 clients, dispatch p50, e2e jobs/s, worked (onejob,
# one worker process, 5,000 jobs queued then worked). Results: $BENCH_AB_OUT
# (default /var/cache/onejob/ab/results), one harness results directory per (side, round),
# and summary.json. The load generator must be built (bench/run.sh builds it); onejob-fake
# is taken from next to BEFORE (onejob-fake or onejob-fake-before) unless --fake says.
# Run BEFORE = AFTER once to see the noise floor of this machine at this moment.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then sed -n '2,17p' "$0"; exit 0; fi
loadgen=${LOADGEN_TARGET_DIR:-${BENCH_CACHE:-/var/cache/onejob}/target-loadgen}/release/onejob-loadgen
if [ "${1:-}" != "--summarize" ]; then
    for binary in "${1:?BEFORE binary}" "${2:?AFTER binary}" "$loadgen"; do
        [ -x "$binary" ] || { echo "ab.sh: $binary is not an executable (run bench/run.sh once to build the load generator)" >&2; exit 1; }
    done
    pg_isready -q -h "${BENCH_PGHOST:-127.0.0.1}" -p "${BENCH_PGPORT:-5432}" || { echo "ab.sh: PostgreSQL is not answering" >&2; exit 1; }
fi
exec python3 "$here/ab.py" "$@"
