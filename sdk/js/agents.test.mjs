// One Idempotency-Key for a whole agent run (DESIGN §9 "Agent runs", issue 45), driven by
// the Vercel AI SDK (`ai`, `@ai-sdk/openai`, `@ai-sdk/anthropic`): `generateText` with one
// tool and `stopWhen: stepCountIs(…)`, its provider sending the same `Idempotency-Key` on
// every model call of the run (`createOpenAI({ headers: { "Idempotency-Key": runKey } })`).
//
// Run by `cargo test` (crates/onejob/tests/api/sdk.rs), which starts onejob serving the
// demo's models on a fake provider (`respond` at /v1/responses, `fast` at
// /v1/chat/completions, `converse` at Anthropic's /v1/messages), and passes:
//   ONEJOB_URL       the server, http://127.0.0.1:PORT (the providers' baseURL is ONEJOB_URL/v1)
//   ONEJOB_API_KEY   a onejob API key (the providers' apiKey)
//   ONEJOB_FAKE_URL  the fake provider's root, for its /_fake control endpoints
//                    (GET /_fake/submissions: the upstream calls counted below)
//
// The fake answers like a model in a tool loop: the prompt says `call weigh_fox`, so the
// first model call asks for the tool; the conversation then ends with the tool's result,
// and the second answers text naming it. Each model, `openai.responses(…)` (with
// `providerOptions.openai.store = false`: onejob is stateless and refuses the
// `item_reference` items the SDK sends otherwise), `openai.chat(…)` and `anthropic(…)`, has
// three cases:
//   * a run succeeds under one key, with two model calls (two upstream calls) and the tool
//     really run in between;
//   * the same run again under the same key makes no upstream call and ends with the same
//     text, every step's response replayed;
//   * a run whose process dies in the tool, after the first model call (a child `node`
//     whose tool calls process.exit), run again here under its key: only the remaining
//     model call goes upstream, and the text is an uninterrupted run's.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { fileURLToPath } from "node:url";
import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, stepCountIs, tool } from "ai";
import { z } from "zod";

