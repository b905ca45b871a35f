#!/usr/bin/env python3
"""onejob's benchmark harness (run it through bench/run.sh, which builds and installs first).

Runs each contender in turn on this machine's PostgreSQL, on a fresh database per run,
records every run in bench/results/<part>.json, then writes BENCHMARKS.md and
bench/plot.svg through bench/report.py.

Parts (--parts, comma separated; default all):
  machine   CPU, memory, kernel, PostgreSQL version and settings, pg_test_fsync
  ceiling   pgbench: onejob's single INSERT … ON CONFLICT DO NOTHING (the physical ceiling),
            and onejob's own SQL for one intake (auth SELECT + BEGIN/INSERT/INSERT/COMMIT)
  intake    onejob over HTTP, --no-worker: new keys then replays, PostgreSQL and SQLite
  dispatch  201 -> provider call latency (load generator's sink), PostgreSQL and SQLite
  e2e       jobs/s end to end through onejob-fake at zero latency, PostgreSQL and SQLite
  peers     graphile-worker, pg-boss, Procrastinate: enqueue with their dedupe feature,
            then the duplicate submissions, rows counted after
  growth    intake at 0, 1 M, 10 M existing jobs (bulk loaded into onejob's jobs table), short
            runs right after a checkpoint (the worst case), each followed by onejob's SQL alone
  steady    the same sizes, long runs (--steady-jobs, default 600,000; --steady-runs, default 2),
            spanning checkpoints as production does (about 16 minutes)
  rss       onejob's VmRSS holding 1,000 keep-alive connections (one POST on each)
  worked    jobs WORKED per second (submit -> worker -> provider -> result): onejob's
            `onejob worker` processes (1 and 2) beside a `serve --no-worker` node, on onejob-fake,
            vs pg-boss's and graphile-worker's own workers with a no-op handler; a short sweep
            of each contender's knobs first, then the best configuration of each, interleaved:
            N jobs queued then worked, and (--worked-modes) submitted while being worked
  nodes     intake (new keys) through 1 and 3 `serve --no-worker` nodes on one database, at each
            of --clients (total), one load generator per node; CPU by program, this database's WAL
  footprint --footprint-jobs jobs worked for real, copied with their attempts and events to
            --footprint-total; rows and bytes per table and per index, WAL per job (pg_waldump)
  citus     intake (new keys, replays; --citus-clients) and jobs worked per second (queued, one
            `onejob worker` at onejob's defaults) on one PostgreSQL and on Citus (a coordinator and
            1 and 2 workers), each a throwaway cluster the harness starts here (initdb, same
            settings), interleaved; the jobs spread over --citus-tenants tenants' API keys
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import pathlib
import platform
import queue
import re
import shlex
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
SQL = BENCH / "sql"
RESULTS = pathlib.Path(os.environ.get("BENCH_RESULTS", BENCH / "results"))
CACHE = pathlib.Path(os.environ.get("BENCH_CACHE", "/var/cache/onejob"))
ONEJOB_TARGET = pathlib.Path(os.environ.get("ONEJOB_TARGET_DIR", CACHE / "target-bench"))
# BENCH_ONEJOB / BENCH_FAKE: measure other binaries than the ones run.sh built (bench/ab.sh).
ONEJOB = pathlib.Path(os.environ.get("BENCH_ONEJOB", ONEJOB_TARGET / "release" / "onejob"))
FAKE = pathlib.Path(os.environ.get("BENCH_FAKE", ONEJOB_TARGET / "release" / "onejob-fake"))
LOADGEN = pathlib.Path(os.environ.get("LOADGEN_TARGET_DIR", CACHE / "target-loadgen")) / "release" / "onejob-loadgen"
PEERS = pathlib.Path(os.environ.get("BENCH_PEERS", CACHE / "bench-peers"))
WORK = pathlib.Path(os.environ.get("BENCH_WORK", CACHE / "bench-run"))

PGHOST = os.environ.get("BENCH_PGHOST", "127.0.0.1")
PGPORT = os.environ.get("BENCH_PGPORT", "5432")
PGUSER = os.environ.get("BENCH_PGUSER", "postgres")
PG_URL = f"postgres://{PGUSER}@{PGHOST}:{PGPORT}"
# Query parameters for onejob's database URLs, e.g. `sslmode=disable`: without one, onejob
# (sqlx) uses libpq's default, `prefer`, which speaks TLS to a server that offers it, as
# this one does.
PG_URL_QUERY = os.environ.get("BENCH_PG_URL_QUERY", "")
# Every database this harness creates starts with this (BENCH_DB: another prefix, so that two
# harnesses on one server never share a database).
DB = os.environ.get("BENCH_DB", "onejob_bench")
# PostgreSQL's default max_connections is 100 and other programs share the server: no
# contender opens more than this many database connections (pgbench clients, peer pools).
DB_CONN_CAP = int(os.environ.get("BENCH_DB_CONN_CAP", "64"))

PORT_ONEJOB = int(os.environ.get("BENCH_PORT", "18080"))
PORT_SINK = PORT_ONEJOB + 320
PORT_FAKE = PORT_ONEJOB + 321
ONEJOB_ADDR = f"127.0.0.1:{PORT_ONEJOB}"

ENV = dict(os.environ, PGHOST=PGHOST, PGPORT=PGPORT, PGUSER=PGUSER)


# ----------------------------------------------------------------------------- helpers

def log(message: str) -> None:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"[{dt.datetime.now():%H:%M:%S} load {load}] {message}", file=sys.stderr, flush=True)


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def cmdline(cmd: list[str]) -> str:
    return " ".join(shlex.quote(str(c)) for c in cmd)


def run(cmd: list, *, check=True, timeout=3600, env=None, cwd=None) -> subprocess.CompletedProcess:
    cmd = [str(c) for c in cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env or ENV, cwd=cwd)
    if check and done.returncode != 0:
        raise RuntimeError(f"{cmdline(cmd)} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return done


def run_json(cmd: list, **kw) -> dict:
    out = run(cmd, **kw).stdout
    return json.loads(out[out.index("{"):])


def psql(db: str, sql: str, timeout=7200) -> str:
    return run(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", db, "-c", sql], timeout=timeout).stdout.strip()


def psql_file(db: str, path: pathlib.Path, variables: dict | None = None, timeout=7200) -> str:
    cmd = ["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", db, "-f", str(path)]
    for k, v in (variables or {}).items():
        cmd += ["-v", f"{k}={v}"]
    return run(cmd, timeout=timeout).stdout.strip()


def create_db(name: str, template: str | None = None) -> None:
    drop_db(name)
    if template:
        psql("postgres", f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY FILE_COPY')
        # The copy leaves gigabytes of dirty pages in the OS cache; written back during the
        # measurement, they compete with the WAL flushes being measured. Flush them first.
        os.sync()
    else:
        psql("postgres", f'CREATE DATABASE "{name}"')


def drop_db(name: str) -> None:
    psql("postgres", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def sqlite_path(name: str) -> pathlib.Path:
    return WORK / f"{name}.db"


def drop_sqlite(name: str) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        p = pathlib.Path(str(sqlite_path(name)) + suffix)
        if p.exists():
            p.unlink()


def db_url(backend: str, name: str) -> str:
    if backend == "postgres":
        return f"{PG_URL}/{name}" + (f"?{PG_URL_QUERY}" if PG_URL_QUERY else "")
    return f"sqlite://{sqlite_path(name)}"


def fresh(backend: str, name: str) -> str:
    """A fresh, migrated onejob database; its URL."""
    if backend == "postgres":
        create_db(name)
    else:
        drop_sqlite(name)
    url = db_url(backend, name)
    run([ONEJOB, "migrate", "--database", url])
    return url


def discard(backend: str, name: str) -> None:
    if backend == "postgres":
        drop_db(name)
    else:
        drop_sqlite(name)


def api_key(url: str) -> str:
    return run([ONEJOB, "keys", "create", "--database", url, "--tenant", "bench", "--user", "bench"]).stdout.strip()


def pg_snapshot(db: str) -> dict:
    """Cluster-wide WAL counters (pg_stat_wal) and transaction ids assigned (the next xid: one
    per writing transaction), other databases' traffic included, and this database's commit
    count (read-only statements count as commits too) and rows inserted, updated and deleted
    (tables' own rows, not index entries), read from the `postgres` database so that the
    read itself is not counted."""
    row = psql("postgres", "SELECT json_build_object('wal_records', w.wal_records, 'wal_bytes', w.wal_bytes, "
               "'wal_write', w.wal_write, 'wal_sync', w.wal_sync, 'xact_commit', d.xact_commit, "
               "'rows_written', d.tup_inserted + d.tup_updated + d.tup_deleted, "
               "'xact_rollback', d.xact_rollback, 'next_xid', pg_snapshot_xmax(pg_current_snapshot())::text::bigint) "
               f"FROM pg_stat_wal w, pg_stat_database d WHERE d.datname = '{db}'")
    return json.loads(row) if row else {}


def pg_delta(before: dict, after: dict, jobs: int) -> dict:
    """What one measured phase cost the database, per job."""
    if not before or not after or not jobs:
        return {}
    d = {k: after[k] - before[k] for k in before}
    return {
        "commits": d["xact_commit"], "wal_syncs": d["wal_sync"], "wal_bytes": int(d["wal_bytes"]),
        "write_xacts": d["next_xid"], "rows_written": d["rows_written"],
        "jobs_per_write_xact": jobs / d["next_xid"] if d["next_xid"] else None,
        "commits_per_job": d["xact_commit"] / jobs,
        "jobs_per_commit": jobs / d["xact_commit"] if d["xact_commit"] else None,
        "jobs_per_wal_sync": jobs / d["wal_sync"] if d["wal_sync"] else None,
        "wal_bytes_per_job": int(d["wal_bytes"]) / jobs,
    }


def settle() -> None:
    """Idle backends flush their pending statistics within about a second (PostgreSQL 15)."""
    time.sleep(1.2)


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


CONFIG = """\
# Written by bench/harness.py for one benchmark run.
listen = "{listen}"
database = "{database}"

[worker]
{concurrency_line}poll_interval = "{poll_interval}"

[[provider]]
name = "upstream"
adapter = "openai-chat"
base_url = "{provider_url}"
model = "bench"

[[kind]]
name = "bench.chat"
providers = ["upstream"]
attempt_timeout = "30s"
max_attempts = 3

[kind.params_schema]
type = "object"
required = ["prompt"]
additionalProperties = false
[kind.params_schema.properties.prompt]
type = "string"
minLength = 1
maxLength = 20000

[kind.output_schema]
type = "object"
required = ["text"]
[kind.output_schema.properties.text]
type = "string"
minLength = 1

# The gateway part: POST /v1/chat/completions with model "bench" is a job of this kind.
[[kind]]
name = "bench.gateway"
openai_models = ["bench"]
providers = ["upstream"]
attempt_timeout = "30s"
max_attempts = 3
"""


class Server:
    """A background process (onejob, onejob-fake, a load generator with its sink)."""

    def __init__(self, name: str, cmd: list, log_name: str, env: dict | None = None):
        self.cmd = [str(c) for c in cmd]
        self.log_path = WORK / f"{log_name}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE if name == "loadgen" else self.log,
                                     stderr=self.log, env=env or ENV, text=True)
        self.name = name

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def start_onejob(url: str, *, worker: bool, provider_url: str, tag: str, concurrency=16,
                 poll_interval="2s", listen: str = ONEJOB_ADDR, env: dict | None = None) -> Server:
    config = WORK / f"{tag}.toml"
    # concurrency None: the setting left out, onejob's default.
    concurrency_line = "" if concurrency is None else f"concurrency = {concurrency}\n"
    config.write_text(CONFIG.format(listen=listen, database=url, concurrency_line=concurrency_line,
                                    poll_interval=poll_interval, provider_url=provider_url))
    cmd = [ONEJOB, "serve", "--config", config] + ([] if worker else ["--no-worker"])
    server = Server("onejob", cmd, tag, env=env)
    deadline = time.time() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://{listen}/readyz", timeout=2) as r:
                if r.status == 200:
                    return server
        except Exception:  # noqa: BLE001 - not up yet
            pass
        if server.proc.poll() is not None or time.time() > deadline:
            server.stop()
            raise RuntimeError(f"onejob did not start: see {server.log_path}\n{server.log_path.read_text()[-3000:]}")
        time.sleep(0.1)


def save(part: str, data: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{part}.json"
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    log(f"wrote {path}")


def part_record(opts, part: str) -> dict:
    return {
        "part": part,
        "mode": "quick" if opts.quick else "full",
        "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "loadavg_start": loadavg(),
        "settings": {**{k: getattr(opts, k) for k in ("runs", "jobs", "warmup", "clients", "duration")},
                     "pg_url_query": PG_URL_QUERY},
        "binary": binary_provenance(),
        "runs": [],
        "commands": {},
    }


def binary_provenance() -> dict:
    """Which onejob was measured: the binary's hash and build time, and the commit checked out
    here (machine.json records the same once, but parts are rerun on their own)."""
    return {
        "sha256": run(["sha256sum", ONEJOB]).stdout.split()[0],
        "built": dt.datetime.fromtimestamp(ONEJOB.stat().st_mtime, dt.timezone.utc).isoformat(timespec="seconds"),
        "build_note": os.environ.get("BENCH_BUILD_NOTE", ""),
        "git_head": run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], check=False).stdout.strip(),
        "git_dirty_files": len(run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "crates"],
                                   check=False).stdout.splitlines()),
    }


PG_WALDUMP = pathlib.Path(os.environ.get("BENCH_PG_WALDUMP", "/usr/lib/postgresql/15/bin/pg_waldump"))
WALDUMP_LINE = re.compile(r"len \(rec/tot\):\s*\d+/\s*(\d+), tx:\s*(\d+), lsn: ([0-9A-F]+)/([0-9A-F]+),.*?desc: (\S+)")
WALDUMP_DB = re.compile(r"blkref #\d+: rel \d+/(\d+)/")


def current_lsn() -> int:
    hi, lo = psql("postgres", "SELECT pg_current_wal_insert_lsn()").split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


class WalOfDatabase:
    """The WAL one database wrote between start() and finish(), read with pg_waldump from
    pg_wal: the cluster-wide counters (pg_stat_wal) also count other sessions' traffic on this
    shared server (their test suites create and fill databases), which on this machine can be
    megabytes per second. A record is this database's if one of its block references names a
    relation of the database, or if its transaction wrote such a record (its COMMIT). follow:
    `pg_waldump --follow` reads alongside the phase, a few MB behind the server at most: other
    sessions drop databases here all the time, each DROP DATABASE forces a checkpoint, and a
    checkpoint recycles every segment before it within seconds (it costs some CPU during the
    phase: CpuSampler shows it as `pg_waldump`; when other programs take the cores it can fall
    behind and lose segments, and that run has no figure: None). Otherwise the range is read after the phase
    (nothing runs during it; None if the segments are already gone). Sums `tot` (record and
    full-page images)."""

    def __init__(self, db: str, follow: bool = False):
        self.db_oid = psql("postgres", f"SELECT oid FROM pg_database WHERE datname = '{db}'")
        self.follow = follow
        self.wal_dir = pathlib.Path(psql("postgres", "SHOW data_directory")) / "pg_wal"
        # in memory if possible: the dump is written while the phase runs, beside its WAL flushes
        shm = pathlib.Path("/dev/shm")
        self.out = (shm if shm.is_dir() else WORK) / f"onejob-bench-waldump-{db}.txt"
        self.proc = None
        self.start = current_lsn()
        self.thread = None
        if follow and PG_WALDUMP.exists():
            # pg_waldump fails if no record has been flushed after its start yet: wait for one
            self.thread = threading.Thread(target=self._follow, daemon=True)
            self.thread.start()

    def _follow(self) -> None:
        deadline = time.time() + 60
        while time.time() < deadline:
            flushed = psql("postgres", "SELECT pg_current_wal_flush_lsn()").split("/")
            if (int(flushed[0], 16) << 32) | int(flushed[1], 16) > self.start:
                break
            time.sleep(0.05)
        self.proc = subprocess.Popen([str(PG_WALDUMP), "--follow", "-p", str(self.wal_dir), "-s", lsn_text(self.start)],
                                     stdout=open(self.out, "w"), stderr=subprocess.STDOUT, env=ENV)

    def finish(self) -> dict | None:
        end = current_lsn()
        if not PG_WALDUMP.exists():
            return None
        if self.thread:
            self.thread.join()
        if self.proc:
            # one small record after `end` (a COMMIT of an xid, in the `postgres` database), so
            # that pg_waldump has something to read past it even if nothing else writes
            psql("postgres", "SELECT pg_current_xact_id()")
            deadline = time.time() + 30
            while time.time() < deadline and self._last_lsn() < end:  # others write WAL all the time here
                time.sleep(0.5)
            self.proc.terminate()
            self.proc.wait(timeout=10)
        else:
            with open(self.out, "w") as out:
                subprocess.run([str(PG_WALDUMP), "-p", str(self.wal_dir), "-s", lsn_text(self.start), "-e", lsn_text(end)],
                               stdout=out, stderr=subprocess.STDOUT, env=ENV, timeout=600)
        mine = {"bytes": 0, "records": 0, "fpi_records": 0, "commits": 0}
        others = {"bytes": 0, "commits": 0}
        xids: set = set()
        last = 0
        with open(self.out) as lines:
            for line in lines:
                m = WALDUMP_LINE.search(line)
                if not m:
                    continue
                tot, xid, lsn, kind = int(m.group(1)), int(m.group(2)), (int(m.group(3), 16) << 32) | int(m.group(4), 16), m.group(5)
                if lsn < self.start or lsn >= end:
                    continue
                last = max(last, lsn)
                ours = self.db_oid in WALDUMP_DB.findall(line)
                if ours and xid:
                    xids.add(xid)
                if ours or (xid and xid in xids):
                    mine["bytes"] += tot
                    mine["records"] += 1
                    mine["fpi_records"] += line.count(" FPW")
                    mine["commits"] += kind == "COMMIT"
                else:
                    others["bytes"] += tot
                    others["commits"] += kind == "COMMIT"
        if not last or end - last > 1 << 20:  # did not get (near) the end: segments recycled, or no dump
            tail = run(["tail", "-c", "600", self.out], check=False).stdout
            self.out.unlink(missing_ok=True)
            log(f"pg_waldump did not cover {lsn_text(self.start)}..{lsn_text(end)} (last record {lsn_text(last)}): {tail}")
            return None
        self.out.unlink(missing_ok=True)
        return {"start": lsn_text(self.start), "end": lsn_text(end), "range_bytes": end - self.start,
                "database": mine, "others": others}

    def close(self) -> None:
        """Stops a following pg_waldump (a failed phase) and removes its output."""
        if self.thread:
            self.thread.join()
            self.thread = None
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.out.unlink(missing_ok=True)

    def _last_lsn(self) -> int:
        try:
            with open(self.out, "rb") as f:
                f.seek(max(0, self.out.stat().st_size - 4096))
                tail = f.read().decode(errors="replace").splitlines()
        except OSError:
            return 0
        for line in reversed(tail):
            m = WALDUMP_LINE.search(line)
            if m:
                return (int(m.group(3), 16) << 32) | int(m.group(4), 16)
        return 0


class CpuSampler:
    """Where the machine's CPU went during a phase: /proc/stat (busy and idle, machine-wide)
    at its start and end, and every process's CPU time (utime + stime) sampled every 200 ms
    by a background thread, grouped by program (`postgres`, `onejob`, `onejob-loadgen`;
    everything else is `other`: on this shared machine, mostly other sessions' compilers).
    Sampling keeps the last value seen of each process, so one that exits during the phase
    (a load generator) loses at most its last 200 ms."""

    OURS = ("postgres", "onejob", "onejob-loadgen", "pg_waldump")

    def __init__(self):
        self.hz = os.sysconf("SC_CLK_TCK")
        self.first: dict = {}
        self.last: dict = {}
        self.stop_event = threading.Event()
        self.machine_before = self._machine()
        self._sample(first=True)
        self.t0 = time.monotonic()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    @staticmethod
    def _machine() -> list[int]:
        return [int(x) for x in pathlib.Path("/proc/stat").read_text().splitlines()[0].split()[1:]]

    def _sample(self, first: bool = False) -> None:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                s = pathlib.Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            comm = s[s.index("(") + 1:s.rindex(")")].split(":")[0]
            f = s[s.rindex(")") + 2:].split()
            key = (int(pid), f[19], comm)  # pid, start time: a reused pid is another process
            ticks = int(f[11]) + int(f[12])
            if first:
                self.first[key] = ticks
            self.last[key] = ticks

    def _loop(self) -> None:
        while not self.stop_event.wait(0.2):
            self._sample()

    def finish(self) -> dict:
        self._sample()
        seconds = time.monotonic() - self.t0
        self.stop_event.set()
        self.thread.join()
        d = [b - a for a, b in zip(self.machine_before, self._machine())]
        total = sum(d) or 1
        cores = os.cpu_count()
        busy = total - d[3] - d[4]  # all but idle and iowait
        by: dict = {}
        for key, ticks in self.last.items():
            name = key[2] if key[2] in self.OURS else "other"
            by[name] = by.get(name, 0) + ticks - self.first.get(key, 0)
        # percent of one core over the phase (cores x 100 % is the whole machine)
        cores_pct = lambda ticks: round(100 * ticks / self.hz / seconds, 1)  # noqa: E731
        return {"seconds": round(seconds, 3), "cores": cores,
                "machine_busy_pct": round(100 * cores * busy / total, 1),
                "machine_iowait_pct": round(100 * cores * d[4] / total, 1),
                "by_program_pct": {k: cores_pct(v) for k, v in sorted(by.items(), key=lambda kv: -kv[1])}}


def finish(rec: dict) -> dict:
    rec["loadavg_end"] = loadavg()
    rec["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    return rec


def note_command(rec: dict, label: str, cmd) -> None:
    text = cmdline([str(c) for c in cmd]) if isinstance(cmd, list) else cmd
    for var in ("$KEY", "$ONEJOB_PID"):
        text = text.replace(f"'{var}'", var)
    rec["commands"].setdefault(label, text)


# ----------------------------------------------------------------------------- parts

def part_machine(opts) -> None:
    cpuinfo = pathlib.Path("/proc/cpuinfo").read_text()
    models = sorted(set(re.findall(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)))
    flags = re.search(r"^flags\s*:\s*(.+)$", cpuinfo, re.M)
    meminfo = pathlib.Path("/proc/meminfo").read_text()
    mem_kib = int(re.search(r"MemTotal:\s+(\d+)", meminfo).group(1))
    settings = psql("postgres", "SELECT name || '=' || current_setting(name) || ' (' || source || ')' FROM pg_settings "
                    "WHERE name IN ('max_connections','shared_buffers','fsync','synchronous_commit','wal_sync_method',"
                    "'commit_delay','commit_siblings','full_page_writes','wal_level','max_wal_size','checkpoint_timeout',"
                    "'wal_buffers','work_mem','autovacuum','effective_io_concurrency','huge_pages','wal_compression') ORDER BY name")
    fsync = run(["/usr/lib/postgresql/15/bin/pg_test_fsync", "-s", "2", "-f", str(WORK / "pg_test_fsync.tmp")],
                check=False, timeout=300).stdout if pathlib.Path("/usr/lib/postgresql/15/bin/pg_test_fsync").exists() else ""
    fdatasync = re.search(r"fdatasync\s+([\d,.]+) ops/sec", fsync)
    df = run(["df", "-h", str(WORK)], check=False).stdout
    data_dir = psql("postgres", "SHOW data_directory")
    versions = {
        "onejob": run([ONEJOB, "--version"], check=False).stdout.strip(),
        "rustc": run(["rustc", "--version"], check=False).stdout.strip(),
        "node": run(["node", "--version"], check=False).stdout.strip(),
        "python": platform.python_version(),
        "pgbench": run(["pgbench", "--version"], check=False).stdout.strip(),
    }
    save("machine", {
        "part": "machine",
        "taken": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu_models": models,
        "nproc": os.cpu_count(),
        "cpu_flags_has_avx2": bool(flags and "avx2" in flags.group(1).split()),
        "mem_gib": round(mem_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "postgres_version": psql("postgres", "SELECT version()"),
        "postgres_settings": settings.splitlines(),
        "postgres_data_directory": data_dir,
        "pg_test_fsync_fdatasync_ops_per_s": float(fdatasync.group(1).replace(",", "")) if fdatasync else None,
        "pg_test_fsync": fsync,
        "df": df,
        "loadavg": loadavg(),
        "versions": versions,
        "onejob_binary": {
            "path": str(ONEJOB),
            "built": dt.datetime.fromtimestamp(ONEJOB.stat().st_mtime, dt.timezone.utc).isoformat(timespec="seconds"),
            "sha256": run(["sha256sum", ONEJOB]).stdout.split()[0],
            "build_note": os.environ.get("BENCH_BUILD_NOTE", ""),
        },
        "git_head": run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], check=False).stdout.strip(),
        "git_dirty_files": len(run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "crates"], check=False).stdout.splitlines()),
    })


def conn_cap() -> int:
    """How many connections a contender may open now: at most DB_CONN_CAP, and no more than
    the server has free (max_connections - reserved - in use) minus a margin of 20 for
    onejob's own pool and other programs."""
    free = int(psql("postgres", "SELECT current_setting('max_connections')::int "
                    "- current_setting('superuser_reserved_connections')::int - count(*) FROM pg_stat_activity"))
    return max(4, min(DB_CONN_CAP, free - 20))


def pgbench(db: str, script: pathlib.Path, clients: int, duration: int, extra=()) -> tuple[list, dict]:
    for attempt in range(4):
        try:
            return pgbench_once(db, script, clients, duration, extra)
        except RuntimeError as error:
            if "too many clients" not in str(error) or attempt == 3:
                raise
            log("pgbench: too many clients on the server (other programs); retrying in 15 s")
            time.sleep(15)
    raise AssertionError("unreachable")


def pgbench_once(db: str, script: pathlib.Path, clients: int, duration: int, extra=()) -> tuple[list, dict]:
    conns = min(clients, conn_cap())
    logdir = WORK / "pgbench-log"
    shutil.rmtree(logdir, ignore_errors=True)
    logdir.mkdir(parents=True)
    cmd = ["pgbench", "-n", "-M", "prepared", "-f", script, "-c", conns, "-j", min(conns, os.cpu_count() or 2),
           "-T", duration, "-l", "--log-prefix", logdir / "tx", *extra, db]
    before = pg_snapshot(db)
    done = run(cmd, timeout=duration * 4 + 120)
    settle()
    after = pg_snapshot(db)
    out = done.stdout
    tps = float(re.search(r"tps = ([\d.]+) \(without initial connection time\)", out).group(1))
    failed = int((re.search(r"number of failed transactions: (\d+)", out) or [0, 0])[1])
    lat = []
    for f in logdir.iterdir():
        for line in f.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[2].isdigit():
                lat.append(int(parts[2]) / 1000.0)
    lat.sort()

    def pick(q):
        return lat[min(len(lat), max(1, math.ceil(q * len(lat)))) - 1] if lat else None

    shutil.rmtree(logdir, ignore_errors=True)
    return cmd, {"clients": clients, "connections": conns, "rps": tps, "failed": failed, "transactions": len(lat),
                 "pg": pg_delta(before, after, len(lat)),
                 "p50_ms": pick(0.5), "p90_ms": pick(0.9), "p99_ms": pick(0.99), "max_ms": lat[-1] if lat else None}


def onejob_sql_database(opts, name: str, template: str | None = None) -> list:
    """A database for pgbench running onejob's own statement (bench/sql/onejob_tx.pgbench):
    a copy of `template`, or a fresh migrated one; then the same warm-up and `ANALYZE` as
    onejob over HTTP gets. Returns pgbench's extra arguments (the API key id the script
    needs). Without the ANALYZE, on a jobs table that holds rows but was never analyzed, the
    generic plans pgbench's prepared statements switch to after five executions look the key
    up through the owner's index (jobs_owner_recent ties with the unique index on cost there)
    and read every job of the owner per lookup: 1,600-2,000 tps at 32 clients instead of
    8,600-9,500 (2026-11-30)."""
    if template:
        create_db(name, template=template)
        url = db_url("postgres", name)
    else:
        url = fresh("postgres", name)
    extra = ["-D", f"keyid={api_key(url).split('_')[1]}"]
    run(["pgbench", "-n", "-M", "prepared", "-f", SQL / "onejob_tx.pgbench", "-c", 1, "-t", opts.warmup, *extra, name],
        timeout=600)
    psql(name, "ANALYZE")
    return extra


def ceiling_one(opts, rec: dict, run_index: int, clients: int) -> None:
    """pgbench at this client count: the ceiling, then (unless --no-decompose) the ceiling
    with a NOTIFY in its transaction, with a NOTIFY after its commit, and onejob's own
    statement for a batch of one."""
    name = f"{DB}_ceiling"
    variants = [("pgbench-ceiling", "ceiling.pgbench", False)]
    if opts.decompose:
        variants += [("pgbench-ceiling-notify", "ceiling_notify.pgbench", False),
                     ("pgbench-ceiling-notify-after", "ceiling_notify_after.pgbench", False),
                     ("pgbench-onejob-sql", "onejob_tx.pgbench", True)]
    for contender, script, onejob_schema in variants:
        extra = []
        if onejob_schema:
            extra = onejob_sql_database(opts, name)
        else:
            create_db(name)
            psql_file(name, SQL / "ceiling_schema.sql")
        cmd, r = pgbench(name, SQL / script, clients, opts.duration, extra=extra)
        note_command(rec, contender, cmd)
        r["rows"] = int(psql(name, "SELECT count(*) FROM jobs"))
        drop_db(name)
        rec["runs"].append({"contender": contender, "backend": "postgres", "run": run_index, "loadavg": loadavg(), **r})
        log(f"{contender} c={clients} run {run_index}: {r['rps']:.0f} tps p50 {r['p50_ms']:.2f} ms, "
            f"jobs per WAL sync {r['pg'].get('jobs_per_wal_sync') or 0:.1f}")


def loadgen_pass(rec: dict, server, key: str, clients: int, jobs: int, prefix: str, replay: bool, label: str) -> dict:
    """One `onejob-loadgen intake` call (no internal warm-up) against a running onejob; the
    phase, with the server's peak RSS."""
    cmd = [LOADGEN, "intake", "--addr", ONEJOB_ADDR, "--key", key, "--clients", clients, "--jobs", jobs,
           "--warmup", 0, "--prefix", prefix, *(["--replay-only"] if replay else []), "--pid", server.pid]
    r = run_json(cmd, timeout=3600)
    note_command(rec, label, [*cmd[:5], "$KEY", *cmd[6:-1], "$ONEJOB_PID"])
    phase = r["replay" if replay else "intake"]
    phase["rss_peak_kib"] = r.get("rss_peak_kib")
    return phase


def loadgen_intake(rec: dict, backend: str, name: str, url: str, key: str, tag: str, clients: int, jobs: int,
                   prefix: str, replay: bool = False, label: str | None = None) -> dict:
    """One load generator pass against a server started for it and stopped after it, so that
    the database's counters read before and after hold exactly this phase (PostgreSQL
    flushes an idle backend's statistics only every 10 s, but always when it exits). Returns
    the phase, with its database cost under "pg"."""
    before = pg_snapshot(name) if backend == "postgres" else {}
    server = start_onejob(url, worker=False, provider_url=f"http://127.0.0.1:{PORT_SINK}/v1", tag=tag)
    try:
        note_command(rec, "serve", server.cmd)
        phase = loadgen_pass(rec, server, key, clients, jobs, prefix, replay,
                             label or ("loadgen replay" if replay else "loadgen new"))
        rec.setdefault("configs", {}).setdefault(f"{backend}", (WORK / f"{tag}.toml").read_text())
    finally:
        server.stop()
    if backend == "postgres":
        time.sleep(0.2)
        phase["pg"] = pg_delta(before, pg_snapshot(name), phase["ok"])
    return phase


def finish_jobs(backend: str, name: str) -> None:
    """Cancels every pending job in SQL, leaving it as the owner's cancel of a job that never
    had an attempt leaves it (`state = 'cancelled'`, no dispatch time; the `cancelled` event is
    not written, which no replay reads). A finished job never changes again, so onejob may
    answer its replays from memory."""
    sql = "UPDATE jobs SET state = 'cancelled', dispatch_at = NULL WHERE state = 'pending'"
    if backend == "postgres":
        psql(name, sql)
    else:
        with sqlite3.connect(sqlite_path(name)) as db:
            db.execute(sql)


def loadgen_replays_of_finished(rec: dict, url: str, key: str, tag: str, clients: int, jobs: int,
                                prefix: str) -> tuple[dict, dict]:
    """Two replay passes over finished jobs against one onejob process: the first finds each job
    in the database (and keeps it in memory, being finished), the second is answered from
    memory (`store/settled.rs`; it holds 10,000 jobs, so `jobs` must not exceed that, or an
    in-order pass finds each key already evicted). No database counters: the process runs
    on between the passes, so its backends' statistics would land in the wrong pass."""
    server = start_onejob(url, worker=False, provider_url=f"http://127.0.0.1:{PORT_SINK}/v1", tag=tag)
    try:
        first = loadgen_pass(rec, server, key, clients, jobs, prefix, True, "loadgen replay of finished jobs")
        again = loadgen_pass(rec, server, key, clients, jobs, prefix, True, "loadgen replay of finished jobs, again")
    finally:
        server.stop()
    return first, again


def analyze(backend: str, name: str) -> None:
    """What autovacuum would have done by now: PostgreSQL's default is autovacuum on, which
    analyzes a new table after its first 50 rows; this server runs with autovacuum = off.
    Without statistics the planner serves onejob's key lookup from `jobs_owner_recent`
    and scans every job of the owner (see BENCHMARKS.md). Run for every contender alike,
    once, after its warm-up."""
    if backend == "postgres":
        psql(name, "ANALYZE")


def intake_one(opts, rec: dict, run_index: int, clients: int) -> None:
    for backend in opts.backends:
        name = f"{DB}_intake"
        url = fresh(backend, name)
        key = api_key(url)
        prefix = f"r{run_index}"
        tag = f"intake-{backend}-{clients}"
        # warm-up: the database's caches and files (each phase has its own server process)
        loadgen_intake(rec, backend, name, url, key, tag, clients, opts.warmup, f"{prefix}w", label="loadgen warm-up")
        analyze(backend, name)
        r = {"clients": clients, "jobs": opts.jobs,
             "intake": loadgen_intake(rec, backend, name, url, key, tag, clients, opts.jobs, prefix),
             "replay": loadgen_intake(rec, backend, name, url, key, tag, clients, opts.jobs, prefix, replay=True)}
        if opts.jobs <= 10000:
            finish_jobs(backend, name)
            r["finished"], r["finished_again"] = loadgen_replays_of_finished(
                rec, url, key, tag, clients, opts.jobs, prefix)
        r["rss_peak_kib"] = max(r[p]["rss_peak_kib"] or 0 for p in ("intake", "replay", "finished", "finished_again")
                                if p in r) or None
        if backend == "postgres":
            r["rows_jobs"] = int(psql(name, "SELECT count(*) FROM jobs"))
            r["rows_events"] = int(psql(name, "SELECT count(*) FROM job_events"))
        discard(backend, name)
        rec["runs"].append({"contender": f"onejob-{backend}", "backend": backend, "run": run_index,
                            "clients": clients, "loadavg": loadavg(), **r})
        pg = r["intake"].get("pg", {})
        log(f"intake {backend} c={clients} run {run_index}: new {r['intake']['rps']:.0f}/s "
            f"(p50 {r['intake']['p50_ms']:.1f} p99 {r['intake']['p99_ms']:.1f} ms, "
            f"{r['intake']['server_cpu_us_per_ok'] or 0:.0f} us CPU/req, jobs/write xact {pg.get('jobs_per_write_xact') or 0:.2f}, "
            f"jobs/WAL sync {pg.get('jobs_per_wal_sync') or 0:.1f}), "
            f"replay {r['replay']['rps']:.0f}/s, unexpected {r['intake']['unexpected']} {r['replay']['unexpected']}"
            + (f"; finished jobs replayed {r['finished']['rps']:.0f}/s, again {r['finished_again']['rps']:.0f}/s, "
               f"unexpected {r['finished']['unexpected']} {r['finished_again']['unexpected']}" if "finished" in r else ""))


def dispatch_one(opts, rec: dict, run_index: int) -> None:
    for backend in opts.backends:
        name = f"{DB}_dispatch"
        url = fresh(backend, name)
        key = api_key(url)
        cmd = [LOADGEN, "dispatch", "--addr", ONEJOB_ADDR, "--key", key, "--sink", f"127.0.0.1:{PORT_SINK}",
               "--jobs", opts.dispatch_jobs, "--warmup", 20, "--rate", opts.dispatch_rate, "--prefix", f"d{run_index}"]
        gen = Server("loadgen", cmd, f"dispatch-loadgen-{backend}")
        server = None
        try:
            server = start_onejob(url, worker=True, provider_url=f"http://127.0.0.1:{PORT_SINK}/v1",
                                  tag=f"dispatch-{backend}")
            out, _ = gen.proc.communicate(timeout=3600)
            if gen.proc.returncode != 0:
                raise RuntimeError(f"loadgen dispatch failed: see {gen.log_path}")
            r = json.loads(out)
            note_command(rec, "serve", server.cmd)
            rec.setdefault("configs", {}).setdefault(backend, (WORK / f"dispatch-{backend}.toml").read_text())
            note_command(rec, "loadgen", [*cmd[:5], "$KEY", *cmd[6:]])
        finally:
            if server:
                server.stop()
            gen.stop()
        if backend == "postgres":
            r["states"] = psql(name, "SELECT string_agg(state || '=' || n, ' ') FROM (SELECT state, count(*) n FROM jobs GROUP BY 1) s")
        discard(backend, name)
        rec["runs"].append({"contender": f"onejob-{backend}", "backend": backend, "run": run_index,
                            "loadavg": loadavg(), **r})
        log(f"dispatch {backend} run {run_index}: p50 {r['from_201_ms']['p50']:.2f} ms p99 {r['from_201_ms']['p99']:.2f} ms "
            f"missing {r['missing']}")


def e2e_one(opts, rec: dict, run_index: int) -> None:
    for backend in opts.backends:
        name = f"{DB}_e2e"
        url = fresh(backend, name)
        key = api_key(url)
        fake = Server("fake", [FAKE, "--listen", f"127.0.0.1:{PORT_FAKE}"], f"e2e-fake-{backend}")
        server = None
        try:
            time.sleep(0.3)
            server = start_onejob(url, worker=True, provider_url=f"http://127.0.0.1:{PORT_FAKE}/v1",
                                  tag=f"e2e-{backend}", concurrency=opts.e2e_concurrency)
            # warm-up: jobs run to completion (the measurement counts from the won counter's
            # value at its start), then statistics, as autovacuum would have them
            run_json([LOADGEN, "e2e", "--addr", ONEJOB_ADDR, "--key", key, "--clients", opts.e2e_clients,
                      "--jobs", opts.warmup, "--prefix", f"e{run_index}w"], timeout=3600)
            analyze(backend, name)
            before = pg_snapshot(name) if backend == "postgres" else {}
            cmd = [LOADGEN, "e2e", "--addr", ONEJOB_ADDR, "--key", key, "--clients", opts.e2e_clients,
                   "--jobs", opts.e2e_jobs, "--prefix", f"e{run_index}", "--pid", server.pid]
            r = run_json(cmd, timeout=3600)
            note_command(rec, "fake", fake.cmd)
            note_command(rec, "serve", server.cmd)
            rec.setdefault("configs", {}).setdefault(backend, (WORK / f"e2e-{backend}.toml").read_text())
            note_command(rec, "loadgen", [*cmd[:5], "$KEY", *cmd[6:-1], "$ONEJOB_PID"])
        finally:
            if server:
                server.stop()
            fake.stop()
        if backend == "postgres":
            time.sleep(0.2)
            r["pg"] = pg_delta(before, pg_snapshot(name), int(r["succeeded"]))
            r["states"] = psql(name, "SELECT string_agg(state || '=' || n, ' ') FROM (SELECT state, count(*) n FROM jobs GROUP BY 1) s")
        discard(backend, name)
        rec["runs"].append({"contender": f"onejob-{backend}", "backend": backend, "run": run_index,
                            "worker_concurrency": opts.e2e_concurrency, "loadavg": loadavg(), **r})
        log(f"e2e {backend} run {run_index}: {r['jobs_per_s']:.0f} jobs/s ({r['succeeded']:.0f}/{r['jobs']} succeeded)")


PEER_COUNT_SQL = {
    "graphile": "SELECT count(*) FROM graphile_worker._private_jobs WHERE key LIKE '{p}-%'",
    "pgboss": "SELECT count(*) FROM pgboss.job WHERE name = 'bench' AND singleton_key LIKE '{p}-%'",
    "procrastinate": "SELECT count(*) FROM procrastinate_jobs WHERE queueing_lock LIKE '{p}-%'",
}


def peers_one(opts, rec: dict, run_index: int, clients: int) -> None:
    node_env = dict(ENV, NODE_PATH=str(PEERS / "node" / "node_modules"))
    for peer in opts.peers:
        name = f"{DB}_peer"
        create_db(name)
        url = f"{PG_URL}/{name}"
        prefix = f"p{run_index}"
        common = ["--db", url, "--clients", clients, "--jobs", opts.jobs, "--warmup", opts.warmup,
                  "--prefix", prefix, "--pool-max", conn_cap()]
        if peer == "procrastinate":
            cmd = [PEERS / "venv" / "bin" / "python", BENCH / "peers" / "procrastinate_peer.py", *common]
            r = run_json(cmd, timeout=3600)
        else:
            cmd = ["node", BENCH / "peers" / "node_peer.js", peer, *common]
            r = run_json(cmd, timeout=3600, env=node_env)
        note_command(rec, peer, cmd)
        r["rows_counted_by_harness"] = int(psql(name, PEER_COUNT_SQL[peer].format(p=prefix)))
        drop_db(name)
        rec["runs"].append({"contender": peer, "backend": "postgres", "run": run_index, "loadavg": loadavg(), **r})
        log(f"peer {peer} c={clients} run {run_index}: {r['intake']['rps']:.0f}/s new, {r['dup']['rps']:.0f}/s dup, "
            f"rows {r['rows_counted_by_harness']} of {opts.jobs} (dedupes: {r['dedupes']})")


# Parts measured in rounds: for each run, for each client count, every contender in turn, so
# that the contenders compared at one client count are measured minutes apart, not an hour.
def gateway_one(opts, rec: dict, run_index: int, clients: int) -> None:
    """The gateway's overhead: the same chat calls straight to the sink and through onejob
    (new keys: a job each, run by the worker against the sink), then replays of them."""
    for backend in opts.backends:
        name = f"{DB}_gateway"
        url = fresh(backend, name)
        key = api_key(url)
        calls = opts.gateway_calls
        cmd = [LOADGEN, "gateway", "--addr", ONEJOB_ADDR, "--key", key, "--sink", f"127.0.0.1:{PORT_SINK}",
               "--clients", clients, "--calls", calls, "--warmup", opts.warmup, "--prefix", f"g{run_index}c{clients}"]
        gen = Server("loadgen", cmd, f"gateway-loadgen-{backend}-{clients}")
        server = None
        try:
            server = start_onejob(url, worker=True, provider_url=f"http://127.0.0.1:{PORT_SINK}/v1",
                                  tag=f"gateway-{backend}", concurrency=max(16, clients))
            out, _ = gen.proc.communicate(timeout=3600)
            if gen.proc.returncode != 0:
                raise RuntimeError(f"loadgen gateway failed: see {gen.log_path}")
            r = json.loads(out)
            note_command(rec, "serve", server.cmd)
            rec.setdefault("configs", {}).setdefault(backend, (WORK / f"gateway-{backend}.toml").read_text())
            note_command(rec, "loadgen", [*cmd[:5], "$KEY", *cmd[6:]])
        finally:
            if server:
                server.stop()
            gen.stop()
        discard(backend, name)
        rec["runs"].append({"contender": f"onejob-{backend}", "backend": backend, "run": run_index,
                            "loadavg": loadavg(), **r})
        log(f"gateway {backend} {clients} clients run {run_index}: added p50 {r['added_p50_ms']:.2f} ms "
            f"p99 {r['added_p99_ms']:.2f} ms; new {r['gateway']['rps']:.0f}/s, replay {r['replay']['rps']:.0f}/s "
            f"({r['replay_over_new']:.2f}x); upstream calls {r['upstream_calls']} of {r['expected_upstream_calls']}")
        cpu = r["gateway"].get("cpu_us_per_ok_by_program") or {}
        if cpu:
            log("  CPU per new call (us): " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]))
                + f"; per direct call: {(r['direct'].get('cpu_us_per_ok_by_program') or {}).get('all', 0):.0f}"
                + f"; cores busy {r['gateway'].get('machine_busy_pct') or 0:.0f} %, iowait {r['gateway'].get('machine_iowait_pct') or 0:.0f} %")


