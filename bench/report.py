#!/usr/bin/env python3
"""Writes BENCHMARKS.md and bench/plot.svg from bench/results/*.json (no dependencies).

Medians are taken over the runs of each configuration; ratios are between medians of the
same harness invocation's parts (see each part's timestamps). The file is the current
report only, generated whole: why the figures are what they are, the experiments tried and
the history of earlier runs are in bench/journal.md, written by hand and dated.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import statistics

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
PEER_NAMES = {"graphile": "graphile-worker", "pgboss": "pg-boss", "procrastinate": "Procrastinate"}
WORKED_NAMES = {"onejob-1w-default": "onejob at its defaults, 1 worker process",
                "onejob-2w-default": "onejob at its defaults, 2 worker processes",
                "onejob-1w": "onejob, 1 worker process", "onejob-2w": "onejob, 2 worker processes",
                "onejob-3w": "onejob, 3 worker processes", **PEER_NAMES,
                "pgboss-http": "pg-boss, handler calls the provider",
                "graphile-http": "graphile-worker, handler calls the provider"}


def knobs(settings):
    """A contender's settings in the worked part, as its own option names."""
    names = {"concurrency": "concurrency", "worker_processes": None, "batch_size": "batchSize", "workers": "workers",
             "polling_s": "pollingIntervalSeconds", "poll_ms": "pollInterval", "local_queue": "localQueue.size",
             "complete_batch_delay": "completeJobBatchDelay"}
    if settings.get("concurrency", 0) is None:
        return "defaults (nothing set)"
    return ", ".join(f"{names.get(k, k)} {v}" for k, v in settings.items() if names.get(k, k) and not (k == "local_queue" and not v))


def worked_order(contender):
    """onejob at its defaults first, then tuned onejob, then the peers."""
    return (not contender.endswith("-default"), not contender.startswith("onejob"), contender)


def load(part):
    path = RESULTS / f"{part}.json"
    return json.loads(path.read_text()) if path.exists() else None


def med(values):
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.median(values) if values else None


def fmt(v, digits=0):
    if v is None:
        return "–"
    if isinstance(v, float) and math.isnan(v):
        return "–"
    return f"{v:,.{digits}f}"


def ratio(a, b, digits=2):
    return f"{a / b:.{digits}f}×" if a is not None and b else "–"


def group(runs, *keys):
    out = {}
    for r in runs:
        out.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    return out


def spread(values, digits=0):
    values = [v for v in values if v is not None]
    return " / ".join(fmt(v, digits) for v in values)