function required(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set; this test is run by cargo test (tests/api/sdk.rs)`);
  return value.replace(/\/$/, "");
}

const baseURL = `${required("ONEJOB_URL")}/v1`;
const apiKey = required("ONEJOB_API_KEY");
const fakeURL = required("ONEJOB_FAKE_URL");
const run = randomUUID().slice(0, 8);

const TOOL = "weigh_fox";
const WEIGHT = "the fox weighs 7 kg";
/** What the child process exits with, in its tool, once the first model call asked for it. */
const DIED = 17;
/** The environment variable that makes this file the child process of the third case. */
const DIE_IN_THE_TOOL = "ONEJOB_AGENT_DIE_IN_THE_TOOL";

/** Each model: the fake's endpoint it reaches, and its model for a run's headers. */
const models = {
  "openai.responses": {
    endpoint: "responses",
    model: (headers) => createOpenAI({ baseURL, apiKey, headers }).responses("respond"),
    providerOptions: { openai: { store: false } },
  },
  "openai.chat": {
    endpoint: "chat",
    model: (headers) => createOpenAI({ baseURL, apiKey, headers }).chat("fast"),
  },
  anthropic: {
    endpoint: "messages",
    model: (headers) => createAnthropic({ baseURL, apiKey, headers })("converse"),
  },
};

/** A run of the agent on `name`'s model under `runKey`, its tool doing `execute`. */
function agentRun(name, runKey, prompt, execute) {
  const { model, providerOptions } = models[name];
  return generateText({
    model: model({ "Idempotency-Key": runKey }),
    system: "You keep foxes. Use your tools when asked to.",
    prompt,
    tools: {
      [TOOL]: tool({ description: "Weighs the fox.", inputSchema: z.object({}), execute }),
    },
    stopWhen: stepCountIs(5),
    // Said, so that the Anthropic provider does not warn that it guessed a limit for a
    // model name it does not know.
    maxOutputTokens: 1024,
    providerOptions,
  });
}

/** A tool that counts its calls in `calls`. */
const weighing = (calls) => async () => {
  calls.push(TOOL);
  return WEIGHT;
};

async function fake(path) {
  const response = await fetch(fakeURL + path);
  assert.ok(response.ok, `${path}: ${response.status}`);
  return response.json();
}

/** The requests the upstream received at `name`'s endpoint whose input holds `text`. */
async function upstreamCalls(name, text) {
  const seen = await fake("/_fake/submissions");
  return seen.requests.filter((r) => r.endpoint === models[name].endpoint && JSON.stringify(r.input).includes(text));
}

/** A prompt naming the tool that no other case (or earlier run) sends. */
const unique = (what, name) => `Please call ${TOOL} for ${what} on ${name} [${run}]`;
const runKey = (what, name) => `js-agents:${what}:${name}:${run}`;

if (process.env[DIE_IN_THE_TOOL]) {
  // The child process of the third case: runs the agent until its tool ends the process.
  const [name, key, prompt] = JSON.parse(process.env[DIE_IN_THE_TOOL]);
  await agentRun(name, key, prompt, () => process.exit(DIED));
  console.error("the run ended without calling its tool");
  process.exit(1);
}

for (const name of Object.keys(models)) {
  describe(`an agent run through the AI SDK's ${name}`, () => {
    it("is two model calls around the tool under one key", async () => {
      const prompt = unique("one run", name);
      const calls = [];
      const result = await agentRun(name, runKey("one", name), prompt, weighing(calls));
      assert.deepEqual(calls, [TOOL], "the tool ran once");
      assert.equal(result.steps.length, 2, "two model calls");
      assert.ok(result.text.includes(WEIGHT), result.text);
      assert.ok(result.text.includes(prompt), result.text);
      const sent = await upstreamCalls(name, prompt);
      assert.equal(sent.length, 2, "each model call went upstream once");
      assert.ok(JSON.stringify(sent[1].input).includes(WEIGHT), "the second one has the result");
    });

    it("replays every step when run again under its key", async () => {
      const prompt = unique("run twice", name);
      const key = runKey("twice", name);
      const [firstCalls, againCalls] = [[], []];
      const first = await agentRun(name, key, prompt, weighing(firstCalls));
      assert.equal((await upstreamCalls(name, prompt)).length, 2);
      const again = await agentRun(name, key, prompt, weighing(againCalls));
      assert.equal((await upstreamCalls(name, prompt)).length, 2, "no upstream call again");
      assert.equal(again.text, first.text);
      assert.deepEqual(
        again.steps.map((s) => s.response.id),
        first.steps.map((s) => s.response.id),
        "every step's response replayed",
      );
      // The tool is the agent's own code: a re-run runs it again (make it idempotent).
      assert.deepEqual([firstCalls, againCalls], [[TOOL], [TOOL]]);
    });

    it("goes on from the unanswered step after its process died in the tool", async () => {
      const prompt = unique("died", name);
      const key = runKey("died", name);
      const env = { ...process.env, [DIE_IN_THE_TOOL]: JSON.stringify([name, key, prompt]) };
      delete env.NODE_TEST_CONTEXT;
      const child = spawnSync(process.execPath, [fileURLToPath(import.meta.url)], {
        env,
        encoding: "utf8",
        timeout: 120_000,
      });
      assert.equal(child.status, DIED, `${child.stdout}\n${child.stderr}`);
      assert.equal((await upstreamCalls(name, prompt)).length, 1, "it died after step 1");
      const calls = [];
      const resumed = await agentRun(name, key, prompt, weighing(calls));
      assert.equal((await upstreamCalls(name, prompt)).length, 2, "only the remaining step went upstream");
      assert.deepEqual(calls, [TOOL]);
      assert.equal(resumed.steps.length, 2);
      const uninterrupted = await agentRun(name, runKey("died-baseline", name), prompt, weighing([]));
      assert.equal(resumed.text, uninterrupted.text);
      assert.ok(resumed.text.includes(WEIGHT), resumed.text);
    });
  });
}