def gateway_round_trips(opts, rec: dict) -> None:
    """The database statements of one gateway call (each one round trip to PostgreSQL; on
    SQLite one hand-over to its connection's thread), counted from onejob's own log of them
    (sqlx's `sqlx::query` events, `RUST_LOG=sqlx::query=debug`): one client, calls one after
    another, onejob-fake as the upstream. What the process runs in the background over the same
    time (heartbeats, the rescuer's and reconciler's looks) is measured idle and subtracted;
    the statements of the last new call are listed."""
    import http.client
    for backend in opts.backends:
        name = f"{DB}_gateway_rt"
        url = fresh(backend, name)
        key = api_key(url)
        fake = Server("fake", [FAKE, "--listen", f"127.0.0.1:{PORT_FAKE}"], f"gateway-rt-fake-{backend}")
        server = None
        try:
            time.sleep(0.3)
            env = dict(ENV, RUST_LOG="warn,sqlx::query=debug", ONEJOB_LOG_FORMAT="text", NO_COLOR="1")
            server = start_onejob(url, worker=True, provider_url=f"http://127.0.0.1:{PORT_FAKE}/v1",
                                  tag=f"gateway-rt-{backend}", env=env)
            host, port = ONEJOB_ADDR.split(":")
            conn = http.client.HTTPConnection(host, int(port), timeout=30)

            def call(k: str) -> None:
                body = json.dumps({"model": "bench", "messages": [{"role": "user", "content": f"count {k}"}]})
                conn.request("POST", "/v1/chat/completions", body=body,
                             headers={"Authorization": f"Bearer {key}", "Idempotency-Key": k,
                                      "Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                if r.status != 200:
                    raise RuntimeError(f"gateway call {k}: {r.status}")

            def statements() -> list[str]:
                return [line for line in server.log_path.read_text(errors="replace").splitlines()
                        if "sqlx::query" in line]

            calls = 50
            for i in range(20):
                call(f"rt-warm-{i}")
            time.sleep(0.5)
            n0, t0 = len(statements()), time.time()
            time.sleep(2.0)
            idle = (len(statements()) - n0) / (time.time() - t0)
            counts = {}
            for phase, prefix in (("new", "rt-new"), ("replay", "rt-new")):
                n1, t1 = len(statements()), time.time()
                for i in range(calls):
                    call(f"{prefix}-{i}")
                time.sleep(0.2)
                n2, t2 = len(statements()), time.time()
                counts[phase] = max(0.0, (n2 - n1 - idle * (t2 - t1)) / calls)
            before = len(statements())
            call("rt-listed")
            time.sleep(0.2)
            listed = []
            for line in statements()[before:]:
                m = re.search(r'summary="([^"]*)"', line)
                listed.append((m.group(1) if m else line)[:90])
            rec.setdefault("round_trips", {})[backend] = {
                "new_per_call": round(counts["new"], 2), "replay_per_call": round(counts["replay"], 2),
                "background_per_s": round(idle, 2), "calls": calls, "one_new_call": listed,
                "loadavg": loadavg()}
            log(f"gateway round trips {backend}: {counts['new']:.1f} statements per new call, "
                f"{counts['replay']:.1f} per replay (background {idle:.1f}/s subtracted)")
        finally:
            if server:
                server.stop()
            fake.stop()
        discard(backend, name)


PER_CLIENTS = {"ceiling": ceiling_one, "intake": intake_one, "peers": peers_one, "gateway": gateway_one}
PER_RUN = {"dispatch": dispatch_one, "e2e": e2e_one}


def guarded(rec: dict, one, *args) -> None:
    """Runs one measurement; a failure is logged and recorded, and the rounds go on."""
    try:
        one(*args)
    except Exception as error:  # noqa: BLE001 - recorded in the results and the report
        log(f"FAILED {one.__name__}{args[2:]}: {str(error)[:2000]}")
        rec.setdefault("errors", []).append({"what": f"{one.__name__}{args[2:]}", "error": str(error)[:4000],
                                             "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")})


def rounds(opts, parts: list[str]) -> None:
    recs = {p: part_record(opts, p) for p in parts if p in PER_CLIENTS or p in PER_RUN}
    if not recs:
        return
    for run_index in range(opts.runs):
        log(f"== round {run_index + 1} of {opts.runs}: {', '.join(recs)}")
        for clients in sorted(set(opts.clients) | set(opts.gateway_clients)):
            for part, one in PER_CLIENTS.items():
                wanted = opts.gateway_clients if part == "gateway" else opts.clients
                if part in recs and clients in wanted:
                    guarded(recs[part], one, opts, recs[part], run_index, clients)
        for part, one in PER_RUN.items():
            if part in recs:
                guarded(recs[part], one, opts, recs[part], run_index)
        for part, rec in recs.items():  # keep what is done if a later round fails
            save(part, dict(rec, loadavg_end=loadavg(), finished=None))
    if "gateway" in recs:
        guarded(recs["gateway"], gateway_round_trips, opts, recs["gateway"])
    for part, rec in recs.items():
        save(part, finish(rec))


def growth_template(size: int, rec: dict) -> str | None:
    """A migrated onejob database holding `size` finished jobs, kept as a template."""
    if size == 0:
        return None
    name = f"{DB}_tpl_{size}"
    exists = psql("postgres", f"SELECT count(*) FROM pg_database WHERE datname = '{name}'") == "1"
    if exists and psql(name, "SELECT count(*) FROM jobs") == str(size):
        log(f"reusing template {name}")
        return name
    url = fresh("postgres", name)
    t0_ms = int(time.time() * 1000) - 3 * size - 60_000
    started = time.time()
    batch = 1_000_000
    for lo in range(1, size + 1, batch):
        hi = min(size, lo + batch - 1)
        psql_file(name, SQL / "bulk_load.sql", {"t0": t0_ms, "lo": lo, "hi": hi})
        log(f"template {name}: {hi:,} rows")
    psql(name, "VACUUM (ANALYZE) jobs")
    psql(name, "CHECKPOINT")
    rec.setdefault("templates", {})[str(size)] = {
        "name": name, "load_seconds": round(time.time() - started, 1),
        "jobs_table_size": psql(name, "SELECT pg_size_pretty(pg_total_relation_size('jobs'))"),
        "key_index_size": psql(name, "SELECT pg_size_pretty(pg_relation_size('jobs_one_per_key_scope'))"),
        "database_size": psql(name, f"SELECT pg_size_pretty(pg_database_size('{name}'))"),
    }
    note_command(rec, "bulk_load", f"psql -d {name} -f bench/sql/bulk_load.sql -v t0={t0_ms} -v lo=1 -v hi=1000000  # per 1M batch")
    del url
    return name


def explain_intake(name: str) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of the intake INSERT on this database (rolled back)."""
    sql = ("BEGIN; EXPLAIN (ANALYZE, BUFFERS, TIMING) INSERT INTO jobs (id, tenant, user_id, key_hash, kind, fingerprint, params) "
           "VALUES (gen_random_uuid(), 'bench', 'bench', sha256('explain-probe'::bytea), 'bench.chat', "
           "sha256('fp'::bytea), '{\"prompt\": \"x\"}') ON CONFLICT DO NOTHING; ROLLBACK;")
    return psql(name, sql)


def growth_sql(opts, rec: dict, template: str | None, name: str) -> dict:
    """onejob's own intake statement alone (bench/sql/onejob_tx.pgbench, as in the ceiling
    part) on another copy of the same database, at the same client count: how much of the
    growth is PostgreSQL's (the statement without HTTP or Rust) rather than onejob's."""
    extra = onejob_sql_database(opts, name, template)
    cmd, r = pgbench(name, SQL / "onejob_tx.pgbench", opts.growth_clients, opts.duration, extra=extra)
    note_command(rec, "pgbench-onejob-sql", cmd)
    drop_db(name)
    return r


def checkpoints() -> int:
    """Checkpoints the server has completed (timed and requested), cluster-wide."""
    return int(psql("postgres", "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"))


def part_growth(opts, part: str = "growth") -> None:
    """`growth`: 3 short runs per size, each followed by onejob's SQL alone. `steady`: long runs
    (--steady-jobs, --steady-runs per size), long enough to span checkpoints, so that the full-page
    images of the key index are paid about once per checkpoint interval as in production,
    not once per job as in a short run that starts right after the template copy's
    checkpoint."""
    steady = part == "steady"
    runs, jobs = (opts.steady_runs, opts.steady_jobs) if steady else (opts.runs, opts.jobs)
    rec = part_record(opts, part)
    rec["sizes"] = opts.growth_sizes
    rec["clients"] = opts.growth_clients
    rec["jobs"] = jobs
    templates = {size: growth_template(size, rec) for size in opts.growth_sizes}
    for run_index in range(runs):
        # rotate the order each run, so that no size always follows a large DROP DATABASE
        sizes = opts.growth_sizes[run_index % len(opts.growth_sizes):] + opts.growth_sizes[:run_index % len(opts.growth_sizes)]
        for size in sizes:
            name = f"{DB}_growth"
            if templates[size]:
                create_db(name, template=templates[size])
                url = db_url("postgres", name)
            else:
                url = fresh("postgres", name)
            if run_index == 0 and not steady:
                rec.setdefault("explain", {})[str(size)] = explain_intake(name)
            key = api_key(url)
            tag = f"{part}-{size}"
            loadgen_intake(rec, "postgres", name, url, key, tag, opts.growth_clients, opts.warmup, f"g{run_index}w",
                           label="loadgen warm-up")
            analyze("postgres", name)
            before = checkpoints()
            r = {"intake": loadgen_intake(rec, "postgres", name, url, key, tag, opts.growth_clients, jobs,
                                          f"g{run_index}")}
            r["checkpoints"] = checkpoints() - before
            drop_db(name)
            if not steady:
                r["sql"] = growth_sql(opts, rec, templates[size], name)
            rec["runs"].append({"contender": "onejob-postgres", "existing_jobs": size, "run": run_index,
                                "clients": opts.growth_clients, "loadavg": loadavg(), **r})
            line = (f"{part} {size:,} run {run_index}: {r['intake']['rps']:.0f}/s p50 {r['intake']['p50_ms']:.1f} ms, "
                    f"WAL {r['intake'].get('pg', {}).get('wal_bytes_per_job') or 0:,.0f} B/job, "
                    f"{r['checkpoints']} checkpoints")
            if not steady:
                line += (f"; onejob's SQL alone {r['sql']['rps']:.0f} tx/s, "
                         f"WAL {r['sql']['pg'].get('wal_bytes_per_job') or 0:,.0f} B/job")
            log(line)
    if not opts.keep_templates:
        for name in filter(None, templates.values()):
            drop_db(name)
    save(part, finish(rec))


def part_rss(opts) -> None:
    rec = part_record(opts, "rss")
    for backend in opts.backends:
        name = f"{DB}_rss"
        url = fresh(backend, name)
        key = api_key(url)
        server = start_onejob(url, worker=False, provider_url=f"http://127.0.0.1:{PORT_SINK}/v1", tag=f"rss-{backend}")
        try:
            time.sleep(1)
            cmd = [LOADGEN, "hold", "--addr", ONEJOB_ADDR, "--key", key, "--conns", opts.rss_conns, "--post",
                   "--seconds", 3, "--prefix", "h", "--pid", server.pid]
            r = run_json(cmd, timeout=600)
            note_command(rec, "loadgen", [*cmd[:5], "$KEY", *cmd[6:-1], "$ONEJOB_PID"])
        finally:
            server.stop()
        discard(backend, name)
        rec["runs"].append({"contender": f"onejob-{backend}", "backend": backend, "loadavg": loadavg(), **r})
        log(f"rss {backend}: before {r['rss_before_kib']} KiB, {r['open']} conns {r['rss_open_kib']} KiB, "
            f"after posts {r['rss_after_post_kib']} KiB, peak {r['rss_peak_kib']} KiB")
    save("rss", finish(rec))


# ----------------------------------------------------------------------------- worked

# Finished jobs, per contender, as the harness polls them. graphile-worker deletes a job when
# it completes, so its count is the jobs queued minus the rows left.
WORKED_DONE_SQL = {
    "onejob": "SELECT count(*) FROM jobs WHERE state = 'succeeded'",
    "pgboss": "SELECT count(*) FROM pgboss.job WHERE name = 'bench' AND state = 'completed'",
    "graphile": "SELECT {jobs} - count(*) FROM graphile_worker._private_jobs",
}
PORT_WORKER = PORT_ONEJOB + 330  # `onejob worker --listen` probes: PORT_WORKER + i


class Poller:
    """One held `psql` session that answers one-number queries (a new psql per poll would
    cost a connection each time). Its statements count as read-only commits of the
    database; `queries` says how many to subtract."""

    def __init__(self, db: str, env: dict | None = None):
        self.proc = subprocess.Popen(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", db],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1, env=env or ENV)
        self.queries = 0

    def number(self, sql: str) -> int:
        self.proc.stdin.write(sql.rstrip(";") + ";\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"psql poller ended (query: {sql})")
        self.queries += 1
        return int(line.strip())

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self.proc.wait(timeout=10)


def wait_worked(poller: Poller, sql: str, jobs: int, timeout: float, queued=lambda: True,
                failed_sql: str | None = None, quarters: list | None = None, fine_poll: float = 0.01) -> float:
    """Polls until `sql` counts `jobs` finished jobs (and `queued()` says all are in); returns
    the monotonic time of the poll that saw it. Every 100 ms until 90 % are done, then every
    10 ms (`fine_poll`), so that the polling itself costs the database little while the end
    is seen within 10 ms. `quarters`, if given, gets the time of the first poll that saw each quarter
    of the jobs finished (whether the run slows as it goes)."""
    deadline = time.monotonic() + timeout
    while True:
        done = poller.number(sql) if queued() else 0
        now = time.monotonic()
        if quarters is not None:
            while len(quarters) < 4 and done >= jobs * (len(quarters) + 1) / 4:
                quarters.append(now)
        if queued() and done >= jobs:
            return now
        if now > deadline:
            bad = poller.number(failed_sql) if failed_sql else None
            raise RuntimeError(f"only {done} of {jobs} jobs finished within {timeout:.0f} s"
                               + (f" ({bad} failed or unknown)" if bad is not None else ""))
        time.sleep(fine_poll if done >= 0.9 * jobs else 0.1)


def wait_http_ready(addr: str, proc: subprocess.Popen, timeout=60.0) -> None:
    deadline = time.time() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://{addr}/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        if proc.poll() is not None or time.time() > deadline:
            raise RuntimeError(f"{addr} did not become ready")
        time.sleep(0.01)


def footprint(db: str) -> dict:
    """Rows, table bytes (TOAST included) and index bytes of onejob's job tables."""
    return {t: json.loads(psql(db, f"SELECT json_build_object('rows', (SELECT count(*) FROM {t}), "
                                   f"'table_bytes', pg_table_size('{t}'), 'index_bytes', pg_indexes_size('{t}'))"))
            for t in ("jobs", "attempts", "job_events")}


