#!/usr/bin/env bash
# The failover scenario once more, with pg_auto_failover (Debian's
# postgresql-15-auto-failover) deciding and promoting instead of the test: a monitor, a
# primary and a synchronous standby, three onejob nodes on one multi-host URL, 16 clients
# submitting 600 keys over a minute (double clicks included). The primary's machine "dies"
# (SIGKILL of its pg_autoctl keeper, every service it started, the postmaster and its
# backends) five seconds in; the monitor notices and promotes the
# standby; then the old primary's keeper is started again and rejoins as a standby.
# RELIABILITY.md §10 records a run. Not part of CI: it needs pg_autoctl and takes a minute.
#
#   chaos/pg_auto_failover.sh   (as root; onejob, onejob-fake from $ONEJOB_BIN_DIR, default $CARGO_TARGET_DIR/debug)
set -euo pipefail
cd "$(dirname "$0")/.."
target="${ONEJOB_BIN_DIR:-${CARGO_TARGET_DIR:-/var/cache/onejob/target}/debug}"
command -v pg_autoctl >/dev/null || {
  apt-get install -y -qq postgresql-15-auto-failover >/dev/null
}
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
work=$(mktemp -d /tmp/onejob-paf-XXXX)
chown postgres "$work"
as_pg() { runuser -u postgres -- env PATH="$pgbin:$PATH" HOME="$work" XDG_DATA_HOME="$work/share" XDG_CONFIG_HOME="$work/config" "$@"; }
# A pid and its descendants (pg_autoctl's services rename themselves, "pg_autoctl: start/stop
# postgres", so only the tree finds them all).
tree() { echo "$1"; for child in $(pgrep -P "$1"); do tree "$child"; done; }
supervisor() { pgrep -f "pg_autoctl create [a-z]* --pgdata $work/$1 " || true; }
cleanup() {
  pkill -f "onejob serve --listen 127.0.0.1:1740" || true
  pkill -f "onejob-fake --listen 127.0.0.1:17409" || true
  for n in node1 node2 monitor; do
    for pid in $(supervisor "$n"); do kill -KILL $(tree "$pid") 2>/dev/null || true; done
  done
  for pid in $(pgrep -f "pg_autoctl run --pgdata $work/"); do kill -KILL $(tree "$pid") 2>/dev/null || true; done
  for n in node1 node2 monitor; do
    as_pg pg_ctl -D "$work/$n" -m immediate stop >/dev/null 2>&1 || true
  done
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

monitor="postgres://autoctl_node@127.0.0.1:17400/pg_auto_failover"
echo "== formation in $work: monitor :17400, node1 :17401 (primary), node2 :17402"
as_pg bash -c "pg_autoctl create monitor --pgdata $work/monitor --pgport 17400 --hostname 127.0.0.1 --auth trust --no-ssl --run > $work/monitor.log 2>&1 &"
until pg_isready -q -h 127.0.0.1 -p 17400; do sleep 0.5; done
sleep 3
for n in 1 2; do
  as_pg bash -c "pg_autoctl create postgres --pgdata $work/node$n --pgport 1740$n --hostname 127.0.0.1 --monitor $monitor --auth trust --no-ssl --dbname onejob --run > $work/node$n.log 2>&1 &"
  until pg_isready -q -h 127.0.0.1 -p 1740$n; do
    # The standby's pg_basebackup waits for a checkpoint on the primary: ask for one.
    psql -qAt -h 127.0.0.1 -p 17401 -U postgres -d postgres -c CHECKPOINT >/dev/null 2>&1 || true
    sleep 1
  done
done
state() { as_pg pg_autoctl show state --pgdata "$work/monitor" 2>/dev/null; }
# Until the primary commits synchronously (the monitor sets it once the standby caught up).
sync() { psql -qAt -h 127.0.0.1 -p 17401 -U postgres -d postgres -c 'SHOW synchronous_standby_names'; }
until [ -n "$(sync)" ]; do sleep 1; done
state
echo "synchronous_standby_names on node1: $(sync)"

url="postgres://postgres@127.0.0.1:17401,127.0.0.1:17402/onejob?target_session_attrs=read-write"
cat > "$work/onejob.toml" <<TOML
database = "$url"

[worker]
concurrency = 16
lease = "3000ms"
poll_interval = "3600000ms"
shutdown_grace = "500ms"

[[provider]]
name = "fake"
adapter = "fake"
base_url = "http://127.0.0.1:17409"
idempotency_header = "Idempotency-Key"

[[kind]]
name = "chat.completion"
providers = ["fake"]
attempt_timeout = "10000ms"
max_attempts = 3
retry_backoff = "100ms"
TOML
"$target/onejob-fake" --listen 127.0.0.1:17409 > "$work/fake.log" 2>&1 &
for i in 0 1 2; do
  RUST_LOG=warn "$target/onejob" serve --listen "127.0.0.1:1740$((i + 5))" --config "$work/onejob.toml" > "$work/onejob$i.log" 2>&1 &
done
for i in 5 6 7; do until curl -sf "http://127.0.0.1:1740$i/readyz" >/dev/null; do sleep 0.2; done; done
token=$("$target/onejob" keys create --database "$url" --tenant failover --user client)

echo "== storm over 60 s; the primary dies about 5 s in"
python3 chaos/pg_auto_failover_storm.py "$token" 600 16 "$work/history.jsonl" 60 &
storm=$!
sleep 5
# The whole machine at once: its keeper with every service it started, the postmaster and
# its backends (the tree is listed first: listing it takes a while under load).
doomed=$(tree "$(supervisor node1)")
kill -KILL $doomed
echo "kill $(date +%s.%N)" >> "$work/faults"
until psql -qAt -h 127.0.0.1 -p 17402 -U postgres -d postgres -c 'SELECT NOT pg_is_in_recovery()' 2>/dev/null | grep -q t; do sleep 0.1; done
echo "promoted $(date +%s.%N)" >> "$work/faults"
state
wait "$storm"

echo "== settled, counted on the new primary"
for _ in $(seq 1 300); do
  open=$(psql -qAt -h 127.0.0.1 -p 17402 -U postgres -d onejob -c "SELECT count(*) FROM jobs WHERE state NOT IN ('succeeded','failed','cancelled')")
  [ "$open" = 0 ] && break; sleep 1
done
psql -qAt -h 127.0.0.1 -p 17402 -U postgres -d onejob -c "SELECT 'jobs', count(*), count(DISTINCT (tenant, user_id, key_hash)), count(*) FILTER (WHERE state = 'succeeded') FROM jobs"
echo "fake side effects: $(curl -s http://127.0.0.1:17409/_fake/submissions | python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])')"

echo "== the old primary's keeper again: it rejoins as a standby"
as_pg bash -c "pg_autoctl run --pgdata $work/node1 > $work/node1-again.log 2>&1 &"
for _ in $(seq 1 120); do
  state | grep -q "17401.*secondary" && break; sleep 1
done
state
python3 chaos/pg_auto_failover_storm.py --report "$work/history.jsonl" "$work/faults"
