#!/usr/bin/env bash
# Where the machine's CPU goes during steady new-job intake on PostgreSQL: runs
# `onejob serve --no-worker` on a fresh database, drives it with onejob-loadgen, and over a
# window in the middle of the run reads /proc/stat (busy and idle, machine-wide) and every
# process's CPU time, grouped by program (postgres, onejob, onejob-loadgen, ...).
# Writes bench/results/cpu-split-<clients>.txt. Run bench/run.sh once first (it builds).
#
#   bench/cpu-split.sh [CLIENTS=8] [JOBS=120000]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
clients=${1:-8}
jobs=${2:-120000}  # the run must outlast the sampler (3 s, then 6 s measured): 20 s at 6,000/s
out=$here/results/cpu-split-$clients.txt
# shellcheck source=bench/serve-fresh.sh
. "$here/serve-fresh.sh"
serve_fresh split
"$loadgen" intake --addr "127.0.0.1:$port" --key "$key" --clients "$clients" --jobs 500 --warmup 0 --prefix w --pid $server >/dev/null
psql -X -q -d "$db" -c ANALYZE
python3 - "$out" "$clients" <<'PY' &
import collections, os, sys, time
def snap():
    d = collections.Counter()
    for p in os.listdir('/proc'):
        if not p.isdigit():
            continue
        try:
            s = open(f'/proc/{p}/stat').read()
        except OSError:
            continue
        f = s[s.rindex(')') + 2:].split()
        d[s[s.index('(') + 1:s.rindex(')')].split(':')[0]] += int(f[11]) + int(f[12])
    return d, [int(x) for x in open('/proc/stat').readline().split()[1:]]
time.sleep(3)
a, ca = snap(); t = time.time(); time.sleep(6); b, cb = snap(); t = time.time() - t
hz, cores = os.sysconf('SC_CLK_TCK'), os.cpu_count()
d = [y - x for x, y in zip(ca, cb)]
share = lambda n: 100 * n / sum(d) * cores
with open(sys.argv[1], 'w') as out:
    out.write(f"# CPU during new-job intake, {sys.argv[2]} clients, PostgreSQL, {time.strftime('%FT%TZ', time.gmtime())}, "
              f"load {open('/proc/loadavg').read().split()[:3]}; percent of one core, {cores} cores = {100 * cores}%\n\n")
    out.write(f"machine: user {share(d[0] + d[1]):.0f}%  system {share(d[2]):.0f}%  irq+softirq {share(d[5] + d[6]):.0f}%  "
              f"iowait {share(d[4]):.0f}%  idle {share(d[3]):.0f}%\n\n")
    for name, ticks in sorted(((k, b[k] - a.get(k, 0)) for k in b), key=lambda kv: -kv[1])[:8]:
        out.write(f"  {name:16s} {100 * ticks / hz / t:5.1f}%\n")
PY
sampler=$!
"$loadgen" intake --addr "127.0.0.1:$port" --key "$key" --clients "$clients" --jobs "$jobs" --warmup 0 --prefix m --pid $server > "$work/split-loadgen.json"
wait $sampler
python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['intake']; print(f\"\nreq/s {r['rps']:.0f}  p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms\")" "$work/split-loadgen.json" >> "$out"
cat "$out"
