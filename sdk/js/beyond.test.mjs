// onejob's gateway beyond chat (DESIGN §9 "Beyond chat") driven by the real `openai` npm
// package: embeddings, the Responses API (`responses.create` plain and streamed) and image
// generation (`images.generate`, also from an async-task image provider).
//
// Run by `cargo test` (crates/onejob/tests/api/sdk.rs), which starts onejob serving the
// demo's models beyond chat on a fake provider (`embed` at /v1/embeddings, `respond` at
// /v1/responses, `draw` at /v1/images/generations, `draw-polled` there from an async-task
// provider), with
// `[gateway] wait = "2s"`, and passes:
//   ONEJOB_URL       the server, http://127.0.0.1:PORT (the SDK's baseURL is ONEJOB_URL/v1)
//   ONEJOB_API_KEY   a onejob API key
//   ONEJOB_FAKE_URL  the fake provider's root, for its /_fake control endpoints (rules, and
//                    GET /_fake/submissions: the upstream calls counted below)
//
// Every case uses its own input and Idempotency-Key, so the cases do not see each other.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import OpenAI, { BadRequestError, UnprocessableEntityError } from "openai";

function required(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set; this test is run by cargo test (tests/api/sdk.rs)`);
  return value.replace(/\/$/, "");
}

const baseURL = `${required("ONEJOB_URL")}/v1`;
const apiKey = required("ONEJOB_API_KEY");
const fakeURL = required("ONEJOB_FAKE_URL");
const run = randomUUID().slice(0, 8);

async function fake(path, body) {
  const response = await fetch(fakeURL + path, {
    method: body === undefined ? "GET" : "POST",
    headers: { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  assert.ok(response.ok, `${path}: ${response.status} ${await response.clone().text()}`);
  return response.json();
}

const addRule = (matches, behaviour) => fake("/_fake/rules", { matches, ...behaviour });

/** The requests the upstream received at `endpoint` whose input mentions `text`. */
async function upstreamCalls(endpoint, text) {
  const seen = await fake("/_fake/submissions");
  return seen.requests.filter((r) => r.endpoint === endpoint && JSON.stringify(r.input).includes(text));
}

/** An input no other case (or earlier run against the same fake) sends. */
const unique = (text) => `${text} [${run}]`;
const key = (name) => ({ headers: { "Idempotency-Key": `js-beyond:${name}:${run}` } });
const client = (options = {}) => new OpenAI({ baseURL, apiKey, ...options });

/** A client whose requests are counted (the SDK's own retries included). */
function counted(options = {}) {
  const sent = { requests: 0 };
  const sdk = client({
    ...options,
    fetch: (url, init) => {
      sent.requests += 1;
      return fetch(url, init);
    },
  });
  return [sdk, sent];
}

describe("embeddings through the openai npm package", () => {
  it("answers embeddings.create with the upstream's vectors and usage", async () => {
    const text = unique("A red fox.");
    const answer = await client().embeddings.create({ model: "embed", input: [text, "a grey hen"] }, key("embed"));
    assert.equal(answer.object, "list");
    assert.deepEqual(
      answer.data.map((e) => e.index),
      [0, 1],
    );
    assert.equal(answer.data[0].embedding.length, 8);
    assert.ok(answer.usage.prompt_tokens > 0);
    // The SDK asks for base64 by itself and decodes it: the format passed through.
    const [call] = await upstreamCalls("embeddings", text);
    assert.equal(call.request.encoding_format, "base64");
  });

  it("makes the same call twice under one key one upstream call", async () => {
    const text = unique("Embed a fox twice.");
    const sdk = client();
    const body = { model: "embed", input: text };
    const first = await sdk.embeddings.create(body, key("twice")).withResponse();
    const second = await sdk.embeddings.create(body, key("twice")).withResponse();
    assert.equal(first.response.headers.get("idempotent-replayed"), null);
    assert.equal(second.response.headers.get("idempotent-replayed"), "true");
    assert.equal(first.response.headers.get("onejob-job-id"), second.response.headers.get("onejob-job-id"));
    assert.deepEqual(first.data, second.data);
    assert.equal((await upstreamCalls("embeddings", text)).length, 1);
  });

  it("refuses another input under the key with the SDK's 422", async () => {
    const text = unique("Embed a fox, then a hen.");
    const sdk = client();
    await sdk.embeddings.create({ model: "embed", input: text }, key("changed"));
    const refused = await sdk.embeddings.create({ model: "embed", input: `${text} and a hen` }, key("changed")).then(
      () => assert.fail("a changed body under the same key must be refused"),
      (error) => error,
    );
    assert.ok(refused instanceof UnprocessableEntityError, String(refused));
    assert.equal(refused.code, "key-reused");
    assert.deepEqual(refused.error.changed, ["/input"]);
    assert.equal((await upstreamCalls("embeddings", text)).length, 1);
  });

  it("retries an SDK timeout into the same job", async () => {
    const text = unique("A slow fox to embed.");
    await addRule(text, { run_ms: 2500 });
    const [sdk, sent] = counted({ timeout: 1000, maxRetries: 6 });
    const started = Date.now();
    const { data, response } = await sdk.embeddings.create({ model: "embed", input: text }, key("timeout")).withResponse();
    assert.equal(data.data[0].embedding.length, 8);
    assert.ok(sent.requests >= 2, `the SDK timed out and retried (${sent.requests} requests)`);
    assert.ok(Date.now() - started >= 2500);
    assert.equal(response.headers.get("idempotent-replayed"), "true");
    assert.equal((await upstreamCalls("embeddings", text)).length, 1);
  });
});

describe("the Responses API through the openai npm package", () => {
  it("answers responses.create with the upstream's response", async () => {
    const text = unique("Describe a red fox.");
    const response = await client().responses.create({ model: "respond", input: text }, key("responses-plain"));
    assert.equal(response.object, "response");
    assert.equal(response.status, "completed");
    assert.ok(response.output_text.includes(text), response.output_text);
    assert.ok(response.usage.total_tokens > 0);
  });

  it("streams typed events up to response.completed", async () => {
    const text = unique("Stream a red fox.");
    await addRule(text, { run_ms: 300 });
    const stream = await client().responses.create({ model: "respond", input: text, stream: true }, key("responses-stream"));
    const events = [];
    for await (const event of stream) events.push(event);
    assert.equal(events[0].type, "response.created");
    assert.equal(events.at(-1).type, "response.completed");
    const streamed = events
      .filter((e) => e.type === "response.output_text.delta")
      .map((e) => e.delta)
      .join("");
    assert.ok(streamed.includes(text), streamed);
    assert.equal((await upstreamCalls("responses", text)).length, 1);
  });

  it("makes the same call twice under one key one upstream call", async () => {
    const text = unique("A fox, asked twice.");
    const sdk = client();
    const body = { model: "respond", input: text };
    const first = await sdk.responses.create(body, key("responses-twice")).withResponse();
    const second = await sdk.responses.create(body, key("responses-twice")).withResponse();
    assert.equal(first.response.headers.get("idempotent-replayed"), null);
    assert.equal(second.response.headers.get("idempotent-replayed"), "true");
    assert.deepEqual(first.data, second.data);
    assert.equal((await upstreamCalls("responses", text)).length, 1);
  });

  it("refuses conversation state with a clear error", async () => {
    const text = unique("A fox to remember.");
    const refused = await client()
      .responses.create({ model: "respond", input: text, previous_response_id: "resp_1" }, key("responses-state"))
      .then(
        () => assert.fail("previous_response_id must be refused"),
        (error) => error,
      );
    assert.ok(refused instanceof BadRequestError, String(refused));
    assert.match(refused.message, /does not keep conversation state/);
    assert.equal((await upstreamCalls("responses", text)).length, 0);
  });

  it("retries an SDK timeout into the same job", async () => {
    const text = unique("A slow fox to answer.");
    await addRule(text, { run_ms: 2500 });
    const [sdk, sent] = counted({ timeout: 1000, maxRetries: 6 });
    const { data, response } = await sdk.responses.create({ model: "respond", input: text }, key("responses-timeout")).withResponse();
    assert.ok(data.output_text.includes(text));
    assert.ok(sent.requests >= 2, `the SDK timed out and retried (${sent.requests} requests)`);
    assert.equal(response.headers.get("idempotent-replayed"), "true");
    assert.equal((await upstreamCalls("responses", text)).length, 1);
  });
});

describe("image generation through the openai npm package", () => {
  it("answers images.generate with the upstream's images, one upstream call per key", async () => {
    const text = unique("A red fox in the snow.");
    const sdk = client();
    const body = { model: "draw", prompt: text };
    const first = await sdk.images.generate(body, key("images-twice")).withResponse();
    const second = await sdk.images.generate(body, key("images-twice")).withResponse();
    assert.ok(first.data.data[0].url.startsWith("https://"), first.data.data[0].url);
    assert.equal(second.response.headers.get("idempotent-replayed"), "true");
    assert.deepEqual(first.data, second.data);
    assert.equal((await upstreamCalls("images", text)).length, 1);
  });

  it("retries an SDK timeout into the same job", async () => {
    const text = unique("A slow fox to draw.");
    await addRule(text, { run_ms: 2500 });
    const [sdk, sent] = counted({ timeout: 1000, maxRetries: 6 });
    const { data, response } = await sdk.images.generate({ model: "draw", prompt: text }, key("images-timeout")).withResponse();
    assert.ok(data.data[0].url.startsWith("https://"));
    assert.ok(sent.requests >= 2, `the SDK timed out and retried (${sent.requests} requests)`);
    assert.equal(response.headers.get("idempotent-replayed"), "true");
    assert.equal((await upstreamCalls("images", text)).length, 1);
  });

  it("answers an async-task provider's image", async () => {
    const text = unique("A red fox, polled.");
    const images = await client().images.generate({ model: "draw-polled", prompt: text }, key("images-polled"));
    assert.ok(images.data[0].url.startsWith("https://fake.invalid/images/task_"), images.data[0].url);
  });
});