def worked_onejob(opts, rec: dict, run_index: int, workers: int, concurrency: int, jobs: int, mode: str) -> dict:
    """onejob: a `serve --no-worker` API node and `workers` `onejob worker` processes with
    `[worker] concurrency`, on onejob-fake over loopback HTTP. queued: the jobs are submitted
    through the API (the load generator, 32 clients) with no worker running, then the workers
    are started; the time runs from their spawn (process start and connecting included) to
    the poll that sees every job `succeeded`. concurrent: the workers are up first; the time
    runs from the load generator's start to the last job succeeded."""
    name = f"{DB}_worked"
    url = fresh("postgres", name)
    key = api_key(url)
    tag = f"worked-onejob-{workers}w"
    fake = Server("fake", [FAKE, "--listen", f"127.0.0.1:{PORT_FAKE}"], f"{tag}-fake")
    api = None
    procs: list[Server] = []
    poller = None
    try:
        time.sleep(0.3)
        api = start_onejob(url, worker=False, provider_url=f"http://127.0.0.1:{PORT_FAKE}/v1", tag=tag,
                           concurrency=concurrency)
        config = WORK / f"{tag}.toml"
        worker_cmds = [[ONEJOB, "worker", "--config", config, "--listen", f"127.0.0.1:{PORT_WORKER + i}"]
                       for i in range(workers)]
        intake = [LOADGEN, "intake", "--addr", ONEJOB_ADDR, "--key", key, "--clients", opts.worked_clients,
                  "--jobs", jobs, "--warmup", 0, "--prefix", f"k{run_index}"]
        note_command(rec, "onejob serve (API node)", api.cmd)
        note_command(rec, "onejob worker", [*worker_cmds[0][:-1], "127.0.0.1:PORT"])
        note_command(rec, "loadgen intake (the jobs)", [*intake[:5], "$KEY", *intake[6:]])
        rec.setdefault("configs", {}).setdefault("onejob", config.read_text())
        poller = Poller(name)
        done_sql = WORKED_DONE_SQL["onejob"]
        failed_sql = "SELECT count(*) FROM jobs WHERE state IN ('failed', 'unknown')"
        r: dict = {}
        if mode == "queued":
            t = time.monotonic()
            intake_before = pg_snapshot(name)
            out = run_json(intake, timeout=3600)
            r["enqueue_s"] = time.monotonic() - t
            settle()
            r["intake_pg"] = pg_delta(intake_before, pg_snapshot(name), jobs)
            r["enqueue_unexpected"] = out["intake"]["unexpected"]
            analyze("postgres", name)
            before = pg_snapshot(name)
            t0 = time.monotonic()
            procs = [Server("worker", cmd, f"{tag}-{i}") for i, cmd in enumerate(worker_cmds)]
            quarters: list = []
            t1 = wait_worked(poller, done_sql, jobs, opts.worked_timeout, failed_sql=failed_sql,
                             quarters=quarters)
            # Jobs per second in each quarter of the run: a run that slows as it goes (plans
            # made on empty tables) shows a last quarter far below its first.
            edges = [t0, *quarters]
            r["quarter_jobs_per_s"] = [jobs / 4 / (b - a) if b > a else None for a, b in zip(edges, edges[1:])]
        else:
            procs = [Server("worker", cmd, f"{tag}-{i}") for i, cmd in enumerate(worker_cmds)]
            for i, w in enumerate(procs):
                wait_http_ready(f"127.0.0.1:{PORT_WORKER + i}", w.proc)
            # No ANALYZE of the empty tables here (nor in the peers' script): statistics of an
            # empty `jobs` would stay for the whole run on this server (autovacuum = off),
            # where autovacuum would renew them as the table grows; onejob's intake then
            # looked keys up through the owner's index (bench/journal.md).
            before = pg_snapshot(name)
            t0 = time.monotonic()
            gen = subprocess.Popen([str(c) for c in intake], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                   text=True, env=ENV)
            t1 = wait_worked(poller, done_sql, jobs, opts.worked_timeout, queued=lambda: gen.poll() is not None,
                             failed_sql=failed_sql)
            r["enqueue_s"] = None
        queries = poller.queries
        settle()
        after = pg_snapshot(name)
        r["work_s"] = t1 - t0
        r["jobs_per_s"] = jobs / r["work_s"]
        r["pg"] = pg_delta(before, after, jobs)
        r["pg"]["poll_queries"] = queries
        r["pg"]["commits_per_job_without_polls"] = (r["pg"]["commits"] - queries - 1) / jobs
        # The database's own clock: first attempt started -> last job updated (no process start).
        span = psql(name, "SELECT extract(epoch FROM (SELECT max(updated_at) FROM jobs) - "
                          "(SELECT min(started_at) FROM attempts))")
        r["db_span_s"] = float(span) if span else None
        r["states"] = psql(name, "SELECT string_agg(state || '=' || n, ' ') FROM (SELECT state, count(*) n FROM jobs GROUP BY 1) s")
        r["attempts"] = int(psql(name, "SELECT count(*) FROM attempts"))
        # What the jobs left behind (docs/scaling.md): rows and bytes per table, indexes included.
        r["footprint"] = footprint(name)
    finally:
        if poller:
            poller.close()
        for w in procs:
            w.stop()
        if api:
            api.stop()
        fake.stop()
    discard("postgres", name)
    return {"contender": f"onejob-{workers}w", "peer": "onejob", "workers": workers,
            "settings": {"worker_processes": workers, "concurrency": concurrency}, **r}


