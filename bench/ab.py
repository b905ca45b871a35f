#!/usr/bin/env python3
"""A/B of two onejob binaries on this machine (run it through bench/ab.sh).

Runs bench/harness.py once per (round, side), which binary goes first in ABBA order
(before/after, after/before, after/before, before/after, ...), each time with the same parts:
intake (new keys and replays, PostgreSQL, 8 and 32 clients), dispatch p50, e2e jobs/s and the
worked part (onejob only, one worker process, queued then worked, a fixed concurrency, no
sweep), with counts cut to keep a round near two minutes per binary (--worked-jobs 5,000,
--e2e-jobs 2,000, --dispatch-jobs 500; intake 5,000 per phase). Each
harness run writes into its own results directory under --out; then prints, per metric, the
median of each side, after/before as a ratio of medians, and the spread as the lowest and
highest after/before ratio of the rounds (each round's pair was measured minutes apart).

    bench/ab.py BEFORE AFTER [--rounds 3] [--out DIR] [--fake BINARY] [--worked-concurrency 64]
    bench/ab.py BEFORE AFTER --worked-defaults [--rounds 4] [--worked-jobs 20000]
    bench/ab.py --summarize DIR

--worked-defaults measures only the worked part, as bench/run.sh's defaults rows do: onejob
at its defaults (nothing set) with 1 and 2 worker processes, queued, --worked-jobs each
(default 20,000 there), rounds in ABBA order.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

BENCH = pathlib.Path(__file__).resolve().parent

# metric -> (part, how to read it from one run record, higher is better)
METRICS = {
    "intake new 8 clients (req/s)": ("intake", lambda r: r["intake"]["rps"] if r["clients"] == 8 else None, True),
    "intake replay 8 clients (req/s)": ("intake", lambda r: r["replay"]["rps"] if r["clients"] == 8 else None, True),
    "intake new 32 clients (req/s)": ("intake", lambda r: r["intake"]["rps"] if r["clients"] == 32 else None, True),
    "intake replay 32 clients (req/s)": ("intake", lambda r: r["replay"]["rps"] if r["clients"] == 32 else None, True),
    "e2e (jobs/s)": ("e2e", lambda r: r["jobs_per_s"], True),
    "dispatch p50 (ms)": ("dispatch", lambda r: r["from_201_ms"]["p50"], False),
    "worked, queued (jobs/s)": ("worked", lambda r: r["jobs_per_s"] if r.get("stage") == "measured"
                                and not r.get("contender", "").endswith("-default") else None, True),
    "worked at the defaults, 1 process (jobs/s)": (
        "worked", lambda r: r["jobs_per_s"] if r.get("contender") == "onejob-1w-default" else None, True),
    "worked at the defaults, 2 processes (jobs/s)": (
        "worked", lambda r: r["jobs_per_s"] if r.get("contender") == "onejob-2w-default" else None, True),
}


def values(directory: pathlib.Path, part: str, read) -> list[float]:
    path = directory / f"{part}.json"
    if not path.exists():
        return []
    runs = json.loads(path.read_text())["runs"]
    out = []
    for r in runs:
        if r.get("backend", "postgres") != "postgres":
            continue
        v = read(r)
        if v is not None:
            out.append(v)
    return out


def summarize(out: pathlib.Path) -> dict:
    rounds = sorted({p.name.split("-", 1)[1] for p in out.iterdir() if p.is_dir() and "-" in p.name},
                    key=lambda x: int(x))
    meta = json.loads((out / "ab.json").read_text()) if (out / "ab.json").exists() else {}
    table = {}
    for metric, (part, read, higher) in METRICS.items():
        before = [values(out / f"before-{i}", part, read) for i in rounds]
        after = [values(out / f"after-{i}", part, read) for i in rounds]
        pairs = [(statistics.median(b), statistics.median(a)) for b, a in zip(before, after) if a and b]
        if not pairs:
            continue
        mb = statistics.median([b for b, _ in pairs])
        ma = statistics.median([a for _, a in pairs])
        per_round = [a / b for b, a in pairs if b]
        table[metric] = {"before": mb, "after": ma, "after_over_before": ma / mb if mb else None,
                         "per_round_ratios": per_round, "higher_is_better": higher,
                         "before_runs": [b for b, _ in pairs], "after_runs": [a for _, a in pairs]}
    print(f"A/B {meta.get('before')} -> {meta.get('after')}: {len(rounds)} rounds, ABBA order; "
          f"load average per run in {out}/*/")
    print(f"{'metric':36} {'before':>10} {'after':>10} {'after/before':>13}  spread (per round)")
    for metric, t in table.items():
        spread = " ".join(f"{x:.3f}" for x in t["per_round_ratios"])
        lo, hi = min(t["per_round_ratios"]), max(t["per_round_ratios"])
        print(f"{metric:36} {t['before']:10.2f} {t['after']:10.2f} {t['after_over_before']:13.3f}  "
              f"{lo:.3f}..{hi:.3f} ({spread})")
    summary = {**meta, "rounds": len(rounds), "metrics": table}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("before", nargs="?")
    p.add_argument("after", nargs="?")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=os.environ.get("BENCH_AB_OUT", "/var/cache/onejob/ab/results"))
    p.add_argument("--fake", help="onejob-fake binary (default: the one next to BEFORE, else run.sh's build)")
    p.add_argument("--worked-concurrency", type=int, default=64, help="[worker] concurrency of the worked part")
    p.add_argument("--worked-jobs", type=int, help="jobs per worked run (default 5,000; with --worked-defaults 20,000, "
                   "the worked part's own default)")
    p.add_argument("--worked-defaults", action="store_true",
                   help="only the worked part, onejob at its defaults with 1 and 2 worker processes")
    p.add_argument("--e2e-jobs", type=int, default=2000)
    p.add_argument("--dispatch-jobs", type=int, default=500)
    p.add_argument("--summarize", metavar="DIR", help="only print the summary of an earlier A/B in DIR")
    opts = p.parse_args()
    if opts.summarize:
        summarize(pathlib.Path(opts.summarize))
        return
    if not opts.before or not opts.after:
        p.error("BEFORE and AFTER binaries are required")
    before, after = (pathlib.Path(x).resolve() for x in (opts.before, opts.after))
    fake = opts.fake or next((str(c) for c in (before.parent / "onejob-fake", before.parent / "onejob-fake-before")
                              if c.exists()), None)
    out = pathlib.Path(opts.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / "ab.json").write_text(json.dumps({"before": str(before), "after": str(after), "fake": fake,
                                             "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")
    machine = BENCH / "results" / "machine.json"
    if opts.worked_defaults:
        harness = [sys.executable, str(BENCH / "harness.py"), "--parts", "worked", "--runs", "1", "--no-report",
                   "--worked-contenders", "onejob-1w-default,onejob-2w-default", "--worked-modes", "queued",
                   "--worked-jobs", str(opts.worked_jobs or 20000)]
    else:
        harness = [sys.executable, str(BENCH / "harness.py"), "--parts", "intake,dispatch,e2e,worked", "--runs", "1",
                   "--clients", "8,32", "--backends", "postgres", "--no-report",
                   "--worked-contenders", "onejob-1w", "--worked-modes", "queued",
                   "--worked-jobs", str(opts.worked_jobs or 5000),
                   "--e2e-jobs", str(opts.e2e_jobs), "--dispatch-jobs", str(opts.dispatch_jobs),
                   "--worked-best", json.dumps({"onejob-1w": {"concurrency": opts.worked_concurrency}})]
    for i in range(opts.rounds):
        # ABBA: before first in rounds 0 and 3, after first in rounds 1 and 2, and so on.
        order = [("before", before), ("after", after)] if i % 4 in (0, 3) else [("after", after), ("before", before)]
        for side, binary in order:
            results = out / f"{side}-{i}"
            results.mkdir()
            if machine.exists():  # the harness would otherwise measure the machine (pg_test_fsync) every time
                shutil.copy(machine, results / "machine.json")
            env = dict(os.environ, BENCH_RESULTS=str(results), BENCH_ONEJOB=str(binary))
            if fake:
                env["BENCH_FAKE"] = fake
            print(f"[ab] round {i + 1} of {opts.rounds}: {side} ({binary}), load {os.getloadavg()[0]:.2f}",
                  file=sys.stderr, flush=True)
            with open(results / "harness.log", "w") as log:
                subprocess.run(harness, env=env, stderr=log, stdout=log, check=True)
    summarize(out)


if __name__ == "__main__":
    main()
