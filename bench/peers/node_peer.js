// Enqueue benchmark for the Node.js peers, each with its own dedupe feature:
//   graphile-worker: addJob(task, payload, { jobKey, jobKeyMode: "unsafe_dedupe" })
//   pg-boss:         send(queue, data, { singletonKey }) on a queue with policy "short"
//                    (in pg-boss 10 only "short"/"stately"/"singleton" queues dedupe by
//                    singletonKey alone; "short" = at most one queued job per key)
// Phases: warmup (unmeasured; then ANALYZE), "intake" (new keys), "dup" (the same keys again: must add no
// rows). Closed loop: `clients` async callers share one counter; the pg pool has
// min(clients, --pool-max) connections. Prints one JSON document like onejob-loadgen's.
//
// usage: node node_peer.js graphile|pgboss --db URL --clients N --jobs J --warmup W --prefix P
"use strict";

const { performance } = require("node:perf_hooks");

function args() {
  const a = process.argv.slice(2);
  const out = { peer: a[0], clients: 8, jobs: 1000, warmup: 200, prefix: "r", poolMax: 64 };
  for (let i = 1; i < a.length; i += 2) {
    const k = a[i].replace(/^--/, "").replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    out[k] = ["db", "prefix", "peer"].includes(k) ? a[i + 1] : Number(a[i + 1]);
  }
  return out;
}

function summary(phase, clients, lat, unexpected, elapsedS) {
  lat.sort((x, y) => x - y);
  const at = (q) => (lat.length ? lat[Math.min(lat.length, Math.max(1, Math.ceil(q * lat.length))) - 1] : NaN);
  const mean = lat.length ? lat.reduce((s, v) => s + v, 0) / lat.length : NaN;
  return {
    phase, clients, ok: lat.length, unexpected, elapsed_s: elapsedS,
    rps: lat.length / elapsedS, p50_ms: at(0.5), p90_ms: at(0.9), p99_ms: at(0.99),
    max_ms: lat.length ? lat[lat.length - 1] : NaN, mean_ms: mean,
  };
}

// Runs `total` calls of op(i) with `clients` concurrent callers; op resolves to true when
// the call did what the phase expects.
async function phase(name, clients, total, op) {
  let next = 0;
  const lat = [];
  const unexpected = {};
  const t0 = performance.now();
  async function caller() {
    for (;;) {
      const i = next++;
      if (i >= total) return;
      const s = performance.now();
      try {
        const ok = await op(i);
        if (ok) lat.push(performance.now() - s);
        else unexpected.unexpected = (unexpected.unexpected || 0) + 1;
      } catch (e) {
        unexpected.error = (unexpected.error || 0) + 1;
        if (unexpected.error <= 3) console.error(`${name}: ${e.message}`);
      }
    }
  }
  await Promise.all(Array.from({ length: clients }, caller));
  const elapsed = (performance.now() - t0) / 1000;
  console.error(`phase ${name} done in ${elapsed.toFixed(2)} s`);
  return summary(name, clients, lat, unexpected, elapsed);
}

async function graphile(o, pool) {
  const { makeWorkerUtils } = require("graphile-worker");
  const utils = await makeWorkerUtils({ pgPool: pool });
  await utils.migrate();
  const add = (key, i) =>
    utils.addJob("bench", { prompt: `bench ${key}`, i }, { jobKey: key, jobKeyMode: "unsafe_dedupe" });
  const count = async () =>
    Number((await pool.query(
      "SELECT count(*) FROM graphile_worker._private_jobs WHERE key LIKE $1", [`${o.prefix}-%`])).rows[0].count);
  return {
    version: require("graphile-worker/package.json").version,
    newJob: async (key, i) => { const j = await add(key, i); return j && j.key === key; },
    dupJob: async (key, i) => { const j = await add(key, i); return j && j.key === key; },
    count, close: () => utils.release(),
  };
}

async function pgboss(o, pool) {
  const PgBoss = require("pg-boss");
  const boss = new PgBoss({
    connectionString: o.db, max: Math.min(o.clients, o.poolMax),
    supervise: false, schedule: false, migrate: true,
  });
  boss.on("error", (e) => console.error(`pg-boss: ${e.message}`));
  await boss.start();
  await boss.createQueue("bench", { policy: "short" });
  const count = async () =>
    Number((await pool.query(
      "SELECT count(*) FROM pgboss.job WHERE name = 'bench' AND singleton_key LIKE $1", [`${o.prefix}-%`])).rows[0].count);
  return {
    version: require("pg-boss/package.json").version,
    // send answers the new job's id, or null when the singletonKey is already queued.
    newJob: async (key, i) => (await boss.send("bench", { prompt: `bench ${key}`, i }, { singletonKey: key })) !== null,
    dupJob: async (key, i) => (await boss.send("bench", { prompt: `bench ${key}`, i }, { singletonKey: key })) === null,
    count, close: () => boss.stop({ graceful: false, wait: true }),
  };
}

async function main() {
  const o = args();
  const { Pool } = require("pg");
  const pool = new Pool({ connectionString: o.db, max: Math.min(o.clients, o.poolMax) });
  pool.on("error", (e) => console.error(`pg pool: ${e.message}`));
  const peer = o.peer === "graphile" ? await graphile(o, pool) : await pgboss(o, pool);
  await phase("warmup", o.clients, o.warmup, (i) => peer.newJob(`${o.prefix}w-${i}`, i));
  // What autovacuum would have done by now (this server runs with autovacuum = off); the
  // harness does the same for every contender after its warm-up.
  await pool.query("ANALYZE");
  const intake = await phase("intake", o.clients, o.jobs, (i) => peer.newJob(`${o.prefix}-${i}`, i));
  const dup = await phase("dup", o.clients, o.jobs, (i) => peer.dupJob(`${o.prefix}-${i}`, i));
  const rows = await peer.count();
  console.log(JSON.stringify({
    peer: o.peer, version: peer.version, clients: o.clients, db_pool: Math.min(o.clients, o.poolMax),
    jobs: o.jobs, intake, dup, rows_after: rows, dedupes: rows === o.jobs,
  }, null, 2));
  await peer.close();
  await pool.end();
}

main().catch((e) => { console.error(e); process.exit(1); });