def worked_peer(opts, rec: dict, run_index: int, contender: str, settings: dict, jobs: int, mode: str) -> dict:
    """A peer's own workers (bench/peers/node_worker.js) with a no-op handler. queued: the
    script bulk-inserts the jobs, then on "go" starts its workers; the time runs from "go"
    (its connection pool already open) to the poll that sees every job completed.
    concurrent: its workers are started first; on "go" it enqueues one call per job."""
    peer = contender.removesuffix("-http")
    http = contender != peer
    name = f"{DB}_worked"
    create_db(name)
    url = f"{PG_URL}/{name}"
    node_env = dict(ENV, NODE_PATH=str(PEERS / "node" / "node_modules"))
    flags = {"pgboss": {"batch_size": "--batch-size", "workers": "--workers", "polling_s": "--polling-s"},
             "graphile": {"concurrency": "--concurrency", "poll_ms": "--poll-ms", "local_queue": "--local-queue",
                          "complete_batch_delay": "--complete-batch-delay"}}[peer]
    pool = settings.get("pool_max") or (min(conn_cap(), settings["concurrency"] + 2) if peer == "graphile" else 20)
    cmd = ["node", BENCH / "peers" / "node_worker.js", peer, "--db", url, "--jobs", jobs, "--mode", mode,
           "--clients", opts.worked_clients, "--pool-max", pool]
    for k, flag in flags.items():
        if k in settings:
            cmd += [flag, settings[k]]
    fake = None
    if http:
        # The handler makes onejob's call for each job: a chat completion to the same fake.
        fake = Server("fake", [FAKE, "--listen", f"127.0.0.1:{PORT_FAKE}"], f"worked-{contender}-fake")
        time.sleep(0.3)
        cmd += ["--provider", f"http://127.0.0.1:{PORT_FAKE}/v1/chat/completions"]
    cmd = [str(c) for c in cmd]
    note_command(rec, peer, cmd)
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(WORK / f"worked-{peer}.log", "w"),
                            text=True, bufsize=1, env=node_env)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x.strip()) for x in proc.stdout], daemon=True).start()

    def expect(word: str, timeout=600) -> None:
        got = lines.get(timeout=timeout)
        if got != word:
            raise RuntimeError(f"{peer} worker said {got!r}, expected {word!r}: see {WORK / f'worked-{peer}.log'}")

    poller = None
    queued_seen = threading.Event()
    try:
        expect("queued" if mode == "queued" else "ready")
        poller = Poller(name)
        done_sql = WORKED_DONE_SQL[peer].format(jobs=jobs)
        before = pg_snapshot(name)
        t0 = time.monotonic()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        if mode == "queued":
            expect("working")
            queued = lambda: True  # noqa: E731
        else:
            def queued() -> bool:
                if not queued_seen.is_set():
                    try:
                        if lines.get_nowait() == "queued":
                            queued_seen.set()
                    except queue.Empty:
                        pass
                return queued_seen.is_set()
        t1 = wait_worked(poller, done_sql, jobs, opts.worked_timeout, queued=queued)
        queries = poller.queries
        settle()
        after = pg_snapshot(name)
        proc.stdin.write("stop\n")
        proc.stdin.flush()
        out = json.loads(lines.get(timeout=120))
        proc.wait(timeout=60)
    finally:
        if poller:
            poller.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if fake:
            fake.stop()
    drop_db(name)
    r = {"work_s": t1 - t0, "jobs_per_s": jobs / (t1 - t0), "pg": pg_delta(before, after, jobs), **out}
    r["pg"]["poll_queries"] = queries
    r["pg"]["commits_per_job_without_polls"] = (r["pg"]["commits"] - queries - 1) / jobs
    return {"contender": contender, "peer": peer, "handler": "http" if http else "noop", **r, "settings": settings}


