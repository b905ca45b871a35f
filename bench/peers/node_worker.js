// Jobs worked per second for the Node.js peers, with their OWN workers and a no-op handler,
// or with --provider URL a handler that makes the call onejob's worker makes for each job
// (an OpenAI-compatible chat completion to the same fake provider, answer read)
// (bench/harness.py, part `worked`). The harness, not this script, decides when the work is
// done: it polls the peer's tables for finished jobs and times the phase itself.
//
//   pg-boss:         boss.work("bench", { batchSize, pollingIntervalSeconds }, async () => {})
//                    called `workers` times on one PgBoss instance (pool of `poolMax`)
//   graphile-worker: run({ concurrency, pollInterval, maxPoolSize, taskList,
//                    preset: { worker: { localQueue: { size }, completeJobBatchDelay } } })
//
// Protocol (one line each on stdout, the harness answers on stdin):
//   --mode queued:     enqueue --jobs jobs in bulk, ANALYZE, print "queued"; on "go" start
//                      the workers and print "working"; on "stop" stop and print the JSON.
//   --mode concurrent: start the workers (no ANALYZE), print "ready"; on "go" enqueue --jobs jobs one call
//                      each from --clients concurrent callers, print "queued"; on "stop" as above.
//
// usage: node node_worker.js graphile|pgboss --db URL --jobs N --mode queued|concurrent
//          [--clients C] [--pool-max P] [--batch-size B --workers W --polling-s S]
//          [--concurrency C --poll-ms M --local-queue L --complete-batch-delay D]
//          [--provider http://127.0.0.1:PORT/v1/chat/completions]
"use strict";

const readline = require("node:readline");

function args() {
  const a = process.argv.slice(2);
  const out = {
    peer: a[0], jobs: 1000, mode: "queued", clients: 32, poolMax: 20,
    batchSize: 100, workers: 2, pollingS: 0.5,
    concurrency: 16, pollMs: 2000, localQueue: 0, completeBatchDelay: -1,
  };
  for (let i = 1; i < a.length; i += 2) {
    const k = a[i].replace(/^--/, "").replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    out[k] = ["db", "mode", "peer", "provider"].includes(k) ? a[i + 1] : Number(a[i + 1]);
  }
  return out;
}

const lines = readline.createInterface({ input: process.stdin });
const waiters = [];
lines.on("line", (line) => { const w = waiters.shift(); if (w) w(line.trim()); });
const next = () => new Promise((resolve) => waiters.push(resolve));
const say = (word) => process.stdout.write(`${word}\n`);

let calls = 0;
let providerErrors = 0;

// The job's work: none, or (--provider) one chat completion, its answer read.
async function work(o, data) {
  calls += 1;
  if (!o.provider) return;
  const r = await fetch(o.provider, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "bench", messages: [{ role: "user", content: `job ${JSON.stringify(data)}` }] }),
  });
  const answer = await r.json();
  if (!r.ok || !answer.choices) {
    if (++providerErrors <= 3) console.error(`provider: ${r.status}`);
    throw new Error(`provider answered ${r.status}`);
  }
}

async function pgboss(o) {
  const PgBoss = require("pg-boss");
  const boss = new PgBoss({ connectionString: o.db, max: o.poolMax, supervise: false, schedule: false, migrate: true });
  boss.on("error", (e) => console.error(`pg-boss: ${e.message}`));
  await boss.start();
  await boss.createQueue("bench");
  return {
    version: require("pg-boss/package.json").version,
    settings: { batchSize: o.batchSize, workers: o.workers, pollingIntervalSeconds: o.pollingS, poolMax: o.poolMax },
    bulk: async (from, n) => boss.insert(Array.from({ length: n }, (_, i) => ({ name: "bench", data: { i: from + i } }))),
    one: async (i) => boss.send("bench", { i }),
    start: async () => {
      for (let w = 0; w < o.workers; w++) {
        await boss.work("bench", { batchSize: o.batchSize, pollingIntervalSeconds: o.pollingS },
          async (jobs) => { await Promise.all(jobs.map((job) => work(o, job.data))); });
      }
    },
    stop: () => boss.stop({ graceful: false, wait: true }),
  };
}

async function graphile(o) {
  const { run, makeWorkerUtils, Logger } = require("graphile-worker");
  // Its default logger writes to stdout, which carries this script's protocol.
  const logger = new Logger(() => (level, message) => { if (level !== "debug") console.error(`graphile: ${message}`); });
  const utils = await makeWorkerUtils({ connectionString: o.db, logger });
  await utils.migrate();
  let runner = null;
  const worker = {};
  if (o.localQueue > 1) worker.localQueue = { size: o.localQueue };
  if (o.completeBatchDelay >= 0) worker.completeJobBatchDelay = o.completeBatchDelay;
  return {
    version: require("graphile-worker/package.json").version,
    settings: { concurrency: o.concurrency, pollInterval: o.pollMs, maxPoolSize: o.poolMax, ...worker },
    bulk: async (from, n) => utils.addJobs(Array.from({ length: n }, (_, i) => ({ identifier: "bench", payload: { i: from + i } }))),
    one: async (i) => utils.addJob("bench", { i }),
    start: async () => {
      runner = await run({
        connectionString: o.db, concurrency: o.concurrency, pollInterval: o.pollMs, maxPoolSize: o.poolMax,
        noHandleSignals: true, taskList: { bench: async (payload) => { await work(o, payload); } },
        crontab: "", logger, preset: { worker },
      });
    },
    stop: async () => { if (runner) await runner.stop(); await utils.release(); },
  };
}

async function enqueueConcurrently(peer, o) {
  let nextJob = 0;
  let errors = 0;
  const t0 = Date.now();
  async function caller() {
    for (;;) {
      const i = nextJob++;
      if (i >= o.jobs) return;
      try { await peer.one(i); } catch (e) { if (++errors <= 3) console.error(`enqueue: ${e.message}`); }
    }
  }
  await Promise.all(Array.from({ length: o.clients }, caller));
  return { enqueue_s: (Date.now() - t0) / 1000, enqueue_errors: errors };
}

async function main() {
  const o = args();
  const peer = o.peer === "graphile" ? await graphile(o) : await pgboss(o);
  const { Client } = require("pg");
  const admin = new Client({ connectionString: o.db });
  await admin.connect();
  let enqueue = {};
  if (o.mode === "queued") {
    const t0 = Date.now();
    for (let from = 0; from < o.jobs; from += 1000) await peer.bulk(from, Math.min(1000, o.jobs - from));
    enqueue = { enqueue_s: (Date.now() - t0) / 1000, enqueue: "bulk, 1000 per call" };
    // What autovacuum would have done by now (this server runs with autovacuum = off); the
    // harness does the same for onejob.
    await admin.query("ANALYZE");
    say("queued");
    if ((await next()) !== "go") process.exit(2);
    await peer.start();
    say("working");
  } else {
    // No ANALYZE of the empty tables: see bench/harness.py, worked_onejob.
    await peer.start();
    say("ready");
    if ((await next()) !== "go") process.exit(2);
    enqueue = { ...(await enqueueConcurrently(peer, o)), enqueue: `one call per job, ${o.clients} callers` };
    say("queued");
  }
  await next(); // "stop"
  await peer.stop();
  await admin.end();
  console.log(JSON.stringify({ peer: o.peer, version: peer.version, mode: o.mode, jobs: o.jobs,
    settings: peer.settings, handler_calls: calls, provider: o.provider || null,
    provider_errors: providerErrors, ...enqueue }));
  process.exit(0);
}

main().catch((e) => { console.error(e); process.exit(1); });