class Report:
    def __init__(self):
        self.machine = load("machine")
        self.ceiling = load("ceiling")
        self.intake = load("intake")
        self.dispatch = load("dispatch")
        self.gateway = load("gateway")
        self.e2e = load("e2e")
        self.peers = load("peers")
        self.growth = load("growth")
        self.steady = load("steady")
        self.rss = load("rss")
        self.worked = load("worked")
        self.nodes = load("nodes")
        self.footprint = load("footprint")
        self.citus = load("citus")
        self.lines = []

    def w(self, text=""):
        self.lines.append(text)

    # -- medians -------------------------------------------------------------------------

    def ceiling_rps(self, contender, clients):
        if not self.ceiling:
            return None
        return med([r["rps"] for r in self.ceiling["runs"] if r["contender"] == contender and r["clients"] == clients])

    def intake_med(self, backend, clients, phase, field="rps"):
        if not self.intake:
            return None
        return med([r[phase][field] for r in self.intake["runs"]
                    if r["backend"] == backend and r["clients"] == clients and phase in r])

    def peer_med(self, peer, clients, phase, field="rps"):
        if not self.peers:
            return None
        return med([r[phase][field] for r in self.peers["runs"] if r["contender"] == peer and r["clients"] == clients])

    def best_peer(self, clients):
        if not self.peers:
            return None, None
        best = max(((self.peer_med(p, clients, "intake") or 0, p) for p in {r["contender"] for r in self.peers["runs"]}),
                   default=(0, None))
        return (best[0] or None), best[1]

    def clients(self, part):
        return sorted({r["clients"] for r in part["runs"]}) if part else []

    # -- sections ------------------------------------------------------------------------

    def header(self):
        parts = [p for p in (self.machine, self.ceiling, self.intake, self.dispatch, self.e2e, self.gateway, self.peers, self.growth, self.steady, self.rss, self.worked, self.nodes, self.footprint, self.citus) if p]
        modes = sorted({p.get("mode", "") for p in parts if p.get("mode")})
        self.w("# Benchmarks")
        self.w()
        self.w("<!-- Generated by bench/report.py from bench/results/*.json; re-run `bench/run.sh` to refresh. "
               "Nothing in it is written by hand; the dated journal of the runs and their analysis is bench/journal.md. -->")
        self.w()
        self.w("onejob against the physical ceiling of its one durable statement (pgbench) and against the queues "
               "users would otherwise pick (graphile-worker, pg-boss, Procrastinate), in one harness run, on one "
               "machine and one PostgreSQL. Every number is the **median of the runs** listed under *Raw runs*; "
               "every ratio is between medians of the same harness invocation.")
        self.w()
        mode = ", ".join(modes) or "?"
        self.w(f"**Run mode: {mode}.** " + ("A *quick* run is a smoke test (one run, small counts): its numbers are "
                                            "indicative only. " if "quick" in modes else "") +
               "**Noise:** this is a 2-core machine shared with other engineers' compilers and test suites; the "
               "load average (1/5/15 min) at the start and end of each part is listed below. A load above ~1 means "
               "the numbers are depressed and noisier than on an idle machine; compare ratios within one run rather "
               "than absolute values across runs.")
        self.w()
        self.w("| part | mode | started (UTC) | load avg at start | load avg at end | runs per config |")
        self.w("|---|---|---|---|---|---|")
        for p in parts:
            if p.get("part") == "machine":
                self.w(f"| machine | – | {p['taken']} | {p['loadavg']} | – | – |")
                continue
            self.w(f"| {p['part']} | {p['mode']} | {p['started']} | {p['loadavg_start']} | {p.get('loadavg_end')} | "
                   f"{1 if p['part'] == 'rss' else p['settings']['runs']} |")
        self.w()

    def how_to_run(self):
        self.w("## How to run")
        self.w()
        self.w("```sh")
        self.w("bench/run.sh                      # everything, 3 runs per configuration (≈ 30 min on 2 cores, plus the build)")
        self.w("bench/run.sh --quick              # smoke run: 1 run, 500 jobs, 8 clients, growth to 100k (a few minutes)")
        self.w("bench/run.sh --parts intake,peers # some parts only; other parts' results are kept")
        self.w("bench/run.sh --skip-build --parts growth --keep-templates   # reuse binaries / the 10 M template")
        self.w("bench/run.sh --parts citus        # one PostgreSQL vs Citus, coordinator + 1 and + 2 workers (section 4d)")
        self.w("bench/run.sh --report-only        # rewrite BENCHMARKS.md and bench/plot.svg from bench/results/")
        self.w("bench/run.sh --help               # every option (runs, jobs, clients, durations, sizes)")
        self.w("```")
        self.w()
        self.w("`bench/run.sh` builds onejob and onejob-fake in release mode "
               "(`CARGO_TARGET_DIR=/var/cache/onejob/target-bench cargo build --release -p onejob -p onejob-fake`), "
               "builds the load generator `bench/loadgen` (its own cargo project with its own `Cargo.lock`, *not* a "
               "workspace member, target dir `/var/cache/onejob/target-loadgen`), installs the peers from their "
               "registries into `/var/cache/onejob/bench-peers` (npm: graphile-worker, pg-boss, pg; a venv with "
               "procrastinate; reused when present, versions pinned in run.sh), then runs `bench/harness.py`. Every "
               "run uses a fresh database (`onejob_bench_*`, dropped afterwards) or a fresh SQLite file under "
               "`/var/cache/onejob/bench-run/`, where the per-run configs and server logs are also kept. "
               "PostgreSQL's settings are not touched.")
        self.w()

    def machine_section(self):
        m = self.machine
        if not m:
            return
        self.w("## Machine")
        self.w()
        self.w("| | |")
        self.w("|---|---|")
        self.w(f"| CPU | {', '.join(m['cpu_models'])} |")
        self.w(f"| cores (`nproc`) | {m['nproc']} |")
        self.w(f"| memory | {m['mem_gib']} GiB |")
        self.w(f"| kernel | {m['kernel']} |")
        self.w(f"| PostgreSQL | {m['postgres_version']} |")
        self.w(f"| disk flush rate (`pg_test_fsync`, one 8 kB write + fdatasync) | {fmt(m.get('pg_test_fsync_fdatasync_ops_per_s'))} ops/s |")
        for k, v in m["versions"].items():
            self.w(f"| {k} | {v} |")
        b = m.get("onejob_binary", {})
        self.w(f"| onejob commit | {m.get('git_head')} (+ {m.get('git_dirty_files')} uncommitted files under crates/ at the time) |")
        self.w(f"| onejob binary measured | built {b.get('built')} from the working tree of that moment, sha256 {str(b.get('sha256'))[:16]}… "
               f"{('— ' + b['build_note']) if b.get('build_note') else ''} |")
        self.w()
        self.w("PostgreSQL settings (all defaults except where the source says `configuration file`; "
               "`autovacuum=off` is this machine's setting, not PostgreSQL's default):")
        self.w()
        self.w("```")
        for s in m["postgres_settings"]:
            self.w(s)
        self.w("```")
        self.w()

    def targets(self):
        self.w("## Targets")
        self.w()
        c8 = self.ceiling_rps("pgbench-ceiling", 8)
        on8 = self.intake_med("postgres", 8, "intake")
        rep8 = self.intake_med("postgres", 8, "replay")
        peer8, peer = self.best_peer(8)
        rows = []

        def verdict(ok):
            return "–" if ok is None else ("**met**" if ok else "**not met**")

        rows.append(("intake ≥ 1.0× the pgbench single-statement ceiling, 8 clients (PostgreSQL)",
                     f"{fmt(on8)} /s vs {fmt(c8)} tps = {ratio(on8, c8)}",
                     verdict(on8 / c8 >= 1.0 if on8 and c8 else None)))
        rows.append(("intake ≥ 3× the best peer, 8 clients",
                     f"{fmt(on8)} /s vs {PEER_NAMES.get(peer, peer)} {fmt(peer8)} /s = {ratio(on8, peer8)}",
                     verdict(on8 / peer8 >= 3.0 if on8 and peer8 else None)))
        rows.append(("replay ≥ 2× the intake rate (PostgreSQL, 8 clients)",
                     f"{fmt(rep8)} /s vs {fmt(on8)} /s = {ratio(rep8, on8)}",
                     verdict(rep8 / on8 >= 2.0 if rep8 and on8 else None)))
        again8 = self.intake_med("postgres", 8, "finished_again")
        if again8:
            rows.append(("replay of finished jobs, once known, ≥ 2× the intake rate (PostgreSQL, 8 clients)",
                         f"{fmt(again8)} /s vs {fmt(on8)} /s = {ratio(again8, on8)}",
                         verdict(again8 / on8 >= 2.0 if on8 else None)))
        d50 = None
        if self.dispatch:
            d50 = med([r["from_201_ms"]["p50"] for r in self.dispatch["runs"] if r["backend"] == "postgres"])
        rows.append(("dispatch p50 ≤ 5 ms on PostgreSQL", f"{fmt(d50, 2)} ms", verdict(d50 <= 5 if d50 is not None else None)))
        def growth_row(part: dict, target: str, *details: str) -> tuple:
            """Intake at the largest size against the smallest (empty), medians of the part's runs."""
            sizes = sorted({r["existing_jobs"] for r in part["runs"]})
            at = {size: med([r["intake"]["rps"] for r in part["runs"] if r["existing_jobs"] == size])
                  for size in (sizes[0], sizes[-1])}
            empty, big = at[sizes[0]], at[sizes[-1]]
            return (f"{target} ({'; '.join([*details, f'measured at {sizes[-1]:,}'])})",
                    f"{fmt(big)} /s vs {fmt(empty)} /s = {ratio(big, empty)}",
                    verdict(big >= 0.9 * empty if big and empty else None)
                    + ("" if sizes[-1] >= 10_000_000 else " (smaller size: quick run)"))

        if self.growth:
            rows.append(growth_row(self.growth, "intake at 10 M existing jobs within 10 % of the empty table"))
        if self.steady:
            rows.append(growth_row(self.steady, "the same in steady state",
                                   f"{self.steady['jobs']:,} jobs per size, spanning checkpoints"))
        if self.rss:
            pg = [r for r in self.rss["runs"] if r["backend"] == "postgres"]
            if pg:
                peak = pg[0]["rss_peak_kib"]
                rows.append((f"RSS ≤ 64 MiB at {pg[0]['open']:,} open connections (PostgreSQL)",
                             f"{fmt(peak / 1024, 1)} MiB peak", verdict(peak / 1024 <= 64 if peak else None)))
        if self.gateway:
            for (backend, clients), rs in sorted(group(self.gateway["runs"], "backend", "clients").items()):
                a50 = med([r["added_p50_ms"] for r in rs])
                a99 = med([r["added_p99_ms"] for r in rs])
                rr = med([r["replay_over_new"] for r in rs])
                rows.append((f"gateway adds p50 ≤ 3 ms and p99 ≤ 10 ms ({backend}, {clients} clients)",
                             f"+{fmt(a50, 2)} ms / +{fmt(a99, 2)} ms",
                             verdict(a50 <= 3 and a99 <= 10 if a50 is not None and a99 is not None else None)))
                rows.append((f"gateway replays ≥ 2× new calls ({backend}, {clients} clients)",
                             f"{fmt(rr, 2)}×", verdict(rr >= 2 if rr is not None else None)))
        if self.worked:
            measured = [r for r in self.worked["runs"] if r.get("stage") == "measured" and r["mode"] == "queued"]
            by = group(measured, "contender")
            same_work = max((med([r["jobs_per_s"] for r in rs]) or 0 for (c,), rs in by.items()
                             if c.endswith("-http")), default=None)
            for workers in (1, 2):
                default = by.get((f"onejob-{workers}w-default",))
                tuned = by.get((f"onejob-{workers}w",))
                if not default:
                    continue
                d = med([r["jobs_per_s"] for r in default])
                if same_work:
                    rows.append((f"jobs worked at the defaults ≥ 2× the best peer doing the same work "
                                 f"({workers} worker process{'es' if workers > 1 else ''}, queued)",
                                 f"{fmt(d)} /s vs {fmt(same_work)} /s = {ratio(d, same_work)}",
                                 verdict(d / same_work >= 2.0 if d and same_work else None)))
                if tuned:
                    t = med([r["jobs_per_s"] for r in tuned])
                    rows.append((f"jobs worked at the defaults within 20 % of the best tuned setting "
                                 f"({workers} worker process{'es' if workers > 1 else ''}, queued)",
                                 f"{fmt(d)} /s vs {fmt(t)} /s ({knobs(tuned[0]['settings'])}) = {ratio(d, t)}",
                                 verdict(d >= 0.8 * t if d and t else None)))
        self.w("| target | measured (medians) | |")
        self.w("|---|---|---|")
        for r in rows:
            self.w(f"| {r[0]} | {r[1]} | {r[2]} |")
        self.w()

    def ceiling_section(self):
        if not self.ceiling:
            return
        self.w("## 1. The PostgreSQL ceiling (pgbench)")
        self.w()
        self.w("Fixed duration, `-M prepared`, fsync on, one transaction per job. At 128 clients pgbench opens "
               f"at most {self._cap()} connections, fewer when other programs hold many of the server's "
               "max_connections = 100 at that moment (the connections used are shown).")
        self.w()
        self.w("- **ceiling**: one `INSERT … ON CONFLICT (tenant, user_id, key_hash) DO NOTHING` into a table of "
               "onejob's `jobs` shape with its unique index (bench/sql/ceiling_schema.sql, bench/sql/ceiling.pgbench). "
               "This is the number the targets compare with.")
        self.w("- **ceiling + NOTIFY**: the same plus `pg_notify()` in the same transaction, which is what onejob's "
               "`jobs_notify_dispatch` trigger added to every intake until migration 20261130000007 "
               "(bench/sql/ceiling_notify.pgbench); **ceiling, then NOTIFY after commit**: the ceiling's INSERT "
               "commits alone, then `pg_notify()` goes in a second transaction with "
               "`SET LOCAL synchronous_commit = off` (bench/sql/ceiling_notify_after.pgbench) — what onejob does "
               "now, though once per batch rather than once per job.")
        self.w("- **onejob's SQL**: onejob's intake statement for a batch of one on onejob's real schema: one "
               "autocommit statement that looks the key up in the unique index (what answers a replay) and "
               "`INSERT … ON CONFLICT DO NOTHING RETURNING …` the job with its `created` event in data-modifying "
               "CTEs (bench/sql/onejob_tx.pgbench) — what an unbatched intake costs the database, without HTTP or "
               "Rust. It runs after the same warm-up and `ANALYZE` as onejob over HTTP (section 2).")
        self.w()
        self.w("*jobs per WAL sync* = jobs committed / `pg_stat_wal.wal_sync` increments during the run: how many "
               "commits PostgreSQL's own group flush packs into one fdatasync (cluster-wide counter: other "
               "databases' writes on this shared server count too, so it is a lower bound).")
        self.w()
        names = {"pgbench-ceiling": "ceiling", "pgbench-ceiling-notify": "ceiling + NOTIFY",
                 "pgbench-ceiling-notify-after": "ceiling, then NOTIFY after commit (sync off)",
                 "pgbench-onejob-sql": "onejob's SQL"}
        self.w("| clients | variant | tps | p50 ms | p99 ms | jobs per WAL sync | vs ceiling |")
        self.w("|---|---|---|---|---|---|---|")
        for c in self.clients(self.ceiling):
            base = self.ceiling_rps("pgbench-ceiling", c)
            for cont, label in names.items():
                rs = [r for r in self.ceiling["runs"] if r["contender"] == cont and r["clients"] == c]
                if not rs:
                    continue
                conns = sorted({r["connections"] for r in rs})
                span = f"{conns[0]}" if len(conns) == 1 else f"{conns[0]}–{conns[-1]}"
                cl = f"{c}" + (f" ({span} conns)" if conns != [c] else "")
                v = med([r["rps"] for r in rs])
                self.w(f"| {cl} | {label} | {fmt(v)} | {fmt(med([r['p50_ms'] for r in rs]), 2)} | "
                       f"{fmt(med([r['p99_ms'] for r in rs]), 2)} | "
                       f"{fmt(med([r.get('pg', {}).get('jobs_per_wal_sync') for r in rs]), 1)} | {ratio(v, base)} |")
        self.w()

    def _cap(self):
        for r in (self.ceiling or {}).get("runs", []):
            if r["connections"] != r["clients"]:
                return r["connections"]
        return 64

    def intake_section(self):
        if not self.intake:
            return
        self.w("## 2. onejob intake over HTTP")
        self.w()
        s = self.intake["settings"]
        self.w(f"`onejob serve --no-worker`; the load generator (bench/loadgen) runs N clients, each on its own "
               f"keep-alive HTTP/1.1 connection, closed loop, sharing a counter of {s['jobs']:,} measured jobs "
               f"after {s['warmup']:,} unmeasured warm-up jobs and an `ANALYZE` (what autovacuum, off on this server, "
               f"would have done by then; every contender gets the same). *new*: `POST /v1/jobs` with unique keys (expects "
               f"201); *replay*: the same keys and params again (expects 200 `Idempotent-Replayed`). Warm-up, new and "
               f"replay each run against their own onejob process, stopped after the phase, so that the database "
               f"counters read around a phase hold that phase exactly. *finished*: then every job is cancelled in "
               f"SQL (as the owner's cancel of a job without an attempt leaves it) and the same keys are replayed "
               f"twice against one new onejob process: *first* finds each job in the database, and keeps it in "
               f"memory because a finished job never changes (`store/settled.rs`, up to 10,000 jobs); *again* is "
               f"answered from memory. onejob's "
               f"PostgreSQL pools are fixed: 16 connections, plus 1 for intake's shared commits (its one writer) and 2 for unawaited writes; SQLite runs WAL with `synchronous = FULL`. "
               + (f"onejob's database URL carries `{s['pg_url_query']}`" if s.get("pg_url_query") else
                  "onejob's database URL carries no `sslmode`: sqlx's `prefer`, TLS on this server")
               + " (the peers connect without TLS).")
        self.w()
        for backend in ("postgres", "sqlite"):
            runs = [r for r in self.intake["runs"] if r["backend"] == backend]
            if not runs:
                continue
            self.w(f"**{backend}**")
            self.w()
            self.w("| clients | new req/s | p50 ms | p99 ms | replay req/s | p50 ms | p99 ms | replay / new | finished, first / again req/s | again p50 ms | again / new | new / pgbench ceiling | new / best peer | onejob CPU µs per new / replay / again | jobs per write transaction | jobs per WAL sync | peak RSS MiB | errors |")
            self.w("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
            for c in sorted({r["clients"] for r in runs}):
                rs = [r for r in runs if r["clients"] == c]
                new = med([r["intake"]["rps"] for r in rs])
                rep = med([r["replay"]["rps"] for r in rs])
                ceil = self.ceiling_rps("pgbench-ceiling", c)
                peer, _ = self.best_peer(c)
                errors = sum(sum(r[p]["unexpected"].values()) for r in rs
                             for p in ("intake", "replay", "finished", "finished_again") if p in r)
                fin = [r for r in rs if "finished" in r]
                first = med([r["finished"]["rps"] for r in fin]) if fin else None
                again = med([r["finished_again"]["rps"] for r in fin]) if fin else None
                again_p50 = med([r["finished_again"]["p50_ms"] for r in fin]) if fin else None
                cpu_again = med([r["finished_again"].get("server_cpu_us_per_ok") for r in fin]) if fin else None
                rss = med([r.get("rss_peak_kib") for r in rs])
                cpu_new = med([r["intake"].get("server_cpu_us_per_ok") for r in rs])
                cpu_rep = med([r["replay"].get("server_cpu_us_per_ok") for r in rs])
                jpc = med([r["intake"].get("pg", {}).get("jobs_per_write_xact") for r in rs])
                jps = med([r["intake"].get("pg", {}).get("jobs_per_wal_sync") for r in rs])
                self.w(f"| {c} | {fmt(new)} | {fmt(med([r['intake']['p50_ms'] for r in rs]), 2)} | "
                       f"{fmt(med([r['intake']['p99_ms'] for r in rs]), 2)} | {fmt(rep)} | "
                       f"{fmt(med([r['replay']['p50_ms'] for r in rs]), 2)} | {fmt(med([r['replay']['p99_ms'] for r in rs]), 2)} | "
                       f"{ratio(rep, new)} | {fmt(first)} / {fmt(again)} | {fmt(again_p50, 2)} | {ratio(again, new)} | "
                       f"{ratio(new, ceil)} | {ratio(new, peer)} | {fmt(cpu_new)} / {fmt(cpu_rep)} / {fmt(cpu_again)} | "
                       f"{fmt(jpc, 2)} | {fmt(jps, 1)} | {fmt(rss / 1024 if rss else None, 1)} | {errors} |")
            self.w()
        self.w("*onejob CPU*: user + system time of the onejob process during the phase (/proc/<pid>/stat) per "
               "answered request. *jobs per write transaction*: new jobs / transaction ids assigned during the "
               "phase (`pg_snapshot_xmax(pg_current_snapshot())` before and after; one per transaction that "
               "writes, cluster-wide). On PostgreSQL each intake batch that created jobs takes two: its own and the "
               "`NOTIFY` sent after it (a transaction of its own), so the mean group-commit batch is twice this "
               "figure (about *jobs per WAL sync*, since the `NOTIFY` commits without a flush). *jobs per WAL sync*: as in section 1.")
        self.w()

    def dispatch_section(self):
        if not self.dispatch and not self.e2e:
            return
        self.w("## 3. Dispatch latency and end-to-end throughput")
        self.w()
        if self.dispatch:
            s = self.dispatch["runs"][0]
            self.w(f"`onejob serve` with its worker (`[worker] poll_interval = \"2s\"`, the fallback only). The load "
                   f"generator serves an OpenAI-compatible sink as the kind's only provider (`openai-chat` adapter), "
                   f"submits {s['jobs']:,} jobs one at a time at {s['rate_per_s']:.0f}/s (after {s['warmup']} unmeasured), "
                   f"and measures, per job, the time from the 201 reaching the client to the sink receiving the "
                   f"provider call (same process, same monotonic clock; the prompt carries a marker).")
            self.w()
            self.w("| backend | p50 ms | p90 ms | p99 ms | max ms | from request sent: p50 ms | calls arriving before the 201 | missing | duplicate calls |")
            self.w("|---|---|---|---|---|---|---|---|---|")
            for backend in ("postgres", "sqlite"):
                rs = [r for r in self.dispatch["runs"] if r["backend"] == backend]
                if not rs:
                    continue
                g = lambda k: med([r["from_201_ms"][k] for r in rs])  # noqa: E731
                self.w(f"| {backend} | {fmt(g('p50'), 2)} | {fmt(g('p90'), 2)} | {fmt(g('p99'), 2)} | {fmt(g('max'), 2)} | "
                       f"{fmt(med([r['from_send_ms']['p50'] for r in rs]), 2)} | {sum(r['arrived_before_201'] for r in rs)} | "
                       f"{sum(r['missing'] for r in rs)} | {sum(r['sink_duplicate_calls'] for r in rs)} |")
            self.w()
        if self.e2e:
            s = self.e2e["runs"][0]
            self.w(f"End to end: `onejob-fake` (zero latency) behind the `openai-chat` adapter, `[worker] concurrency = "
                   f"{s['worker_concurrency']}`; {s['clients']} clients submit {s['jobs']:,} jobs as fast as they can while "
                   f"the worker runs; jobs/s = jobs / (first submission → `onejob_attempts_ended_total{{outcome=\"won\"}}` "
                   f"reaching the count, polled every 10 ms on `/metrics`).")
            self.w()
            self.w("| backend | jobs/s end to end | submissions/s meanwhile | submit p50 ms | submit p99 ms | onejob CPU µs per job | write transactions per job | succeeded |")
            self.w("|---|---|---|---|---|---|---|---|")
            for backend in ("postgres", "sqlite"):
                rs = [r for r in self.e2e["runs"] if r["backend"] == backend]
                if not rs:
                    continue
                self.w(f"| {backend} | {fmt(med([r['jobs_per_s'] for r in rs]))} | {fmt(med([r['submit']['rps'] for r in rs]))} | "
                       f"{fmt(med([r['submit']['p50_ms'] for r in rs]), 2)} | {fmt(med([r['submit']['p99_ms'] for r in rs]), 2)} | "
                       f"{fmt(med([r.get('server_cpu_us_per_job') for r in rs]))} | "
                       f"{fmt(med([(r.get('pg', {}).get('write_xacts') or 0) / r['succeeded'] if r.get('pg') else None for r in rs]), 1)} | "
                       f"{spread([r['succeeded'] for r in rs])} of {rs[0]['jobs']:,} |")
            self.w()

    def peers_section(self):
        if not self.peers:
            return
        self.w("## 4. Peers: enqueue with their own dedupe feature")
        self.w()
        versions = {r["contender"]: r.get("version") for r in self.peers["runs"]}
        pools = sorted({r.get("db_pool") for r in self.peers["runs"] if r.get("db_pool")})
        self.w("Same database server, same measured job count and warm-up (then `ANALYZE`), same client concurrency; database pool = "
               f"min(clients, ≤ 64 free connections) (pools used: {', '.join(map(str, pools))}). *new*: unique keys; *dup*: the same keys again, which must add nothing; *rows* "
               "are counted by the harness with psql after both phases (equal to the job count = it dedupes).")
        self.w()
        self.w(f"- graphile-worker {versions.get('graphile')}: `addJob('bench', payload, {{jobKey, jobKeyMode: "
               "'unsafe_dedupe'}})` (the `add_job` SQL function; `unsafe_dedupe` = keep the existing job untouched, "
               "onejob's semantics; the default `replace` mode would overwrite the payload).")
        self.w(f"- pg-boss {versions.get('pgboss')}: `send('bench', data, {{singletonKey}})` on a queue created with "
               "`policy: 'short'` (in pg-boss 10, a `standard` queue does not dedupe by `singletonKey` alone; `short` "
               "allows one queued job per key; `send` answers `null` for a duplicate).")
        self.w(f"- Procrastinate {versions.get('procrastinate')}: `task.configure(queueing_lock=key).defer_async()`; "
               "a duplicate raises `AlreadyEnqueued`.")
        self.w()
        self.w("| peer | clients | new jobs/s | p50 ms | p99 ms | dup req/s | dup p50 ms | rows after / jobs | dedupes | errors |")
        self.w("|---|---|---|---|---|---|---|---|---|---|")
        for peer in ("graphile", "pgboss", "procrastinate"):
            for c in sorted({r["clients"] for r in self.peers["runs"] if r["contender"] == peer}):
                rs = [r for r in self.peers["runs"] if r["contender"] == peer and r["clients"] == c]
                errors = sum(sum(r[p]["unexpected"].values()) for r in rs for p in ("intake", "dup"))
                self.w(f"| {PEER_NAMES[peer]} | {c} | {fmt(self.peer_med(peer, c, 'intake'))} | "
                       f"{fmt(self.peer_med(peer, c, 'intake', 'p50_ms'), 2)} | {fmt(self.peer_med(peer, c, 'intake', 'p99_ms'), 2)} | "
                       f"{fmt(self.peer_med(peer, c, 'dup'))} | {fmt(self.peer_med(peer, c, 'dup', 'p50_ms'), 2)} | "
                       f"{spread([r['rows_counted_by_harness'] for r in rs])} / {rs[0]['jobs']:,} | "
                       f"{'yes' if all(r['rows_counted_by_harness'] == r['jobs'] for r in rs) else '**NO**'} | {errors} |")
        self.w()
        if self.intake:
            self.w("onejob on the same footing (PostgreSQL): new keys and replays, from section 2:")
            self.w()
            self.w("| clients | onejob new /s | best peer new /s | onejob / best peer | onejob replay /s | best peer dup /s |")
            self.w("|---|---|---|---|---|---|")
            for c in self.clients(self.intake):
                new = self.intake_med("postgres", c, "intake")
                rep = self.intake_med("postgres", c, "replay")
                peer, name = self.best_peer(c)
                dup = max([self.peer_med(p, c, "dup") or 0 for p in PEER_NAMES] or [0]) or None
                self.w(f"| {c} | {fmt(new)} | {fmt(peer)} ({PEER_NAMES.get(name, name)}) | {ratio(new, peer)} | {fmt(rep)} | {fmt(dup)} |")
            self.w()

    def steady_table(self):
        st = self.steady
        if not st:
            return
        self.w(f"**Steady state** (part `steady`, {st['started'][:16].replace('T', ' ')} UTC): {max(r['run'] for r in st['runs']) + 1} run(s) of "
               f"{st['jobs']:,} measured jobs per size (the order of the sizes rotates from run to run), long enough to span checkpoints "
               "(`checkpoint_timeout` and `max_wal_size` as configured, see *Machine*), so that a key-index leaf "
               "pays its full-page image about once per checkpoint interval, as in production, instead of once per "
               "job as in the short runs above, which start right after the template copy's checkpoint.")
        if st.get("note"):
            self.w()
            self.w(f"({st['note']}.)")
        self.w()
        self.w("| existing jobs | new req/s | p50 ms | p99 ms | vs empty | WAL per job | checkpoints during each run | runs (req/s) |")
        self.w("|---|---|---|---|---|---|---|---|")
        sizes = sorted({r["existing_jobs"] for r in st["runs"]})
        base = med([r["intake"]["rps"] for r in st["runs"] if r["existing_jobs"] == sizes[0]])
        for size in sizes:
            rs = [r for r in st["runs"] if r["existing_jobs"] == size]
            v = med([r["intake"]["rps"] for r in rs])
            wal = med([r["intake"].get("pg", {}).get("wal_bytes_per_job") for r in rs])
            self.w(f"| {size:,} | {fmt(v)} | {fmt(med([r['intake']['p50_ms'] for r in rs]), 2)} | "
                   f"{fmt(med([r['intake']['p99_ms'] for r in rs]), 2)} | {ratio(v, base)} | {fmt(wal)} B | "
                   f"{' / '.join(str(r.get('checkpoints', '–')) for r in rs)} | {spread([r['intake']['rps'] for r in rs])} |")
        self.w()

    def growth_section(self):
        g = self.growth
        if not g:
            return
        self.w("## 5. Growth and memory")
        self.w()
        self.w(f"Intake (new keys, PostgreSQL, {g['clients']} clients, `--no-worker`) on a database already holding N "
               "jobs. The rows are bulk-loaded into onejob's real `jobs` table after `onejob migrate` with "
               "`INSERT … SELECT generate_series` (bench/sql/bulk_load.sql): every constraint and trigger in "
               "place; finished jobs (`cancelled`, `dispatch_at` NULL) owned by the benchmark's own tenant and user, "
               "so new keys land at random places among them in the unique index (the worst case); UUIDv7-like ids "
               "in the past. The matching `job_events` rows are not created: intake only appends to that table and "
               "never reads it, so they do not change the measurement (they would only make the database bigger). "
               "Each run starts from a copy of a template database (`CREATE DATABASE … TEMPLATE … STRATEGY "
               "FILE_COPY`), vacuumed and analyzed once after the load; every run (the empty one too) runs `ANALYZE` "
               "after its warm-up, and the order of the sizes rotates from run to run.")
        self.w()
        sizes = sorted({r["existing_jobs"] for r in g["runs"]})
        base = med([r["intake"]["rps"] for r in g["runs"] if r["existing_jobs"] == sizes[0]])
        with_sql = all("sql" in r for r in g["runs"])
        if with_sql:
            self.w("After each onejob run, *onejob's SQL alone*: `pgbench` running onejob's intake statement "
                   "for a batch of one (bench/sql/onejob_tx.pgbench, as in section 1) on another copy of the same "
                   f"database after the same warm-up and `ANALYZE`, {g['clients']} clients, same duration as the "
                   "ceiling: what the database alone does "
                   "at that size, without HTTP or Rust. *WAL per job* is `pg_stat_wal` bytes over the measured jobs.")
            self.w()
            self.w("| existing jobs | new req/s | p50 ms | p99 ms | vs empty | WAL per job | onejob's SQL alone tx/s | vs empty | WAL per job | runs (req/s) |")
            self.w("|---|---|---|---|---|---|---|---|---|---|")
            sql_base = med([r["sql"]["rps"] for r in g["runs"] if r["existing_jobs"] == sizes[0]])
        else:
            self.w("| existing jobs | new req/s | p50 ms | p99 ms | vs empty | runs (req/s) |")
            self.w("|---|---|---|---|---|---|")
        for size in sizes:
            rs = [r for r in g["runs"] if r["existing_jobs"] == size]
            v = med([r["intake"]["rps"] for r in rs])
            row = (f"| {size:,} | {fmt(v)} | {fmt(med([r['intake']['p50_ms'] for r in rs]), 2)} | "
                   f"{fmt(med([r['intake']['p99_ms'] for r in rs]), 2)} | {ratio(v, base)} |")
            if with_sql:
                sv = med([r["sql"]["rps"] for r in rs])
                wal = med([r["intake"].get("pg", {}).get("wal_bytes_per_job") for r in rs])
                swal = med([r["sql"].get("pg", {}).get("wal_bytes_per_job") for r in rs])
                row += f" {fmt(wal)} B | {fmt(sv)} | {ratio(sv, sql_base)} | {fmt(swal)} B |"
            self.w(f"{row} {spread([r['intake']['rps'] for r in rs])} |")
        self.w()
        self.steady_table()
        for size, t in sorted(g.get("templates", {}).items(), key=lambda kv: int(kv[0])):
            self.w(f"- {int(size):,} jobs: loaded in {t['load_seconds']:,} s; `jobs` with its indexes {t['jobs_table_size']}, "
                   f"unique key index {t['key_index_size']}, database {t['database_size']}.")
        if g.get("templates"):
            self.w()
        if g.get("explain"):
            big = max(g["explain"], key=int)
            self.w(f"`EXPLAIN (ANALYZE, BUFFERS)` of the intake INSERT at {int(big):,} existing jobs (rolled back):")
            self.w()
            self.w("```")
            self.w(g["explain"][big])
            self.w("```")
            self.w()
        if self.rss:
            self.w("Memory: `onejob serve --no-worker` holding keep-alive connections opened by `onejob-loadgen hold` "
                   "(one `GET /healthz` on each, then one `POST /v1/jobs` on every connection at once), VmRSS from "
                   "/proc/<pid>/status, sampled every 50 ms.")
            self.w()
            self.w("| backend | connections held | RSS idle MiB | RSS with connections open MiB | after a POST on each MiB | peak MiB | POST answers |")
            self.w("|---|---|---|---|---|---|---|")
            for r in self.rss["runs"]:
                m = lambda k: fmt(r[k] / 1024, 1) if r.get(k) else "–"  # noqa: E731
                self.w(f"| {r['backend']} | {r['open']:,} of {r['conns']:,} | {m('rss_before_kib')} | {m('rss_open_kib')} | "
                       f"{m('rss_after_post_kib')} | {m('rss_peak_kib')} | {r['post_statuses']} |")
            self.w()

    def errors_section(self):
        errors = [(p["part"], e) for p in (self.ceiling, self.intake, self.dispatch, self.e2e, self.peers, self.worked, self.nodes, self.footprint, self.citus) if p
                  for e in p.get("errors", [])]
        if not errors:
            return
        self.w("## Failed measurements")
        self.w()
        self.w("Runs that failed (they are missing from the medians above):")
        self.w()
        for part, e in errors:
            first = e["error"].strip().splitlines()[-1][:300] if e["error"].strip() else "?"
            self.w(f"- {part} {e['what']} at {e['at']}: `{first}`")
        self.w()

    def worked_section(self):
        if not self.worked:
            return
        w = self.worked
        st = w["settings"]
        runs = w["runs"]
        measured = [r for r in runs if r.get("stage") == "measured"]
        versions = {r["contender"]: r.get("version") for r in runs if r.get("version")}
        self.w("## 4b. Jobs worked per second: onejob's worker vs pg-boss's and graphile-worker's own workers")
        self.w()
        self.w(f"Submit → worker → provider → result, same PostgreSQL, a fresh database per run. **queued**: "
               f"{st['worked_jobs']:,} jobs are put in first with no worker running (onejob: through its HTTP API, "
               f"{st['worked_clients']} clients of the load generator, to a `serve --no-worker` node; the peers: their "
               f"bulk insert, 1,000 per call), then `ANALYZE`, then the workers start; jobs/s = jobs / (workers "
               f"started → the harness's poll sees every job finished). **concurrent**: the workers are up first (the empty tables not analyzed: bench/journal.md), then "
               f"{st['worked_clients']} clients submit one call per job while they work; jobs/s = jobs / (first "
               f"submission → last job finished). *Finished* is read from the database by one held `psql` session "
               f"every 100 ms, every 10 ms past 90 %: onejob `jobs.state = 'succeeded'` (the result committed), "
               f"pg-boss `pgboss.job.state = 'completed'`, graphile-worker the job row deleted (it deletes on "
               f"completion). onejob's time starts at the spawn of its `onejob worker` processes (start-up and "
               f"connecting included); a peer's at the \"go\" sent to a script whose pool is already open "
               f"(graphile-worker's `run()` starts its pool after it): the comparison is conservative for onejob.")
        self.w()
        self.w("- onejob: `onejob worker` processes (1 or 2) beside one `serve --no-worker` node; the kind's only "
               "provider is `onejob-fake` (zero latency) over loopback HTTP through the `openai-chat` adapter (one "
               "call per attempt; the `fake` adapter's task API would add a status poll per job). "
               "`[worker] concurrency` swept.")
        self.w(f"- pg-boss {versions.get('pgboss', '?')}: `work('bench', {{batchSize, pollingIntervalSeconds}}, async () => {{}})` "
               "called *workers* times on one instance (pool 20); a worker waits out its polling interval (≥ 0.5 s) "
               "between fetches even when busy, and completes a batch in one statement without awaiting it.")
        self.w(f"- graphile-worker {versions.get('graphile', '?')}: `run({{concurrency, pollInterval, maxPoolSize: concurrency + 2, "
               "preset: {worker: {localQueue: {size}, completeJobBatchDelay}}}})` with a no-op task; it LISTENs for "
               "new jobs (always on), `pollInterval` is its fallback.")
        self.w("- *handler calls the provider* (pgboss-http, graphile-http): the same peer and setting, its handler "
               "making onejob's call for each job (an OpenAI-compatible chat completion to the same `onejob-fake`, "
               "answer read; Node's `fetch`, keep-alive): the queue plus the work, without onejob's records of it "
               "(attempts, events, the result). */ same work*: onejob against the best of these.")
        query = (w.get("settings") or {}).get("pg_url_query")
        self.w(f"- onejob's database URL carries `{query}`" if query else
               "- onejob's database URL carries no `sslmode`: sqlx's `prefer`, TLS on this server")
        self.w("  (the peers' node-postgres connects without TLS).")
        self.w()
        best = w.get("best", {})
        if measured:
            self.w(f"Best setting of each contender (from the sweep below), measured in {st['runs']} interleaved round(s):")
            self.w()
            self.w("| mode | contender | setting | jobs/s (median) | runs | / best peer | / same work | write xacts per job | rows written per job | WAL syncs per job | WAL bytes per job | load avg (1 min) |")
            self.w("|---|---|---|---|---|---|---|---|---|---|---|---|")
            for mode in st["worked_modes"]:
                rows = group([r for r in measured if r["mode"] == mode], "contender")
                peer_best = max((med([r["jobs_per_s"] for r in rs]) or 0 for (c,), rs in rows.items()
                                 if not c.startswith("onejob") and not c.endswith("-http")), default=None)
                http_best = max((med([r["jobs_per_s"] for r in rs]) or 0 for (c,), rs in rows.items()
                                 if c.endswith("-http")), default=None)
                for (cont,), rs in sorted(rows.items(), key=lambda kv: worked_order(kv[0][0])):
                    jps = med([r["jobs_per_s"] for r in rs])
                    pg = [r.get("pg") or {} for r in rs]
                    per = lambda k: med([(x.get(k) or 0) / r["jobs"] if x.get(k) is not None else None for x, r in zip(pg, rs)])  # noqa: E731
                    self.w(f"| {mode} | {WORKED_NAMES.get(cont, cont)} | {knobs(rs[0]['settings'])} | {fmt(jps)} | "
                           f"{spread([r['jobs_per_s'] for r in rs])} | "
                           f"{ratio(jps, peer_best, 3) if cont.startswith('onejob') else '–'} | "
                           f"{ratio(jps, http_best, 3) if cont.startswith('onejob') and http_best else '–'} | "
                           f"{fmt(per('write_xacts'), 2)} | {fmt(per('rows_written'), 1)} | "
                           f"{fmt(per('wal_syncs'), 2)} | {fmt(per('wal_bytes'))} | {spread([r['loadavg'][0] for r in rs], 2)} |")
            self.w()
            slowing = [r for r in measured if r["contender"].startswith("onejob") and r["mode"] == "queued"
                       and r.get("quarter_jobs_per_s") and all(r["quarter_jobs_per_s"])]
            if slowing:
                self.w("Whether a run slows as it goes (queued; jobs/s in its last quarter over its first, median): " + "; ".join(
                    f"{WORKED_NAMES.get(c, c)} {fmt(med([r['quarter_jobs_per_s'][3] / r['quarter_jobs_per_s'][0] for r in rs]), 2)}×"
                    for (c,), rs in sorted(group(slowing, "contender").items(), key=lambda kv: worked_order(kv[0][0]))) + ".")
                self.w()
            onejob_q = [r for r in measured if r["contender"].startswith("onejob") and r["mode"] == "queued" and r.get("db_span_s")]
            if onejob_q:
                self.w("onejob's figure without its process start: first attempt started → last job updated, by the "
                       "database's clock: " + "; ".join(
                           f"{WORKED_NAMES[c]} {fmt(med([r['jobs'] / r['db_span_s'] for r in rs]))} jobs/s"
                           for (c,), rs in sorted(group(onejob_q, "contender").items())) + ".")
                self.w()
        sweep = [r for r in runs if r.get("stage") == "sweep"]
        if sweep:
            self.w(f"The sweep (queued, {st['worked_sweep_jobs']:,} jobs, one run per setting; **bold** = chosen):")
            self.w()
            self.w("| contender | setting | jobs/s | load avg (1 min) |")
            self.w("|---|---|---|---|")
            for r in sweep:
                chosen = best.get(r["contender"]) == {k: v for k, v in r["settings"].items() if k != "worker_processes"}
                b = "**" if chosen else ""
                self.w(f"| {WORKED_NAMES.get(r['contender'], r['contender'])} | {b}{knobs(r['settings'])}{b} | "
                       f"{b}{fmt(r['jobs_per_s'])}{b} | {r['loadavg'][0]:.2f} |")
            self.w()
        self.w("*write xacts*: transaction ids assigned (one per writing transaction, cluster-wide); *rows "
               "written*: this database's rows inserted, updated and deleted (`pg_stat_database`: table rows, not "
               "index entries; a peer that deletes a finished job counts the delete); *WAL syncs*: "
               "`pg_stat_wal.wal_sync` (cluster-wide: other databases' traffic included); all per job over the "
               "measured phase.")
        self.w()

    def nodes_section(self):
        if not self.nodes:
            return
        n = self.nodes
        self.w("## 4c. Intake through 1 and 3 API nodes on one PostgreSQL")
        self.w()
        self.w(f"`serve --no-worker` nodes on one database (16 database connections each, the default pool), new keys "
               f"only. Each node is warmed up first with its own load generator ({n['settings']['warmup']} jobs), then "
               f"`ANALYZE`; then one load generator per node, the clients (total) and {4 * n['settings']['jobs']:,} jobs "
               f"split evenly between them, all started together; req/s = every 201 / (first start → last finish). "
               f"p50: the median of the nodes' p50s; p99: the largest node's p99 (the load generators report "
               f"percentiles, not samples). All on this one 2-core machine: the nodes, the load generators and "
               f"PostgreSQL share its cores, with whatever else runs on it. *CPU*: percent of one core over the "
               f"measured window (the machine is {100 * (self.machine or {}).get('nproc', 2)} %), from /proc: machine "
               f"busy, then postgres (all its processes) / onejob / load generators / pg_waldump (below) / everything else (other sessions' work). *Jobs per WAL sync* "
               f"is server-wide (`pg_stat_wal.wal_sync`: other sessions' commits included); *WAL bytes per job*: this "
               f"database's records, read from pg_wal by `pg_waldump --follow` alongside the run (runs where it fell "
               f"behind and lost segments have no figure), and in "
               f"brackets the server-wide `pg_stat_wal.wal_bytes` over the same window (other sessions' databases "
               f"included). *Database URL*: onejob's `database` (sqlx, as libpq): without `sslmode` it is `prefer`, "
               f"which speaks TLS to this server (its connections show `ssl` in `pg_stat_ssl`); `sslmode=disable`, "
               f"plain TCP. Configurations are interleaved in every round.")
        self.w()
        self.w("| database URL | nodes | clients (total) | req/s (median) | runs | / 1 node | p50 ms | p99 ms | jobs per WAL sync | "
               "WAL bytes per job: this database (server) | CPU busy % | postgres / onejob / loadgen / pg_waldump / other % | load avg (1 min) |")
        self.w("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        runs = [dict(r, url_query=r.get("url_query", "")) for r in n["runs"]]
        groups = group(runs, "url_query", "nodes", "clients")
        for (q, nodes, c), rs in sorted(groups.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1])):
            rps = med([r["rps"] for r in rs])
            one = med([r["rps"] for r in groups.get((q, 1, c), [])])
            cpu = [r.get("cpu") or {} for r in rs]
            prog = lambda k: med([x.get("by_program_pct", {}).get(k) for x in cpu])  # noqa: E731
            self.w(f"| {self.url_label(q)} | {nodes} | {c} | {fmt(rps)} | {spread([r['rps'] for r in rs])} | "
                   f"{ratio(rps, one) if nodes != 1 else '–'} | {fmt(med([r['p50_ms'] for r in rs]), 2)} | "
                   f"{fmt(med([r['p99_ms'] for r in rs]), 2)} | {fmt(med([r['pg'].get('jobs_per_wal_sync') for r in rs]), 1)} | "
                   f"{fmt(med([r['pg'].get('own_wal_bytes_per_job') for r in rs]))} ({fmt(med([r['pg'].get('wal_bytes_per_job') for r in rs]))}) | "
                   f"{fmt(med([x.get('machine_busy_pct') for x in cpu]))} | "
                   f"{' / '.join(fmt(prog(k)) for k in ('postgres', 'onejob', 'onejob-loadgen', 'pg_waldump', 'other'))} | "
                   f"{spread([r['loadavg'][0] for r in rs], 2)} |")
        self.w()
        self.w("Per node (each run: the nodes' own req/s over their own time):")
        self.w()
        self.w("| database URL | nodes | clients (total) | run | req/s | per-node req/s | per-node p99 ms | CPU busy % | other sessions' CPU % | load avg before / after (1 min) |")
        self.w("|---|---|---|---|---|---|---|---|---|---|")
        for r in sorted(runs, key=lambda r: (r["clients"], r["url_query"], r["nodes"], r["run"])):
            cpu = r.get("cpu") or {}
            self.w(f"| {self.url_label(r['url_query'])} | {r['nodes']} | {r['clients']} | {r['run'] + 1} | {fmt(r['rps'])} | {spread(r['per_node_rps'])} | "
                   f"{spread(r.get('per_node_p99_ms', []), 1)} | {fmt(cpu.get('machine_busy_pct'))} | "
                   f"{fmt(cpu.get('by_program_pct', {}).get('other'))} | {r.get('loadavg_before', ['–'])[0]} / {r['loadavg'][0]} |")
        self.w()

    @staticmethod
    def citus_order(contender):
        """One PostgreSQL first, then Citus by its worker nodes."""
        return 0 if contender == "postgres" else int(contender.split("-")[1].rstrip("w"))

    @staticmethod
    def citus_label(contender):
        if contender == "postgres":
            return "one PostgreSQL"
        n = Report.citus_order(contender)
        return f"Citus: coordinator + {n} worker{'s' if n > 1 else ''}"

    def citus_section(self):
        c = self.citus
        if not c or not c.get("runs"):
            return
        st = c["settings"]
        runs = c["runs"]
        self.w("## 4d. Citus: one PostgreSQL against a coordinator with 1 and 2 worker nodes")
        self.w()
        self.w(f"Every node is a throwaway PostgreSQL cluster the harness starts on this machine (`initdb` into a "
               f"temporary directory, its own port), all with the same settings: the shared server's "
               f"(`shared_buffers = 128MB`, `max_wal_size = 1GB`, `autovacuum = off`, `fsync` and "
               f"`synchronous_commit` on), plus `max_connections = 200` and `max_prepared_transactions = 200`; the "
               f"Citus nodes load Citus {c.get('citus_version', '?')} at its defaults "
               f"({c.get('citus_shard_count', '?')} shards per distributed table) and talk to each other without "
               f"TLS. *One PostgreSQL* is such a cluster without Citus (not the shared server, which other "
               f"sessions use). Each run gets a fresh database, `onejob migrate` on the coordinator (which "
               f"distributes the job tables by `tenant`), and {st['citus_tenants']} tenants with an API key each: "
               f"the load generator sends job *i* under key *i* mod {st['citus_tenants']}, so the jobs spread over "
               f"the tenants and so over the shards. onejob's database URL is the coordinator's, with "
               f"`sslmode=disable`. The three deployments are up through the whole part and interleaved within "
               f"each round; all of them, onejob, the load generator and other sessions' work share this machine's "
               f"{(self.machine or {}).get('nproc', 2)} cores: a Citus cluster here shows what distribution costs "
               f"per statement and per shard, not what added machines would add.")
        self.w()
        self.w(f"- **intake**: one `serve --no-worker` node; {st['warmup']} jobs to warm up, `ANALYZE` (on Citus "
               f"the coordinator passes it on to every shard), then {st['jobs']:,} new keys and the same keys "
               f"again (replays of unfinished jobs), each phase against a node started for it.")
        if st.get("citus_worked_jobs"):
            self.w(f"- **worked**: as section 4b's *queued* mode for onejob at its defaults with one worker "
                   f"process: {st['citus_worked_jobs']:,} jobs submitted through a `serve --no-worker` node "
                   f"({st['worked_clients']} clients), `ANALYZE`, then one `onejob worker` (nothing tuned) is "
                   f"started against `onejob-fake`; jobs/s = jobs / (its spawn → the poll that sees every job "
                   f"`succeeded`, polled every 100 ms; on Citus a poll reads every shard). *By the database's "
                   f"clock*: first attempt started → last job updated.")
        self.w()
        intake = [r for r in runs if r.get("test") == "intake"]
        if intake:
            self.w("| clients | deployment | new jobs/s (median) | runs | / one PostgreSQL | p50 / p99 ms | replays/s (median) | "
                   "/ one PostgreSQL | CPU busy % | postgres / onejob / loadgen / other % | load avg (1 min) |")
            self.w("|---|---|---|---|---|---|---|---|---|---|---|")
            groups = group(intake, "clients", "contender")
            for (cl, cont), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], self.citus_order(kv[0][1]))):
                base = groups.get((cl, "postgres"), [])
                new = med([r["intake"]["rps"] for r in rs])
                rep = med([r["replay"]["rps"] for r in rs])
                cpu = [r["intake"].get("cpu") or {} for r in rs]
                prog = lambda k: med([x.get("by_program_pct", {}).get(k) for x in cpu])  # noqa: E731
                self.w(f"| {cl} | {self.citus_label(cont)} | {fmt(new)} | {spread([r['intake']['rps'] for r in rs])} | "
                       f"{ratio(new, med([r['intake']['rps'] for r in base])) if cont != 'postgres' else '–'} | "
                       f"{fmt(med([r['intake']['p50_ms'] for r in rs]), 1)} / {fmt(med([r['intake']['p99_ms'] for r in rs]), 1)} | "
                       f"{fmt(rep)} | {ratio(rep, med([r['replay']['rps'] for r in base])) if cont != 'postgres' else '–'} | "
                       f"{fmt(med([x.get('machine_busy_pct') for x in cpu]))} | "
                       f"{' / '.join(fmt(prog(k)) for k in ('postgres', 'onejob', 'onejob-loadgen', 'other'))} | "
                       f"{spread([r['loadavg'][0] for r in rs], 2)} |")
            self.w()
        worked = [r for r in runs if r.get("test") == "worked"]
        if worked:
            self.w("| deployment | jobs worked/s (median) | runs | / one PostgreSQL | by the database's clock: jobs/s | "
                   "submission beforehand: jobs/s | CPU busy % | postgres / onejob / other % | load avg (1 min) |")
            self.w("|---|---|---|---|---|---|---|---|---|")
            groups = group(worked, "contender")
            base = med([r["jobs_per_s"] for r in groups.get(("postgres",), [])])
            for (cont,), rs in sorted(groups.items(), key=lambda kv: self.citus_order(kv[0][0])):
                jps = med([r["jobs_per_s"] for r in rs])
                cpu = [r.get("cpu") or {} for r in rs]
                prog = lambda k: med([x.get("by_program_pct", {}).get(k) for x in cpu])  # noqa: E731
                self.w(f"| {self.citus_label(cont)} | {fmt(jps)} | {spread([r['jobs_per_s'] for r in rs])} | "
                       f"{ratio(jps, base) if cont != 'postgres' else '–'} | "
                       f"{fmt(med([r.get('db_span_jobs_per_s') for r in rs]))} | {fmt(med([r.get('enqueue_rps') for r in rs]))} | "
                       f"{fmt(med([x.get('machine_busy_pct') for x in cpu]))} | "
                       f"{' / '.join(fmt(prog(k)) for k in ('postgres', 'onejob', 'other'))} | "
                       f"{spread([r['loadavg'][0] for r in rs], 2)} |")
            self.w()
        self.w("*CPU*: percent of one core over the measured phase, from /proc (the machine is "
               f"{100 * (self.machine or {}).get('nproc', 2)} %): machine busy, then postgres (every node's processes "
               "together) / onejob / the load generator / everything else (other sessions' work).")
        self.w()

    @staticmethod
    def url_label(query):
        return f"`?{query}`" if query else "default (TLS)"

    def footprint_section(self):
        f = self.footprint
        if not f or "at_total" not in f:
            return
        total, real = f["at_total"], f["at_worked"]
        n_total, n_real = total["job_count"], real["job_count"]
        per_m = lambda b, n: b / n * 1_000_000  # noqa: E731
        mb = lambda b: fmt(b / 1e6)  # noqa: E731
        self.w("## 5b. What a million jobs leave in PostgreSQL")
        self.w()
        pg = f.get("worked_pg") or {}
        wal = f.get("worked_wal") or {}
        rw = f.get("row_writes") or {}
        updates = ("rows updated after their insert: " + ", ".join(
            f"`{t}` {rw[t]['updated'] / rw[t]['inserted']:.1f} times per row ({rw[t]['hot_updated'] / max(1, rw[t]['updated']):.0%} HOT)"
            for t in ("jobs", "attempts") if t in rw and rw[t]["inserted"])
            + ", `job_events` never (`pg_stat_user_tables`)") if rw else "each job and attempt row updated as the job runs"
        self.w(f"{n_real:,} jobs run for real: one `onejob serve` node with its worker (`[worker] concurrency = 64`) "
               f"on `onejob-fake` (zero latency), submitted by the load generator (32 clients) while the worker works "
               f"({f.get('states')}; {fmt(f.get('worked_seconds'), 1)} s, load {f.get('worked_loadavg_start')} → "
               f"{f.get('worked_loadavg_end')}). Then copied with their attempts and events by "
               f"`bench/sql/replicate_worked.sql` to {n_total:,} jobs: copy *c* is the same jobs {f.get('shift_ms', 0) / 1000:.0f} s × *c* "
               f"later (timestamps moved, UUIDv7 ids with their milliseconds moved, so they grow with time as "
               f"onejob's do; new key hashes), inserted in time order with every constraint and trigger in place; "
               f"then `VACUUM (ANALYZE)`. Bytes: `pg_table_size` (heap, TOAST, free-space and visibility maps), "
               f"`pg_relation_size` per index; MB = 10⁶ bytes. The real jobs alone were written as production "
               f"writes them: {updates}, leaving dead row versions (this "
               f"server runs `autovacuum = off`) whose space `VACUUM` frees for reuse but does not give back, so their "
               f"bytes per job are the same before and after it; the copies, inserted once, fill that freed space first. "
               f"The jobs' payloads are the benchmark's: a prompt of about 15 characters and onejob-fake's short "
               f"answer; real prompts and results add their own size to `jobs` (TOAST past about 2 kB).")
        self.w()
        self.w(f"| table | rows per job | heap bytes per job | index bytes per job | heap + indexes: MB per million jobs | "
               f"the {n_real:,} real jobs alone: heap / index bytes per job |")
        self.w("|---|---|---|---|---|---|")
        sums = [0, 0]
        for t in ("jobs", "attempts", "job_events"):
            a, r1 = total["tables"][t], real["tables"][t]
            sums[0] += a["table_bytes"]
            sums[1] += a["index_bytes"]
            self.w(f"| `{t}` | {a['rows'] / n_total:.2f} | {fmt(a['table_bytes'] / n_total)} | {fmt(a['index_bytes'] / n_total)} | "
                   f"{mb(per_m(a['table_bytes'] + a['index_bytes'], n_total))} | "
                   f"{fmt(r1['table_bytes'] / n_real)} / {fmt(r1['index_bytes'] / n_real)} |")
        real_sum = sum(real["tables"][t]["table_bytes"] + real["tables"][t]["index_bytes"] for t in real["tables"])
        self.w(f"| **total** | | {fmt(sums[0] / n_total)} | {fmt(sums[1] / n_total)} | "
               f"**{mb(per_m(sums[0] + sums[1], n_total))}** | {fmt(real_sum / n_real)} in all |")
        self.w()
        self.w(f"Whole database at {n_total:,} jobs (`pg_database_size`, catalogs included): "
               f"{mb(f['database_bytes'])} MB. The copies took {fmt(f.get('copy_seconds'))} s.")
        self.w()
        self.w(f"| index | bytes per job at {n_total:,} jobs (= MB per million jobs) | bytes per job, real {n_real:,} jobs after VACUUM |")
        self.w("|---|---|---|")
        for name, size in total["indexes"].items():
            r = real["indexes"].get(name)
            self.w(f"| `{name}` | {fmt(size / n_total)} | "
                   f"{fmt(r / n_real) if r is not None else '–'} |")
        self.w()
        own = (f.get("worked_wal_of_database") or {}).get("database")
        if own:
            self.w(f"WAL of the {n_real:,} real jobs, submission to result, this database's records only (read from "
                   f"pg_wal with `pg_waldump`: records naming its relations, and the COMMITs of their transactions): "
                   f"**{fmt(own['bytes'] / n_real)} bytes per job**, {fmt(own['records'] / n_real, 1)} records, "
                   f"{fmt(own['commits'] / n_real, 2)} committed write transactions and "
                   f"{fmt(own['fpi_records'] / n_real, 3)} full-page images per job "
                   f"({wal.get('checkpoints', '?')} checkpoint(s) started during the run, server-wide; a page's "
                   f"first change after one is written whole). The server-wide counters (`pg_stat_wal`, other "
                   f"sessions' databases included) said {fmt(pg.get('wal_bytes_per_job'))} bytes and "
                   f"{fmt(1 / pg['jobs_per_wal_sync'], 2) if pg.get('jobs_per_wal_sync') else '–'} WAL flushes per job. "
                   f"The copies' WAL is not counted (a bulk copy is not a job's life).")
            self.w()
        elif pg:
            self.w(f"WAL of the {n_real:,} real jobs, submission to result (server-wide `pg_stat_wal`, other sessions' "
                   f"databases included; `pg_waldump` could not read the range): "
                   f"{fmt(pg.get('wal_bytes_per_job'))} bytes per job, {wal.get('checkpoints', '?')} checkpoint(s).")
            self.w()

    def plot_section(self):
        self.w("## Throughput against concurrency")
        self.w()
        self.w("![throughput against concurrency](bench/plot.svg)")
        self.w()
        self.w("Medians; log-scale x axis. pgbench at 128 clients uses 64 connections (see section 1).")
        self.w()

    def raw_section(self):
        self.w("## Raw runs")
        self.w()
        self.w("Per configuration, the value of each run in order (req/s, jobs/s or ms), so the medians above can be "
               "checked. Full records, with every percentile and the load average after each run, are in "
               "bench/results/*.json.")
        self.w()
        self.w("| part | contender | clients / size | runs | load avg after each run (1 min) |")
        self.w("|---|---|---|---|---|")
        if self.ceiling:
            for (cont, c), rs in sorted(group(self.ceiling["runs"], "contender", "clients").items()):
                self.w(f"| ceiling | {cont} | {c} | {spread([r['rps'] for r in rs])} | {spread([r['loadavg'][0] for r in rs], 2)} |")
        if self.intake:
            for (b, c), rs in sorted(group(self.intake["runs"], "backend", "clients").items()):
                self.w(f"| intake new | onejob-{b} | {c} | {spread([r['intake']['rps'] for r in rs])} | {spread([r['loadavg'][0] for r in rs], 2)} |")
                self.w(f"| intake replay | onejob-{b} | {c} | {spread([r['replay']['rps'] for r in rs])} | |")
                fin = [r for r in rs if "finished" in r]
                if fin:
                    self.w(f"| intake replay of finished, first | onejob-{b} | {c} | {spread([r['finished']['rps'] for r in fin])} | |")
                    self.w(f"| intake replay of finished, again | onejob-{b} | {c} | {spread([r['finished_again']['rps'] for r in fin])} | |")
        if self.peers:
            for (p, c), rs in sorted(group(self.peers["runs"], "contender", "clients").items()):
                self.w(f"| peers new | {PEER_NAMES[p]} | {c} | {spread([r['intake']['rps'] for r in rs])} | {spread([r['loadavg'][0] for r in rs], 2)} |")
                self.w(f"| peers dup | {PEER_NAMES[p]} | {c} | {spread([r['dup']['rps'] for r in rs])} | |")
        if self.dispatch:
            for (b,), rs in sorted(group(self.dispatch["runs"], "backend").items()):
                self.w(f"| dispatch p50 ms | onejob-{b} | – | {spread([r['from_201_ms']['p50'] for r in rs], 2)} | {spread([r['loadavg'][0] for r in rs], 2)} |")
        if self.e2e:
            for (b,), rs in sorted(group(self.e2e["runs"], "backend").items()):
                self.w(f"| e2e jobs/s | onejob-{b} | {rs[0]['clients']} | {spread([r['jobs_per_s'] for r in rs])} | {spread([r['loadavg'][0] for r in rs], 2)} |")
        if self.worked:
            measured = [r for r in self.worked["runs"] if r.get("stage") == "measured"]
            for (m, cont), rs in sorted(group(measured, "mode", "contender").items()):
                self.w(f"| worked {m} jobs/s | {WORKED_NAMES.get(cont, cont)} | {rs[0]['jobs']:,} jobs | "
                       f"{spread([r['jobs_per_s'] for r in rs])} | {spread([r['loadavg'][0] for r in rs], 2)} |")
        if self.nodes:
            nruns = [dict(r, url_query=r.get("url_query", "")) for r in self.nodes["runs"]]
            for (q, n, c), rs in sorted(group(nruns, "url_query", "nodes", "clients").items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1])):
                self.w(f"| nodes req/s | onejob, {n} API node{'s' if n > 1 else ''}, {self.url_label(q)} | {c} | {spread([r['rps'] for r in rs])} | "
                       f"{spread([r['loadavg'][0] for r in rs], 2)} |")
        if self.citus:
            order = lambda kv: (kv[0][0] != "intake", kv[0][2] or 0, self.citus_order(kv[0][1]))  # noqa: E731
            for (t, cont, c), rs in sorted(group(self.citus["runs"], "test", "contender", "clients").items(), key=order):
                if t == "intake":
                    self.w(f"| citus intake new | {cont} | {c} | {spread([r['intake']['rps'] for r in rs])} | "
                           f"{spread([r['loadavg'][0] for r in rs], 2)} |")
                    self.w(f"| citus intake replay | {cont} | {c} | {spread([r['replay']['rps'] for r in rs])} | |")
                else:
                    self.w(f"| citus worked jobs/s | {cont} | {rs[0]['jobs']:,} jobs | {spread([r['jobs_per_s'] for r in rs])} | "
                           f"{spread([r['loadavg'][0] for r in rs], 2)} |")
        if self.growth:
            for (s,), rs in sorted(group(self.growth["runs"], "existing_jobs").items()):
                self.w(f"| growth | onejob-postgres | {s:,} | {spread([r['intake']['rps'] for r in rs])} | {spread([r['loadavg'][0] for r in rs], 2)} |")
        if self.steady:
            for (s,), rs in sorted(group(self.steady["runs"], "existing_jobs").items()):
                self.w(f"| steady | onejob-postgres | {s:,} | {spread([r['intake']['rps'] for r in rs])} | {spread([r['loadavg'][0] for r in rs], 2)} |")
        self.w()

    def commands_section(self):
        self.w("## Exact commands")
        self.w()
        self.w("As run by bench/harness.py (`$KEY` is a fresh key from `onejob keys create --database URL --tenant bench "
               "--user bench`, made after `onejob migrate --database URL` on a fresh database; `$ONEJOB_PID` the "
               "server's pid; the onejob config of each run is written next to its log in /var/cache/onejob/bench-run/; "
               "its template is `CONFIG` in bench/harness.py). Loopback TCP everywhere.")
        self.w()
        for part in (self.ceiling, self.intake, self.dispatch, self.e2e, self.peers, self.growth, self.steady, self.rss,
                     self.worked, self.nodes, self.footprint, self.citus):
            if not part or not part.get("commands"):
                continue
            self.w(f"**{part['part']}**")
            self.w()
            self.w("```sh")
            for label, cmd in part["commands"].items():
                self.w(f"# {label}")
                self.w(cmd)
            self.w("```")
            self.w()
            configs = part.get("configs", {})
            if configs:
                backend, text = next(iter(configs.items()))
                others = [f"`{b}`: `{next((l for l in t.splitlines() if l.startswith('database')), '')}`"
                          for b, t in configs.items() if b != backend]
                self.w(f"The `--config` file ({backend}" + (f"; the other backends differ only in "
                                                            f"{', '.join(others)}" if others else "") + "):")
                self.w()
                self.w("```toml")
                self.w(text.rstrip())
                self.w("```")
                self.w()

    def retention_section(self):
        """bench/retention.sh's run: how fast retention deletes while intake runs."""
        path = RESULTS / "retention.json"
        if not path.exists():
            return
        r = json.loads(path.read_text())
        self.w("## Retention")
        self.w()
        self.w(f"`bench/retention.sh` (its own run, not part of `bench/run.sh`): PostgreSQL, {r['old_jobs']:,} finished "
               f"jobs older than `finished_after` (with {r['old_events']:,} events), `[retention] every = \"1s\"`, "
               f"`batch = 500`, while 8 clients submit new jobs that one `onejob serve` (API and worker) runs on the "
               f"fake provider. Phase A: intake with retention off; phase B: the same with retention on, until "
               f"every expired job is gone. The intake rates are this run's own: submissions per second (8 clients) "
               f"while the worker runs the jobs in the same process, a setup of its own, not section 2's or 3's.")
        self.w()
        self.w("| expired jobs | gone in | jobs deleted/s | rows deleted/s | intake without / with retention (submissions/s) | intake p99 without / with (ms) | expired jobs left when intake ended |")
        self.w("|---|---|---|---|---|---|---|")
        p99 = r["intake_p99_ms"]
        self.w(f"| {r['old_jobs']:,} | {r['drain_s']:.1f} s | {fmt(r['jobs_deleted_per_s'])} | {fmt(r['rows_deleted_per_s'])} | "
               f"{fmt(r['intake_without_retention_per_s'])} / {fmt(r['intake_with_retention_per_s'])} "
               f"({ratio(r['intake_with_retention_per_s'], r['intake_without_retention_per_s'])}) | "
               f"{fmt(p99['without'])} / {fmt(p99['with'])} | {fmt(r['old_left_when_intake_ended'])} |")
        self.w()

    def gateway_section(self):
        if not self.gateway:
            return
        s = self.gateway["runs"][0]
        self.w("## 3b. The OpenAI-compatible gateway")
        self.w()
        self.w(f"`onejob serve` with its worker; the load generator serves the same instant OpenAI-compatible sink as "
               f"in section 3, as the only provider of a gateway kind (`openai_models = [\"bench\"]`). Closed loop, each "
               f"client one keep-alive connection, {s['calls']:,} measured calls per phase after {self.gateway['settings']['warmup']} "
               f"unmeasured: *direct* sends the chat completion straight to the sink; *new* sends it to onejob's "
               f"`POST /v1/chat/completions` under a new `Idempotency-Key` (a job, run by the worker against the sink, "
               f"answered when it won); *replay* sends the same keys again (finished calls, answered from the stored "
               f"completion). *Added* is new minus direct, per percentile, in the same run.")
        self.w()
        self.w("| backend | clients | direct p50 / p99 ms | new p50 / p99 ms | added p50 / p99 ms | new calls/s | replays/s | replay / new | upstream calls (expected) |")
        self.w("|---|---|---|---|---|---|---|---|---|")
        for (backend, clients), rs in sorted(group(self.gateway["runs"], "backend", "clients").items()):
            g = lambda phase, k: med([r[phase][k] for r in rs])  # noqa: E731
            self.w(f"| {backend} | {clients} | {fmt(g('direct', 'p50_ms'), 2)} / {fmt(g('direct', 'p99_ms'), 2)} | "
                   f"{fmt(g('gateway', 'p50_ms'), 2)} / {fmt(g('gateway', 'p99_ms'), 2)} | "
                   f"{fmt(med([r['added_p50_ms'] for r in rs]), 2)} / {fmt(med([r['added_p99_ms'] for r in rs]), 2)} | "
                   f"{fmt(g('gateway', 'rps'))} | {fmt(g('replay', 'rps'))} | "
                   f"{fmt(med([r['replay_over_new'] for r in rs]), 2)} | "
                   f"{sum(r['upstream_calls'] for r in rs)} ({sum(r['expected_upstream_calls'] for r in rs)}) |")
        self.w()
        self.gateway_cpu()
        trips = self.gateway.get("round_trips") or {}
        if trips:
            self.w("Database statements per call, counted: one client, calls one after another, onejob-fake as the "
                   "upstream, from onejob's own log of its statements (`RUST_LOG=sqlx::query=debug`), what the "
                   "process runs in the background over the same time subtracted. On PostgreSQL each statement is "
                   "one round trip to the database, and each transaction has one more, its `BEGIN` (sqlx does not "
                   "log it); on SQLite each is one hand-over to the connection's thread.")
            self.w()
            self.w("| backend | per new call | per replay | the statements of one new call, in order |")
            self.w("|---|---|---|---|")
            for backend, r in sorted(trips.items()):
                listed = "<br>".join(f"{i + 1}. `{q.replace('|', '¦')}`" for i, q in enumerate(r["one_new_call"]))
                self.w(f"| {backend} | {fmt(r['new_per_call'], 1)} | {fmt(r['replay_per_call'], 1)} | {listed} |")
            self.w()
            if self.gateway.get("round_trips_note"):
                self.w(f"(Statements {self.gateway['round_trips_note']})")
                self.w()

    def gateway_cpu(self):
        """Where the cores went per call: each program's CPU time over a phase, per answered call."""
        runs = [r for r in self.gateway["runs"] if r["gateway"].get("cpu_us_per_ok_by_program")]
        if not runs:
            return
        cores = self.gateway.get("machine", {}).get("cores") or os.cpu_count()
        self.w(f"CPU per call, by program: every process's CPU time (user + system, from /proc) over the phase, "
               f"divided by the calls answered; `onejob-loadgen` is the load generator and the sink it serves, "
               f"`other` everything else on the machine. A closed loop of N clients cannot answer faster than the "
               f"{cores} cores do the work of its calls, so its latency is at least N × (all CPU per call) / {cores} "
               f"cores: the *CPU floor* column, for new calls, beside the measured p50.")
        self.w()
        self.w("| backend | clients | direct: all µs | new: onejob µs | new: postgres µs | new: loadgen + sink µs | new: other µs | new: all µs | CPU floor ms (new p50 ms) | new: cores busy / iowait % |")
        self.w("|---|---|---|---|---|---|---|---|---|---|")
        for (backend, clients), rs in sorted(group(runs, "backend", "clients").items()):
            c = lambda phase, prog: med([r[phase]["cpu_us_per_ok_by_program"].get(prog, 0) for r in rs])  # noqa: E731
            floor = clients * c("gateway", "all") / cores / 1000
            self.w(f"| {backend} | {clients} | {fmt(c('direct', 'all'))} | {fmt(c('gateway', 'onejob'))} | "
                   f"{fmt(c('gateway', 'postgres'))} | {fmt(c('gateway', 'onejob-loadgen'))} | "
                   f"{fmt(c('gateway', 'other'))} | {fmt(c('gateway', 'all'))} | "
                   f"{fmt(floor, 2)} ({fmt(med([r['gateway']['p50_ms'] for r in rs]), 2)}) | "
                   f"{fmt(med([r['gateway'].get('machine_busy_pct') for r in rs]))} / "
                   f"{fmt(med([r['gateway'].get('machine_iowait_pct') for r in rs]))} |")
        self.w()
        self.w("How to read it: where the cores are nearly all busy and the p50 is near the floor, the cores bound the "
               "latency, and lowering it means less CPU per call (on PostgreSQL most of it the database's, executing "
               "the call's two statements); the distance above the floor is time the calls wait with cores idle, "
               "for commits (each durable commit waits for its WAL flush; SQLite writes one transaction at a time, "
               "its fsync included, so there the calls also queue for its one writer). With one client nothing "
               "queues, and the added latency is the call's own path.")
        self.w()

    def write(self):
        self.header()
        self.targets()
        self.ceiling_section()
        self.intake_section()
        self.dispatch_section()
        self.gateway_section()
        self.peers_section()
        self.worked_section()
        self.nodes_section()
        self.citus_section()
        self.growth_section()
        self.footprint_section()
        self.retention_section()
        self.errors_section()
        self.plot_section()
        self.machine_section()
        self.how_to_run()
        self.raw_section()
        self.commands_section()
        (ROOT / "BENCHMARKS.md").write_text("\n".join(self.lines).rstrip() + "\n")
        (BENCH / "plot.svg").write_text(self.svg())

    # -- plot ----------------------------------------------------------------------------

    def series(self):
        out = []
        if self.ceiling:
            for cont, label, color, dash in (("pgbench-ceiling", "pgbench ceiling (1 INSERT)", "#000000", ""),
                                             ("pgbench-onejob-sql", "pgbench: onejob's SQL", "#777777", "6,3")):
                pts = [(c, self.ceiling_rps(cont, c)) for c in self.clients(self.ceiling)]
                out.append((label, color, dash, pts))
        if self.intake:
            for backend, color in (("postgres", "#d62728"), ("sqlite", "#ff7f0e")):
                cs = sorted({r["clients"] for r in self.intake["runs"] if r["backend"] == backend})
                if cs:
                    out.append((f"onejob {backend} new", color, "", [(c, self.intake_med(backend, c, "intake")) for c in cs]))
                    out.append((f"onejob {backend} replay", color, "2,3", [(c, self.intake_med(backend, c, "replay")) for c in cs]))
        if self.peers:
            for peer, color in (("pgboss", "#1f77b4"), ("procrastinate", "#2ca02c"), ("graphile", "#9467bd")):
                cs = sorted({r["clients"] for r in self.peers["runs"] if r["contender"] == peer})
                if cs:
                    out.append((f"{PEER_NAMES[peer]} new", color, "", [(c, self.peer_med(peer, c, "intake")) for c in cs]))
        return [(label, color, dash, [(x, y) for x, y in pts if y]) for label, color, dash, pts in out]

    def svg(self):
        series = self.series()
        width, height = 860, 500
        left, right, top, bottom = 70, 250, 40, 60
        pw, ph = width - left - right, height - top - bottom
        xs = sorted({x for _, _, _, pts in series for x, _ in pts} | {8, 128})
        ymax = max([y for _, _, _, pts in series for _, y in pts] or [1])
        step = 10 ** (math.floor(math.log10(ymax)) - 1) if ymax > 0 else 1
        for m in (1, 2, 2.5, 5, 10):
            if ymax / (step * m) <= 8:
                step *= m
                break
        ytop = step * math.ceil(ymax / step)
        lx0, lx1 = math.log(min(xs)), math.log(max(xs))
        lx1 = lx1 if lx1 > lx0 else lx0 + 1

        def px(x):
            return left + (math.log(x) - lx0) / (lx1 - lx0) * pw

        def py(y):
            return top + ph - y / ytop * ph

        o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{left}" y="22" font-size="15" font-weight="bold">Throughput against concurrency '
             f'(requests/s; medians; {self._mode()})</text>']
        y = 0.0
        while y <= ytop + 1e-9:
            o.append(f'<line x1="{left}" y1="{py(y):.1f}" x2="{left + pw}" y2="{py(y):.1f}" stroke="#e5e5e5"/>')
            o.append(f'<text x="{left - 8}" y="{py(y) + 4:.1f}" text-anchor="end">{y:,.0f}</text>')
            y += step
        for x in xs:
            o.append(f'<line x1="{px(x):.1f}" y1="{top}" x2="{px(x):.1f}" y2="{top + ph}" stroke="#e5e5e5"/>')
            o.append(f'<text x="{px(x):.1f}" y="{top + ph + 18}" text-anchor="middle">{x}</text>')
        o.append(f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="black"/>')
        o.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="black"/>')
        o.append(f'<text x="{left + pw / 2}" y="{height - 15}" text-anchor="middle">concurrent clients (log scale)</text>')
        o.append(f'<text x="18" y="{top + ph / 2}" text-anchor="middle" transform="rotate(-90 18 {top + ph / 2})">'
                 'requests or transactions per second</text>')
        for i, (label, color, dash, pts) in enumerate(series):
            if not pts:
                continue
            d = " ".join(f"{'M' if j == 0 else 'L'}{px(x):.1f},{py(y):.1f}" for j, (x, y) in enumerate(pts))
            dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
            o.append(f'<path d="{d}" fill="none" stroke="{color}" stroke-width="2"{dash_attr}/>')
            for x, y in pts:
                o.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{color}"><title>{label}: {y:,.0f}/s at {x}</title></circle>')
            ly = top + 10 + i * 22
            o.append(f'<line x1="{left + pw + 15}" y1="{ly}" x2="{left + pw + 45}" y2="{ly}" stroke="{color}" stroke-width="2"{dash_attr}/>')
            o.append(f'<text x="{left + pw + 52}" y="{ly + 4}">{label}</text>')
        o.append("</svg>")
        return "\n".join(o) + "\n"

    def _mode(self):
        modes = sorted({p.get("mode") for p in (self.ceiling, self.intake, self.peers) if p})
        return "/".join(m for m in modes if m) or "?"


if __name__ == "__main__":
    Report().write()