def worked_grid(opts) -> dict:
    """The knobs swept per contender (--quick: two settings each)."""
    if opts.quick:
        return {
            "onejob": [{"concurrency": c} for c in (256, 1024)],
            "pgboss": [{"batch_size": 1000, "workers": 2, "polling_s": 0.5}, {"batch_size": 200, "workers": 4, "polling_s": 0.5}],
            "graphile": [{"concurrency": 32, "poll_ms": 100, "local_queue": 0},
                         {"concurrency": 32, "poll_ms": 100, "local_queue": 500, "complete_batch_delay": 5}],
        }
    return {
        "onejob": [{"concurrency": c} for c in (64, 256, 1024, 2048)],  # onejob-3w takes onejob-2w's best
        "pgboss": [{"batch_size": b, "workers": w, "polling_s": 0.5} for b in (200, 1000, 5000) for w in (2, 4)]
        + [{"batch_size": 1000, "workers": 2, "polling_s": 2.0}],
        "graphile": [{"concurrency": 10, "poll_ms": 2000, "local_queue": 0},
                     {"concurrency": 32, "poll_ms": 2000, "local_queue": 0},
                     {"concurrency": 32, "poll_ms": 100, "local_queue": 0},
                     {"concurrency": 32, "poll_ms": 100, "local_queue": 500},
                     {"concurrency": 32, "poll_ms": 100, "local_queue": 500, "complete_batch_delay": 5},
                     {"concurrency": 64, "poll_ms": 100, "local_queue": 1000, "complete_batch_delay": 5}],
    }


