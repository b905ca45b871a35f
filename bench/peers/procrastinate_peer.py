"""Enqueue benchmark for Procrastinate, deduplicating with `queueing_lock`.

`task.configure(queueing_lock=key).defer_async()` inserts the job; a second defer with the
same lock while the first is still queued raises `AlreadyEnqueued` (a unique partial index
on `procrastinate_jobs (queueing_lock) WHERE status = 'todo'`), which the "dup" phase
expects. Phases and output as in node_peer.js.

usage: python procrastinate_peer.py --db URL --clients N --jobs J --warmup W --prefix P
"""

import argparse
import importlib.metadata
import asyncio
import json
import math
import sys
import time

import procrastinate
from procrastinate import exceptions


def summary(phase, clients, lat, unexpected, elapsed):
    lat.sort()
    n = len(lat)

    def at(q):
        return lat[min(n, max(1, math.ceil(q * n))) - 1] if n else float("nan")

    return {
        "phase": phase, "clients": clients, "ok": n, "unexpected": unexpected,
        "elapsed_s": elapsed, "rps": n / elapsed, "p50_ms": at(0.5), "p90_ms": at(0.9),
        "p99_ms": at(0.99), "max_ms": lat[-1] if n else float("nan"),
        "mean_ms": sum(lat) / n if n else float("nan"),
    }


async def phase(name, clients, total, op):
    counter = iter(range(total))
    lat, unexpected = [], {}
    t0 = time.perf_counter()

    async def caller():
        for i in counter:
            s = time.perf_counter()
            try:
                ok = await op(i)
            except Exception as e:  # noqa: BLE001 - counted and shown
                unexpected["error"] = unexpected.get("error", 0) + 1
                if unexpected["error"] <= 3:
                    print(f"{name}: {e!r}", file=sys.stderr)
                continue
            if ok:
                lat.append((time.perf_counter() - s) * 1000)
            else:
                unexpected["unexpected"] = unexpected.get("unexpected", 0) + 1

    await asyncio.gather(*(caller() for _ in range(clients)))
    elapsed = time.perf_counter() - t0
    print(f"phase {name} done in {elapsed:.2f} s", file=sys.stderr)
    return summary(name, clients, lat, unexpected, elapsed)


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--prefix", default="r")
    p.add_argument("--pool-max", type=int, default=64)
    o = p.parse_args()
    pool = min(o.clients, o.pool_max)
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=o.db, min_size=pool, max_size=pool)
    )

    @app.task(name="bench")
    def bench(prompt, i):  # never run: only enqueued
        return None

    async with app.open_async():
        await app.schema_manager.apply_schema_async()

        async def new_job(key, i):
            await bench.configure(queueing_lock=key).defer_async(prompt=f"bench {key}", i=i)
            return True

        async def dup_job(key, i):
            try:
                await bench.configure(queueing_lock=key).defer_async(prompt=f"bench {key}", i=i)
            except exceptions.AlreadyEnqueued:
                return True
            return False

        await phase("warmup", o.clients, o.warmup, lambda i: new_job(f"{o.prefix}w-{i}", i))
        # What autovacuum would have done by now (this server runs with autovacuum = off); the
        # harness does the same for every contender after its warm-up.
        async with app.connector.pool.connection() as conn:
            await conn.execute("ANALYZE")
        intake = await phase("intake", o.clients, o.jobs, lambda i: new_job(f"{o.prefix}-{i}", i))
        dup = await phase("dup", o.clients, o.jobs, lambda i: dup_job(f"{o.prefix}-{i}", i))
        async with app.connector.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM procrastinate_jobs WHERE queueing_lock LIKE %s",
                (f"{o.prefix}-%",),
            )
            rows = (await cur.fetchone())[0]
    print(json.dumps({
        "peer": "procrastinate", "version": importlib.metadata.version("procrastinate"),
        "clients": o.clients, "db_pool": pool, "jobs": o.jobs, "intake": intake, "dup": dup,
        "rows_after": rows, "dedupes": rows == o.jobs,
    }, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