def worked_measure(opts, rec: dict, run_index: int, stage: str, contender: str, settings: dict, jobs: int,
                   mode: str) -> dict | None:
    try:
        if contender.startswith("onejob-"):
            workers = int(contender.split("-")[1].rstrip("w"))
            r = worked_onejob(opts, rec, run_index, workers, settings["concurrency"], jobs, mode)
        else:
            r = worked_peer(opts, rec, run_index, contender, settings, jobs, mode)
    except Exception as error:  # noqa: BLE001 - recorded, the rounds go on
        log(f"FAILED worked {stage} {contender} {settings} {mode}: {str(error)[:1500]}")
        rec.setdefault("errors", []).append({"what": f"worked {stage} {contender} {settings} {mode}",
                                             "error": str(error)[:4000],
                                             "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")})
        return None
    r.update({"contender": contender, "stage": stage, "mode": mode, "run": run_index, "jobs": jobs,
              "loadavg": loadavg()})
    rec["runs"].append(r)
    pg = r.get("pg", {})
    log(f"worked {stage} {mode} {contender} {settings}: {r['jobs_per_s']:.0f} jobs/s ({r['work_s']:.2f} s), "
        f"write xacts/job {1 / pg['jobs_per_write_xact'] if pg.get('jobs_per_write_xact') else 0:.2f}, "
        f"WAL syncs/job {1 / pg['jobs_per_wal_sync'] if pg.get('jobs_per_wal_sync') else 0:.2f}")
    return r


def part_worked(opts) -> None:
    """`worked`: a sweep of each contender's knobs on --worked-sweep-jobs (one run each),
    then the best setting of each, --runs rounds of --worked-jobs, contenders interleaved
    in every round, in each of --worked-modes."""
    rec = part_record(opts, "worked")
    rec["settings"].update({"worked_jobs": opts.worked_jobs, "worked_sweep_jobs": opts.worked_sweep_jobs,
                            "worked_modes": opts.worked_modes, "worked_clients": opts.worked_clients})
    grid = worked_grid(opts)
    rec["grid"] = grid
    contenders = {c: grid["onejob" if c.startswith("onejob") else c.removesuffix("-http")]
                  for c in opts.worked_contenders}
    best = {}
    if opts.worked_best:
        best = json.loads(opts.worked_best)
    best = {c: v for c, v in best.items() if c in contenders}
    for contender, settings_list in contenders.items():
        if contender in best:
            continue
        base = contender.removesuffix("-http")
        if base != contender and base in best:
            best[contender] = best[base]  # the no-op handler's best setting, not swept again
            continue
        if contender.endswith("-default"):
            best[contender] = {"concurrency": None}  # onejob as a user starts it: nothing tuned
            continue
        if contender == "onejob-3w" and "onejob-2w" in best:
            best[contender] = best["onejob-2w"]  # not swept again: the best of 2 processes
            continue
        scored = []
        for settings in settings_list:
            r = worked_measure(opts, rec, 0, "sweep", contender, settings, opts.worked_sweep_jobs, "queued")
            if r:
                scored.append((r["jobs_per_s"], settings))
        if scored:
            best[contender] = max(scored, key=lambda x: x[0])[1]
        save("worked", dict(rec, best=best, finished=None))
    rec["best"] = best
    log(f"worked: best settings {best}")
    for run_index in range(opts.runs):
        for mode in opts.worked_modes:
            if mode == "concurrent" and run_index >= opts.worked_concurrent_runs:
                continue
            for contender, settings in best.items():
                worked_measure(opts, rec, run_index, "measured", contender, settings, opts.worked_jobs, mode)
        save("worked", dict(rec, finished=None))
    save("worked", finish(rec))


def loadgen_output(proc: subprocess.Popen, cmd: list) -> dict:
    out, _ = proc.communicate(timeout=3600)
    if proc.returncode != 0 or "{" not in out:
        raise RuntimeError(f"{cmdline(cmd)} failed ({proc.returncode}): {out[-2000:]}")
    return json.loads(out[out.index("{"):])


def split(total: int, parts: int) -> list[int]:
    """`total` split into `parts` shares that differ by at most one."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def nodes_one(opts, rec: dict, run_index: int, nodes: int, clients: int, query: str) -> None:
    """Intake through `nodes` API nodes (`serve --no-worker`, ports PORT_ONEJOB + 10 i) on one
    database: every node warmed up first (its own load generator, --warmup jobs), ANALYZE, then
    one load generator per node, the clients and 4 x --jobs new keys split evenly between them,
    all started together; req/s = all 201s / (first start -> last finish). The machine's CPU
    over that window is sampled by program (CpuSampler). `query`: the database URL's query
    (`sslmode=disable`, or empty: sqlx's default `prefer`, TLS on this server)."""
    name = f"{DB}_nodes"
    create_db(name)
    url = f"{PG_URL}/{name}" + (f"?{query}" if query else "")
    run([ONEJOB, "migrate", "--database", url])
    key = api_key(url)
    servers: list[Server] = []
    wal = None
    addrs = [f"127.0.0.1:{PORT_ONEJOB + 10 * i}" for i in range(nodes)]
    shares = split(clients, nodes)
    jobs = split(4 * opts.jobs, nodes)  # 4 x --jobs in all, whatever the node count
    try:
        for i, addr in enumerate(addrs):
            servers.append(start_onejob(url, worker=False, provider_url=f"http://127.0.0.1:{PORT_SINK}/v1",
                                        tag=f"nodes-{i}", listen=addr))
        for i, addr in enumerate(addrs):  # each node's pool and prepared statements, not only the first's
            run_json([LOADGEN, "intake", "--addr", addr, "--key", key, "--clients", shares[i],
                      "--jobs", opts.warmup, "--warmup", 0, "--prefix", f"n{run_index}w{i}"], timeout=600)
        analyze("postgres", name)
        cmds = [[LOADGEN, "intake", "--addr", addr, "--key", key, "--clients", shares[i], "--jobs", jobs[i],
                 "--warmup", 0, "--prefix", f"n{run_index}-{i}"] for i, addr in enumerate(addrs)]
        note_command(rec, "loadgen (one per node, started together)", [*cmds[0][:5], "$KEY", *cmds[0][6:]])
        note_command(rec, "serve (one per node, listen = 127.0.0.1:18080 + 10 i)", servers[0].cmd)
        rec.setdefault("configs", {}).setdefault("postgres", (WORK / "nodes-0.toml").read_text())
        load_before = loadavg()
        wal = WalOfDatabase(name, follow=True)
        before = pg_snapshot(name)
        cpu = CpuSampler()
        t0 = time.monotonic()
        procs = [subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True, env=ENV) for cmd in cmds]
        outs = [loadgen_output(proc, cmd) for proc, cmd in zip(procs, cmds)]
        wall = time.monotonic() - t0
        cpu_split = cpu.finish()
        # whether the nodes' connections really are (not) encrypted
        ssl = psql("postgres", "SELECT coalesce(json_object_agg(ssl, n), '{}') FROM (SELECT s.ssl, count(*) n FROM "
                               f"pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.datname = '{name}' GROUP BY 1) x")
    except BaseException:
        if wal:
            wal.close()
        raise
    finally:
        for server in servers:
            server.stop()
    time.sleep(0.2)  # the servers' backends have exited: their statistics are flushed
    after = pg_snapshot(name)
    wal_own = wal.finish()
    ok = sum(o["intake"]["ok"] for o in outs)
    rows = int(psql(name, "SELECT count(*) FROM jobs"))
    r = {"nodes": nodes, "clients": clients, "url_query": query, "connections_by_ssl": json.loads(ssl),
         "clients_per_node": shares, "jobs": ok, "wall_s": wall,
         "rps": ok / wall,
         "per_node_rps": [o["intake"]["rps"] for o in outs],
         "per_node_elapsed_s": [o["intake"]["elapsed_s"] for o in outs],
         "per_node_p50_ms": [o["intake"]["p50_ms"] for o in outs],
         "per_node_p99_ms": [o["intake"]["p99_ms"] for o in outs],
         # The load generators report percentiles, not samples: with equal shares the nodes'
         # distributions are alike; the median of their p50s stands for the p50 of all requests,
         # and the pooled p99 is at most the largest node's p99.
         "p50_ms": median([o["intake"]["p50_ms"] for o in outs]), "p99_ms": max(o["intake"]["p99_ms"] for o in outs),
         "unexpected": [o["intake"]["unexpected"] for o in outs],
         "rows_jobs": rows, "loadavg_before": load_before,
         "cpu": cpu_split, "pg": pg_delta(before, after, ok), "wal_of_database": wal_own}
    if wal_own:
        r["pg"]["own_wal_bytes_per_job"] = wal_own["database"]["bytes"] / ok
        r["pg"]["jobs_per_own_commit"] = ok / wal_own["database"]["commits"] if wal_own["database"]["commits"] else None
    discard("postgres", name)
    rec["runs"].append({"contender": f"onejob-{nodes}-nodes", "run": run_index, "loadavg": loadavg(), **r})
    busy = cpu_split["by_program_pct"]
    log(f"nodes {nodes} c={clients} {query or 'default URL'} (ssl {r['connections_by_ssl']}) run {run_index}: {r['rps']:.0f}/s (per node {', '.join(f'{x:.0f}' for x in r['per_node_rps'])}), "
        f"p50 {r['p50_ms']:.2f} p99 {r['p99_ms']:.2f} ms, jobs/WAL sync {r['pg'].get('jobs_per_wal_sync') or 0:.1f}, "
        f"WAL/job {r['pg'].get('wal_bytes_per_job') or 0:.0f} B (this database's {r['pg'].get('own_wal_bytes_per_job') or 0:.0f} B), unexpected {r['unexpected']}, "
        f"CPU busy {cpu_split['machine_busy_pct']:.0f}% of {100 * cpu_split['cores']}% "
        f"({', '.join(f'{k} {v:.0f}%' for k, v in busy.items())})")


def part_nodes(opts) -> None:
    """`nodes`: intake new keys through 1 and 3 API nodes on one PostgreSQL (docs/scaling.md),
    at each of --clients (total over the nodes), --runs rounds, node counts interleaved."""
    rec = part_record(opts, "nodes")
    rec["settings"]["nodes_url_queries"] = opts.nodes_url_queries
    try:
        for run_index in range(opts.runs):
            for clients in opts.clients:
                for query in opts.nodes_url_queries:
                    for nodes in (1, 3):
                        guarded(rec, nodes_one, opts, rec, run_index, nodes, clients, query)
            save("nodes", dict(rec, finished=None))
    finally:
        drop_db(f"{DB}_nodes")  # left behind by a failed run
    save("nodes", finish(rec))


def index_sizes(db: str) -> dict:
    return json.loads(psql(db, "SELECT json_object_agg(indexrelname, pg_relation_size(indexrelid) ORDER BY relname, indexrelname) "
                               "FROM pg_stat_user_indexes WHERE relname IN ('jobs', 'attempts', 'job_events')"))


def wal_counters() -> dict:
    """Cluster-wide: WAL records, full-page images and bytes written, and checkpoints done."""
    return json.loads(psql("postgres", "SELECT json_build_object('wal_records', w.wal_records, 'wal_fpi', w.wal_fpi, "
                                       "'wal_bytes', w.wal_bytes, 'checkpoints', b.checkpoints_timed + b.checkpoints_req) "
                                       "FROM pg_stat_wal w, pg_stat_bgwriter b"))


def part_footprint(opts) -> None:
    """`footprint`: what jobs leave in PostgreSQL (docs/scaling.md). --footprint-jobs jobs run
    for real (one `serve` node with its worker, [worker] concurrency 64, on onejob-fake; the
    load generator submits them with 32 clients while the worker works), then copied with
    their attempts and events (bench/sql/replicate_worked.sql: later timestamps, time-ordered
    UUIDv7 ids, new key hashes) up to --footprint-total jobs; rows, table and index bytes of
    each table and each index, at the real size before and after VACUUM (this server runs
    autovacuum = off) and at the total after VACUUM (ANALYZE). The WAL of the real jobs
    (intake and work, submission to result) is measured; the copies' WAL is not a job's."""
    rec = part_record(opts, "footprint")
    rec["settings"].update({"footprint_jobs": opts.footprint_jobs, "footprint_total": opts.footprint_total})
    try:
        footprint_run(opts, rec, f"{DB}_footprint")
    except Exception as error:  # noqa: BLE001 - recorded in the results and the report
        log(f"FAILED footprint: {str(error)[:2000]}")
        rec.setdefault("errors", []).append({"what": "footprint", "error": str(error)[:4000],
                                             "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")})
    finally:
        drop_db(f"{DB}_footprint")
    save("footprint", finish(rec))


def footprint_run(opts, rec: dict, name: str) -> None:
    url = fresh("postgres", name)
    key = api_key(url)
    jobs = opts.footprint_jobs
    fake = Server("fake", [FAKE, "--listen", f"127.0.0.1:{PORT_FAKE}"], "footprint-fake")
    server = wal = None
    try:
        time.sleep(0.3)
        server = start_onejob(url, worker=True, provider_url=f"http://127.0.0.1:{PORT_FAKE}/v1", tag="footprint",
                              concurrency=64)
        intake = [LOADGEN, "intake", "--addr", ONEJOB_ADDR, "--key", key, "--clients", 32, "--jobs", jobs,
                  "--warmup", 0, "--prefix", "f"]
        note_command(rec, "serve (API and worker)", server.cmd)
        note_command(rec, "loadgen intake (the jobs)", [*intake[:5], "$KEY", *intake[6:]])
        rec.setdefault("configs", {}).setdefault("postgres", (WORK / "footprint.toml").read_text())
        rec["worked_loadavg_start"] = loadavg()
        wal = WalOfDatabase(name, follow=True)
        before, wal_before = pg_snapshot(name), wal_counters()
        t0 = time.monotonic()
        out = run_json(intake, timeout=3600)
        rec["intake"] = {k: out["intake"][k] for k in ("ok", "rps", "p50_ms", "p99_ms", "unexpected")}
        poller = Poller(name)
        try:
            wait_worked(poller, WORKED_DONE_SQL["onejob"], jobs, 1800)
        finally:
            poller.close()
        rec["worked_seconds"] = round(time.monotonic() - t0, 2)
        rec["worked_loadavg_end"] = loadavg()
        # A running backend reports its WAL and commit counts only every 10 s or so; one
        # that exits, at once: stop the node before reading the counters.
        server.stop()
        server = None
        settle()
        wal_after = wal_counters()
        rec["worked_pg"] = pg_delta(before, pg_snapshot(name), jobs)
        rec["worked_wal"] = {k: wal_after[k] - wal_before[k] for k in wal_after}
        rec["worked_wal_of_database"] = wal.finish()
        wal = None
    finally:
        if wal:
            wal.close()
        if server:
            server.stop()
        fake.stop()
    rec["states"] = psql(name, "SELECT string_agg(state || '=' || n, ' ') FROM (SELECT state, count(*) n FROM jobs GROUP BY 1) s")
    # row versions written per table (the node has exited, so its backends' counts are in)
    rec["row_writes"] = json.loads(psql(name, "SELECT json_object_agg(relname, json_build_object('inserted', n_tup_ins, "
                                              "'updated', n_tup_upd, 'hot_updated', n_tup_hot_upd, 'dead', n_dead_tup)) "
                                              "FROM pg_stat_user_tables WHERE relname IN ('jobs', 'attempts', 'job_events')"))
    rec["events_by_kind"] = json.loads(psql(name, "SELECT json_object_agg(kind, n) FROM "
                                                  "(SELECT kind, count(*) n FROM job_events GROUP BY 1) k"))
    rec["at_worked_unvacuumed"] = {"job_count": jobs, "tables": footprint(name), "indexes": index_sizes(name)}
    psql(name, "VACUUM (ANALYZE)")
    rec["at_worked"] = {"job_count": jobs, "tables": footprint(name), "indexes": index_sizes(name)}
    copies = opts.footprint_total // jobs - 1
    started = time.time()
    step = max(1, 200_000 // jobs)
    for lo in range(1, copies + 1, step):
        hi = min(copies, lo + step - 1)
        psql_file(name, SQL / "replicate_worked.sql", {"lo": lo, "hi": hi})
        log(f"footprint: {(hi + 1) * jobs:,} jobs")
    rec["shift_ms"] = int(psql(name, "SELECT ms FROM onejob_replicate_shift"))
    psql(name, "DROP TABLE onejob_replicate_source, onejob_replicate_shift")
    psql(name, "VACUUM (ANALYZE)")
    rec["copy_seconds"] = round(time.time() - started, 1)
    rec["at_total"] = {"job_count": (copies + 1) * jobs, "tables": footprint(name), "indexes": index_sizes(name)}
    rec["database_bytes"] = int(psql(name, f"SELECT pg_database_size('{name}')"))
    note_command(rec, "copies", f"psql -d {name} -f bench/sql/replicate_worked.sql -v lo=1 -v hi={step}  # and so on, "
                                f"to hi={copies}")


# ----------------------------------------------------------------------------- citus

PG_BIN = pathlib.Path(os.environ.get("BENCH_PG_BIN", "/usr/lib/postgresql/15/bin"))

# Every throwaway node's settings, the plain PostgreSQL's and each Citus node's alike: the
# shared server's (machine.json: 128 MB shared buffers, max_wal_size 1 GB, autovacuum off,
# fsync and synchronous_commit on), plus room for the coordinator's connections to its
# workers and Citus's two-phase commits of reference-table writes (API keys).
NODE_SETTINGS = """\
listen_addresses = '127.0.0.1'
max_connections = 200
shared_buffers = 128MB
max_wal_size = 1GB
min_wal_size = 80MB
autovacuum = off
max_prepared_transactions = 200
"""
# Citus loaded; the coordinator talks to its workers in plain text (onejob's URLs ask for
# sslmode=disable: Citus's own certificate is self-signed, X.509 v1). Citus's own defaults
# otherwise (32 shards per distributed table).
CITUS_SETTINGS = "shared_preload_libraries = 'citus'\ncitus.node_conninfo = 'sslmode=disable'\n"
CITUS_TENANTS = int(os.environ.get("BENCH_CITUS_TENANTS", "64"))


def as_postgres(cmd: list) -> list:
    """`cmd` run as the `postgres` user (PostgreSQL refuses to run as root)."""
    return (["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []) + [str(c) for c in cmd]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    """A throwaway PostgreSQL cluster of the harness's own: `initdb` into a temporary
    directory as the `postgres` user, on a free port, its socket in that directory, started
    with NODE_SETTINGS (and `extra`); stopped and removed by stop()."""

    def __init__(self, label: str, extra: str = ""):
        self.label = label
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix=f"onejob-bench-{label}-"))
        self.data = self.dir / "data"
        self.port = free_port()
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
        run(as_postgres([PG_BIN / "initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "--no-sync"]), timeout=300)
        with open(self.data / "postgresql.auto.conf", "a") as conf:
            conf.write(NODE_SETTINGS + extra)
        run(as_postgres([PG_BIN / "pg_ctl", "-D", self.data, "-o", f"-p {self.port} -k {self.dir}",
                         "-l", self.dir / "server.log", "-w", "start"]), timeout=300)
        self.env = dict(ENV, PGHOST="127.0.0.1", PGPORT=str(self.port), PGUSER="postgres")

    def url(self, db: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{db}?sslmode=disable"

    def psql(self, db: str, sql: str, timeout=3600) -> str:
        return run(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", db, "-c", sql],
                   env=self.env, timeout=timeout).stdout.strip()

    def stop(self) -> None:
        run(as_postgres([PG_BIN / "pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop"]), check=False, timeout=120)
        shutil.rmtree(self.dir, ignore_errors=True)


class Deployment:
    """One contender of the `citus` part: one plain PostgreSQL node (`workers` 0), or a Citus
    coordinator with `workers` worker nodes. Each run gets a fresh database (on every node,
    the `citus` extension created in each, the workers added to the coordinator), migrated by
    `onejob migrate` on the coordinator, which distributes onejob's tables."""

    def __init__(self, workers: int):
        self.workers_count = workers
        self.name = "postgres" if workers == 0 else f"citus-{workers}w"
        extra = CITUS_SETTINGS if workers else ""
        self.coordinator = Node(self.name, extra)
        self.workers = [Node(f"{self.name}-worker{i}", extra) for i in range(workers)]

    def __repr__(self) -> str:
        return self.name

    def nodes(self) -> list:
        return [self.coordinator, *self.workers]

    def fresh(self, db: str) -> str:
        self.drop(db)
        for node in self.nodes():
            node.psql("postgres", f'CREATE DATABASE "{db}"')
            if self.workers:
                node.psql(db, "CREATE EXTENSION citus")
        if self.workers:
            self.coordinator.psql(db, f"SELECT citus_set_coordinator_host('127.0.0.1', {self.coordinator.port})")
            for worker in self.workers:
                self.coordinator.psql(db, f"SELECT citus_add_node('127.0.0.1', {worker.port})")
        url = self.coordinator.url(db)
        run([ONEJOB, "migrate", "--database", url])
        if self.workers:  # onejob's migrate distributes the job tables: check it did
            n = self.coordinator.psql(db, "SELECT count(*) FROM pg_dist_partition WHERE partmethod = 'h'")
            if int(n) != 3:
                raise RuntimeError(f"{self.name}: {n} distributed tables after onejob migrate, expected 3")
        return url

    def drop(self, db: str) -> None:
        for node in self.nodes():
            node.psql("postgres", f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')

    def analyze(self, db: str) -> None:
        """The harness's ANALYZE after the warm-up (autovacuum is off, as on the shared server):
        on Citus, named tables, which the coordinator propagates to their shards."""
        self.coordinator.psql(db, "ANALYZE jobs, attempts, job_events" if self.workers else "ANALYZE")

    def stop(self) -> None:
        for node in self.nodes():
            node.stop()


def citus_keys(deployment: Deployment, url: str, tenants: int) -> pathlib.Path:
    """One API key per tenant (`bench-00`, `bench-01`, …, user `bench`), written one a line to a
    file for the load generator's --keys-file: its jobs spread over the tenants, and so over
    the shards."""
    keys = [run([ONEJOB, "keys", "create", "--database", url, "--tenant", f"bench-{t:02d}", "--user", "bench"]
                ).stdout.strip() for t in range(tenants)]
    path = WORK / f"citus-keys-{deployment.name}.txt"
    path.write_text("\n".join(keys) + "\n")
    return path


def citus_intake(opts, rec: dict, deployment: Deployment, run_index: int, clients: int) -> dict:
    """Intake through one `serve --no-worker` node on `deployment`: --warmup new jobs,
    ANALYZE, then --jobs new keys and replays of them, each phase against a node started for
    it (as the `intake` part), the jobs spread over the tenants' keys."""
    db = f"{DB}_citus"
    url = deployment.fresh(db)
    keys = citus_keys(deployment, url, opts.citus_tenants)
    tag = f"citus-intake-{deployment.name}-{clients}"
    r: dict = {"clients": clients, "jobs": opts.jobs}
    try:
        def phase(jobs: int, prefix: str, replay: bool) -> dict:
            server = start_onejob(url, worker=False, provider_url=f"http://127.0.0.1:{PORT_SINK}/v1", tag=tag)
            try:
                cmd = [LOADGEN, "intake", "--addr", ONEJOB_ADDR, "--keys-file", keys, "--clients", clients,
                       "--jobs", jobs, "--warmup", 0, "--prefix", prefix, *(["--replay-only"] if replay else []),
                       "--pid", server.pid]
                cpu = CpuSampler()
                out = run_json(cmd, timeout=3600)
                r_phase = out["replay" if replay else "intake"]
                r_phase["cpu"] = cpu.finish()
                note_command(rec, "loadgen replay" if replay else "loadgen new",
                             [*cmd[:5], "$KEYS_FILE", *cmd[6:-1], "$ONEJOB_PID"])
                note_command(rec, "serve", server.cmd)
                rec.setdefault("configs", {}).setdefault("onejob", (WORK / f"{tag}.toml").read_text())
                return r_phase
            finally:
                server.stop()

        prefix = f"c{run_index}"
        phase(opts.warmup, f"{prefix}w", False)
        deployment.analyze(db)
        r["intake"] = phase(opts.jobs, prefix, False)
        r["replay"] = phase(opts.jobs, prefix, True)
        r["rows_jobs"] = int(deployment.coordinator.psql(db, "SELECT count(*) FROM jobs"))
        r["tenants_with_jobs"] = int(deployment.coordinator.psql(db, "SELECT count(DISTINCT tenant) FROM jobs"))
    finally:
        deployment.drop(db)
    return r


def citus_worked(opts, rec: dict, deployment: Deployment, run_index: int) -> dict:
    """Jobs worked per second on `deployment`, queued mode, as the `worked` part's
    onejob-1w-default: --citus-worked-jobs jobs submitted through a `serve --no-worker` node
    (the load generator, --worked-clients clients, the jobs spread over the tenants' keys),
    ANALYZE, then one `onejob worker` process at onejob's defaults is started; the time runs
    from its spawn to the poll that sees every job `succeeded` (polled every 100 ms: on Citus
    each poll reads every shard). The database's own span (first attempt started -> last
    job updated) is recorded too."""
    db = f"{DB}_citus"
    jobs = opts.citus_worked_jobs
    url = deployment.fresh(db)
    keys = citus_keys(deployment, url, opts.citus_tenants)
    tag = f"citus-worked-{deployment.name}"
    fake = Server("fake", [FAKE, "--listen", f"127.0.0.1:{PORT_FAKE}"], f"{tag}-fake")
    api = worker = poller = None
    r: dict = {"jobs": jobs}
    try:
        time.sleep(0.3)
        api = start_onejob(url, worker=False, provider_url=f"http://127.0.0.1:{PORT_FAKE}/v1", tag=tag,
                           concurrency=None)
        config = WORK / f"{tag}.toml"
        worker_cmd = [ONEJOB, "worker", "--config", config, "--listen", f"127.0.0.1:{PORT_WORKER}"]
        intake = [LOADGEN, "intake", "--addr", ONEJOB_ADDR, "--keys-file", keys, "--clients", opts.worked_clients,
                  "--jobs", jobs, "--warmup", 0, "--prefix", f"k{run_index}"]
        note_command(rec, "onejob serve (API node)", api.cmd)
        note_command(rec, "onejob worker", worker_cmd)
        note_command(rec, "loadgen intake (the jobs)", [*intake[:5], "$KEYS_FILE", *intake[6:]])
        rec.setdefault("configs", {}).setdefault("onejob worked", config.read_text())
        t = time.monotonic()
        out = run_json(intake, timeout=3600)
        r["enqueue_s"] = time.monotonic() - t
        r["enqueue_rps"] = out["intake"]["rps"]
        r["enqueue_unexpected"] = out["intake"]["unexpected"]
        deployment.analyze(db)
        poller = Poller(db, env=deployment.coordinator.env)
        cpu = CpuSampler()
        t0 = time.monotonic()
        worker = Server("worker", worker_cmd, f"{tag}-worker")
        t1 = wait_worked(poller, WORKED_DONE_SQL["onejob"], jobs, opts.worked_timeout,
                         failed_sql="SELECT count(*) FROM jobs WHERE state IN ('failed', 'unknown')", fine_poll=0.1)
        r["cpu"] = cpu.finish()
        r["work_s"] = t1 - t0
        r["jobs_per_s"] = jobs / r["work_s"]
        psql_c = deployment.coordinator.psql
        span = psql_c(db, "SELECT extract(epoch FROM (SELECT max(updated_at) FROM jobs) - (SELECT min(started_at) FROM attempts))")
        r["db_span_s"] = float(span) if span else None
        r["db_span_jobs_per_s"] = jobs / r["db_span_s"] if r["db_span_s"] else None
        r["states"] = psql_c(db, "SELECT string_agg(state || '=' || n, ' ') FROM (SELECT state, count(*) n FROM jobs GROUP BY 1) s")
        r["attempts"] = int(psql_c(db, "SELECT count(*) FROM attempts"))
    finally:
        if poller:
            poller.close()
        if worker:
            worker.stop()
        if api:
            api.stop()
        fake.stop()
        deployment.drop(db)
    return r


def citus_intake_one(opts, rec: dict, run_index: int, clients: int, deployment: Deployment) -> None:
    r = citus_intake(opts, rec, deployment, run_index, clients)
    rec["runs"].append({"contender": deployment.name, "test": "intake", "run": run_index, "loadavg": loadavg(), **r})
    log(f"citus intake {deployment.name} c={clients} run {run_index}: new {r['intake']['rps']:.0f}/s "
        f"(p50 {r['intake']['p50_ms']:.1f} p99 {r['intake']['p99_ms']:.1f} ms), replay {r['replay']['rps']:.0f}/s, "
        f"unexpected {r['intake']['unexpected']} {r['replay']['unexpected']}, tenants {r['tenants_with_jobs']}")


def citus_worked_one(opts, rec: dict, run_index: int, deployment: Deployment) -> None:
    r = citus_worked(opts, rec, deployment, run_index)
    rec["runs"].append({"contender": deployment.name, "test": "worked", "run": run_index, "loadavg": loadavg(), **r})
    log(f"citus worked {deployment.name} run {run_index}: {r['jobs_per_s']:.0f} jobs/s ({r['work_s']:.2f} s; "
        f"database span {r['db_span_jobs_per_s'] or 0:.0f} jobs/s), enqueued {r['enqueue_rps']:.0f}/s, {r['states']}")


def part_citus(opts) -> None:
    """`citus`: intake (new keys and replays, at each of --citus-clients) and jobs worked per
    second (queued, one worker process at onejob's defaults) on one PostgreSQL and on Citus
    clusters of a coordinator and 1 and 2 workers, every node a throwaway cluster on this
    machine with the same settings (NODE_SETTINGS), all started at the start of the part and
    kept up through it; --runs rounds, the deployments interleaved within each (run, client
    count); the jobs spread over --citus-tenants tenants (one API key each)."""
    rec = part_record(opts, "citus")
    rec["settings"].update({"citus_clients": opts.citus_clients, "citus_tenants": opts.citus_tenants,
                            "citus_worked_jobs": opts.citus_worked_jobs, "worked_clients": opts.worked_clients,
                            "node_settings": NODE_SETTINGS, "citus_settings": CITUS_SETTINGS})
    libdir = run(["pg_config", "--pkglibdir"], check=False).stdout.strip()
    if any(opts.citus_workers) and not (pathlib.Path(libdir) / "citus.so").exists():
        log(f"citus: Citus is not installed ({libdir}/citus.so missing): part skipped")
        rec.setdefault("errors", []).append({"what": "citus", "error": f"Citus is not installed ({libdir}/citus.so)"})
        save("citus", finish(rec))
        return
    deployments: list[Deployment] = []
    # a SIGTERM (a stopped run) still stops and removes the clusters, in the `finally` below
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        for workers in opts.citus_workers:
            deployments.append(Deployment(workers))
            log(f"citus: started {deployments[-1].name} (ports "
                f"{', '.join(str(n.port) for n in deployments[-1].nodes())})")
        probe = deployments[-1].coordinator
        rec["citus_version"] = probe.psql("postgres", "SELECT default_version FROM pg_available_extensions "
                                                      "WHERE name = 'citus'")
        if deployments[-1].workers:
            rec["citus_shard_count"] = int(probe.psql("postgres", "SHOW citus.shard_count"))
        rec["postgres_version"] = deployments[0].coordinator.psql("postgres", "SELECT version()")
        for run_index in range(opts.runs):
            log(f"== citus round {run_index + 1} of {opts.runs}")
            for clients in opts.citus_clients:
                for deployment in deployments:
                    guarded(rec, citus_intake_one, opts, rec, run_index, clients, deployment)
            if opts.citus_worked_jobs:
                for deployment in deployments:
                    guarded(rec, citus_worked_one, opts, rec, run_index, deployment)
            save("citus", dict(rec, loadavg_end=loadavg(), finished=None))
    finally:
        for deployment in deployments:
            deployment.stop()
        signal.signal(signal.SIGTERM, previous)
    save("citus", finish(rec))


PARTS = ["machine", "ceiling", "intake", "peers", "dispatch", "e2e", "gateway", "growth", "steady", "rss", "worked", "nodes", "footprint", "citus"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smoke run: 1 run, small counts, 8 clients, growth to 100k")
    p.add_argument("--parts", default=",".join(PARTS), help="comma-separated parts (default: all)")
    p.add_argument("--runs", type=int, help="runs per configuration (default 3; quick 1)")
    p.add_argument("--jobs", type=int, help="measured jobs per intake run (default 5000; quick 500)")
    p.add_argument("--warmup", type=int, help="unmeasured jobs first (default 500; quick 100)")
    p.add_argument("--clients", help="client counts (default 8,32,128; quick 8)")
    p.add_argument("--duration", type=int, help="pgbench seconds (default 10; quick 4)")
    p.add_argument("--no-decompose", dest="decompose", action="store_false",
                   help="pgbench: only the ceiling (not the NOTIFY and onejob-SQL variants)")
    p.add_argument("--backends", default="postgres,sqlite")
    p.add_argument("--peers", default="graphile,pgboss,procrastinate")
    p.add_argument("--growth-sizes", help="existing jobs (default 0,1000000,10000000; quick 0,100000)")
    p.add_argument("--growth-clients", type=int, default=8)
    p.add_argument("--steady-jobs", type=int, help="measured jobs per size in the steady part (default 600000; quick 20000)")
    p.add_argument("--steady-runs", type=int, default=2, help="runs per size in the steady part (default 2; the order of the sizes rotates)")
    p.add_argument("--keep-templates", action="store_true", help="keep the bulk-loaded template databases")
    p.add_argument("--dispatch-jobs", type=int, help="default 1000; quick 100")
    p.add_argument("--dispatch-rate", type=float, default=50.0)
    p.add_argument("--e2e-jobs", type=int, help="default 5000; quick 500")
    p.add_argument("--e2e-clients", type=int, default=32)
    p.add_argument("--e2e-concurrency", type=int, default=16, help="[worker] concurrency for e2e")
    p.add_argument("--rss-conns", type=int, default=1000)
    p.add_argument("--gateway-calls", type=int, help="measured calls per gateway phase (default 2000; quick 300)")
    p.add_argument("--gateway-clients", help="client counts of the gateway part (default 1,8,32)")
    p.add_argument("--worked-jobs", type=int, help="jobs per measured worked run (default 20000; quick 2000)")
    p.add_argument("--worked-sweep-jobs", type=int, help="jobs per sweep run of the worked part (default 5000; quick 1000)")
    p.add_argument("--worked-modes", default="queued,concurrent",
                   help="queued (all jobs in, then the workers start) and/or concurrent (submitted while worked)")
    p.add_argument("--worked-concurrent-runs", type=int, help="rounds of the concurrent mode (default: --runs)")
    p.add_argument("--worked-clients", type=int, default=32, help="submitting clients in the worked part")
    p.add_argument("--worked-timeout", type=float, default=600, help="seconds one worked run may take")
    p.add_argument("--worked-contenders",
                   default="onejob-1w-default,onejob-2w-default,onejob-1w,onejob-2w,onejob-3w,pgboss,graphile,"
                           "pgboss-http,graphile-http",
                   help="onejob-<N>w (N worker processes, [worker] concurrency swept), onejob-<N>w-default "
                        "(nothing tuned), pgboss, graphile; pgboss-http, graphile-http: "
                        "the peer with a handler that makes onejob's call to the fake provider for each job")
    p.add_argument("--worked-best", help='skip the sweep for these contenders: JSON {"pgboss": {"batch_size": 1000, ...}, ...}')
    p.add_argument("--nodes-url-queries", default=None,
                   help="nodes part: comma-separated queries of the database URL, each measured in every round, "
                        "e.g. ',sslmode=disable' (the default URL, then without TLS); default: BENCH_PG_URL_QUERY")
    p.add_argument("--footprint-jobs", type=int, default=10000, help="jobs worked for real in the footprint part")
    p.add_argument("--footprint-total", type=int, default=1000000, help="jobs after copying them (footprint part)")
    p.add_argument("--citus-workers", default="0,1,2",
                   help="citus part: the deployments, by worker nodes (0: one plain PostgreSQL; N: a Citus "
                        "coordinator and N workers)")
    p.add_argument("--citus-clients", help="citus part: intake client counts (default 8,32)")
    p.add_argument("--citus-tenants", type=int, default=CITUS_TENANTS,
                   help="citus part: tenants (one API key each) the jobs are spread over")
    p.add_argument("--citus-worked-jobs", type=int, help="citus part: jobs per worked run (default 20000; quick 2000; "
                                                         "0: no worked runs)")
    p.add_argument("--no-report", action="store_true")
    opts = p.parse_args()
    q = opts.quick
    opts.runs = opts.runs or (1 if q else 3)
    opts.jobs = opts.jobs or (500 if q else 5000)
    opts.warmup = opts.warmup if opts.warmup is not None else (100 if q else 500)
    opts.clients = [int(c) for c in (opts.clients or ("8" if q else "8,32,128")).split(",")]
    opts.duration = opts.duration or (4 if q else 10)
    opts.backends = opts.backends.split(",")
    opts.peers = opts.peers.split(",")
    opts.growth_sizes = [int(s) for s in (opts.growth_sizes or ("0,100000" if q else "0,1000000,10000000")).split(",")]
    opts.dispatch_jobs = opts.dispatch_jobs or (100 if q else 1000)
    opts.e2e_jobs = opts.e2e_jobs or (500 if q else 5000)
    opts.steady_jobs = opts.steady_jobs or (20000 if q else 600000)
    opts.gateway_calls = opts.gateway_calls or (300 if q else 2000)
    opts.worked_jobs = opts.worked_jobs or (2000 if q else 20000)
    opts.worked_sweep_jobs = opts.worked_sweep_jobs or (1000 if q else 5000)
    opts.worked_modes = [m for m in opts.worked_modes.split(",") if m]
    opts.worked_concurrent_runs = opts.worked_concurrent_runs or opts.runs
    opts.worked_contenders = [c for c in opts.worked_contenders.split(",") if c]
    opts.gateway_clients = [int(c) for c in (opts.gateway_clients or "1,8,32").split(",")]
    opts.citus_workers = [int(w) for w in opts.citus_workers.split(",")]
    opts.citus_clients = [int(c) for c in (opts.citus_clients or "8,32").split(",")]
    if opts.citus_worked_jobs is None:
        opts.citus_worked_jobs = 2000 if q else 20000
    opts.nodes_url_queries = opts.nodes_url_queries.split(",") if opts.nodes_url_queries is not None else [PG_URL_QUERY]
    parts = [x for x in opts.parts.split(",") if x]
    unknown = [x for x in parts if x not in PARTS]
    if unknown:
        p.error(f"unknown parts {unknown}; known: {', '.join(PARTS)}")
    WORK.mkdir(parents=True, exist_ok=True)
    for binary in (ONEJOB, FAKE, LOADGEN):
        if not binary.exists():
            sys.exit(f"missing {binary}: run bench/run.sh (it builds them)")
    if "machine" not in parts and not (RESULTS / "machine.json").exists():
        parts.insert(0, "machine")
    if "machine" in parts:
        part_machine(opts)
    rounds(opts, parts)
    if "growth" in parts:
        log("== growth")
        part_growth(opts)
    if "steady" in parts:
        log("== steady")
        part_growth(opts, "steady")
    if "rss" in parts:
        log("== rss")
        part_rss(opts)
    if "worked" in parts:
        log("== worked")
        part_worked(opts)
    if "nodes" in parts:
        log("== nodes")
        part_nodes(opts)
    if "footprint" in parts:
        log("== footprint")
        part_footprint(opts)
    if "citus" in parts:
        log("== citus")
        part_citus(opts)
    if not opts.no_report:
        run([sys.executable, BENCH / "report.py"], timeout=120)
        log("wrote BENCHMARKS.md and bench/plot.svg")


if __name__ == "__main__":
    main()
