// onejob's OpenAI-compatible gateway (DESIGN §9) driven by the real `openai` npm package.
//
// Run by `cargo test` (crates/onejob/tests/api/sdk.rs), which starts onejob serving model
// `fast` (the demo's kind `chat.fast`) on a fake provider, with `[gateway] wait = "2s"`, and
// model `brief` (the same, with `attempt_timeout` and `stream_idle_timeout` of 1 s), and
// passes:
//   ONEJOB_URL       the server, http://127.0.0.1:PORT (the SDK's baseURL is ONEJOB_URL/v1)
//   ONEJOB_API_KEY   a onejob API key
//   ONEJOB_FAKE_URL  the fake provider's root, for its /_fake control endpoints: rules are
//                    added with POST /_fake/rules, and GET /_fake/submissions lists every
//                    request the upstream received (the upstream calls counted below)
//
// Every case uses its own prompt and Idempotency-Key, so the cases do not see each other.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import OpenAI, {
  APIError,
  AuthenticationError,
  BadRequestError,
  ConflictError,
  InternalServerError,
  NotFoundError,
  RateLimitError,
  UnprocessableEntityError,
} from "openai";

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

/** The chat requests the upstream received whose messages hold `prompt`. */
async function upstreamCalls(prompt) {
  const seen = await fake("/_fake/submissions");
  return seen.requests.filter(
    (r) => r.endpoint === "chat" && r.request.messages.some((m) => String(m.content).includes(prompt)),
  );
}

/** A prompt no other case (or earlier run against the same fake) sends. */
const prompt = (text) => `${text} [${run}]`;
const key = (name) => ({ headers: { "Idempotency-Key": `js:${name}:${run}` } });
const user = (text) => [{ role: "user", content: text }];
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

describe("onejob's gateway through the openai npm package", () => {
  it("lists models brief and fast", async () => {
    const models = [];
    for await (const model of client().models.list()) models.push(model.id);
    assert.deepEqual(models, [...models].sort());
    assert.ok(models.includes("brief") && models.includes("fast"), String(models));
  });

  it("answers a plain call with a completion echoing the prompt", async () => {
    const text = prompt("Describe a red fox.");
    const completion = await client().chat.completions.create({ model: "fast", messages: user(text) }, key("plain"));
    assert.equal(completion.object, "chat.completion");
    assert.equal(completion.choices[0].message.role, "assistant");
    assert.ok(completion.choices[0].message.content.includes(text), completion.choices[0].message.content);
    assert.equal(completion.choices[0].finish_reason, "stop");
  });

  it("makes the same call twice under one key one job", async () => {
    const text = prompt("Name three foxes.");
    const sdk = client();
    const body = { model: "fast", messages: user(text) };
    const first = await sdk.chat.completions.create(body, key("twice")).withResponse();
    const second = await sdk.chat.completions.create(body, key("twice")).withResponse();
    assert.equal(first.response.headers.get("idempotent-replayed"), null);
    assert.equal(second.response.headers.get("idempotent-replayed"), "true");
    assert.equal(first.response.headers.get("onejob-job-id"), second.response.headers.get("onejob-job-id"));
    assert.equal(first.data.id, second.data.id);
    assert.deepEqual(first.data, second.data);
    assert.equal((await upstreamCalls(text)).length, 1);
  });

  it("refuses another body under the key with a 422 naming the changed path", async () => {
    const text = prompt("A fox, warmly.");
    const sdk = client();
    await sdk.chat.completions.create({ model: "fast", messages: user(text), temperature: 0.2 }, key("changed"));
    const refused = await sdk.chat.completions
      .create({ model: "fast", messages: user(text), temperature: 0.9 }, key("changed"))
      .then(
        () => assert.fail("a changed body under the same key must be refused"),
        (error) => error,
      );
    assert.ok(refused instanceof UnprocessableEntityError, String(refused));
    assert.equal(refused.status, 422);
    assert.equal(refused.code, "key-reused");
    assert.deepEqual(refused.error.changed, ["/temperature"]);
    assert.match(refused.message, /this Idempotency-Key already names a job/);
    assert.match(refused.message, /\/temperature/);
    assert.equal((await upstreamCalls(text)).length, 1, "the refused call ran nothing");
  });

  it("retries an SDK timeout into the same job", async () => {
    // The upstream takes 2.5 s; the SDK gives up on each request after 1 s and retries it
    // by itself, with the same headers: every retry attaches to the one job.
    const text = prompt("A slow fox, timed out.");
    await addRule(text, { run_ms: 2500 });
    const [sdk, sent] = counted({ timeout: 1000, maxRetries: 6 });
    const started = Date.now();
    const { data, response } = await sdk.chat.completions
      .create({ model: "fast", messages: user(text) }, key("timeout"))
      .withResponse();
    assert.ok(data.choices[0].message.content.includes(text));
    assert.ok(sent.requests >= 2, `the SDK timed out and retried (${sent.requests} requests)`);
    assert.ok(Date.now() - started >= 2500);
    assert.equal(response.headers.get("idempotent-replayed"), "true");
    assert.equal((await upstreamCalls(text)).length, 1, "one upstream call for every retry");
  });

  it("answers still running with a 409 and Retry-After that the SDK retries", async () => {
    // The server waits 2 s ([gateway] wait), the upstream takes 3 s. Two callers of the one
    // call at once: without retries, the SDK throws the 409; with its default retries, it
    // waits Retry-After and asks again, and gets the same job's completion.
    const text = prompt("A fox that takes its time.");
    await addRule(text, { run_ms: 3000 });
    const body = { model: "fast", messages: user(text) };
    const [sdk, sent] = counted();
    const [running, { data, response }] = await Promise.all([
      client({ maxRetries: 0 })
        .chat.completions.create(body, key("running"))
        .then(
          () => assert.fail("still running after the wait"),
          (error) => error,
        ),
      sdk.chat.completions.create(body, key("running")).withResponse(),
    ]);
    assert.ok(running instanceof ConflictError, String(running));
    assert.equal(running.status, 409);
    assert.equal(running.headers.get("retry-after"), "1");
    assert.equal(running.error.state, "running");
    assert.match(running.message, /still running/);
    assert.equal(response.headers.get("onejob-job-id"), running.error.job_id);
    assert.ok(sent.requests >= 2, `the SDK retried the 409 (${sent.requests} requests)`);
    assert.ok(data.choices[0].message.content.includes(text));
    assert.equal((await upstreamCalls(text)).length, 1);
  });

  it("throws a failed job's error at once, without retrying", async () => {
    // The upstream refuses with a 503: the job failed, and onejob answers its status with
    // x-should-retry: false, since every retry under the key gets the same answer.
    const text = prompt("An overloaded fox.");
    await addRule(text, { http_status: 503 });
    const [sdk, sent] = counted();
    const failed = await sdk.chat.completions.create({ model: "fast", messages: user(text) }, key("failed")).then(
      () => assert.fail("the upstream refused"),
      (error) => error,
    );
    assert.ok(failed instanceof InternalServerError, String(failed));
    assert.equal(failed.status, 503);
    assert.equal(failed.code, "upstream_error");
    assert.ok(failed.message.includes(failed.headers.get("onejob-job-id")), failed.message);
    assert.equal(sent.requests, 1, "not retried");
    assert.equal((await upstreamCalls(text)).length, 1);
  });

  it("streams so that OpenAI's example loop reads every chunk", async () => {
    // OpenAI's examples read choices[0] of every chunk: a chunk without choices (the usage
    // chunk) may come only when stream_options asks include_usage.
    const text = prompt("Stream a fox, plainly.");
    await addRule(text, { run_ms: 300 });
    const sdk = client();
    const stream = await sdk.chat.completions.create(
      { model: "fast", messages: user(text), stream: true },
      key("usage-plain"),
    );
    let streamed = "";
    for await (const chunk of stream) streamed += chunk.choices[0].delta.content ?? "";
    assert.ok(streamed.includes(text), streamed);
    const asked = await sdk.chat.completions.create(
      { model: "fast", messages: user(text), stream: true, stream_options: { include_usage: true } },
      key("usage-asked"),
    );
    const chunks = [];
    for await (const chunk of asked) chunks.push(chunk);
    assert.deepEqual(chunks.at(-1).choices, []);
    assert.ok(chunks.at(-1).usage.total_tokens > 0);
  });

  it("gives two concurrent streams under one key one upstream call", async () => {
    const text = prompt("Stream a fox story slowly.");
    await addRule(text, { run_ms: 1500 });
    const sdk = client();
    const consume = async (delay) => {
      await new Promise((resolve) => setTimeout(resolve, delay));
      const stream = await sdk.chat.completions.create(
        { model: "fast", messages: user(text), stream: true },
        key("stream"),
      );
      const chunks = [];
      for await (const chunk of stream) chunks.push(chunk);
      return chunks;
    };
    // The second asks while the first is streaming.
    const [first, second] = await Promise.all([consume(0), consume(300)]);
    const assembled = (chunks) => chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("");
    assert.equal(assembled(first), assembled(second));
    assert.ok(assembled(first).includes(text), assembled(first));
    assert.ok(first.length > 2, "streamed in pieces");
    assert.deepEqual(new Set(first.map((c) => c.id)), new Set(second.map((c) => c.id)));
    assert.equal(first[0].object, "chat.completion.chunk");
    assert.equal(first.filter((c) => c.choices.length).at(-1).choices[0].finish_reason, "stop");
    assert.equal((await upstreamCalls(text)).length, 1);
  });

  it("throws onejob's error when a stream's attempt breaks off", async () => {
    // The upstream dies after two content chunks: onejob ends the stream with an error
    // event naming the job, which the SDK throws.
    const text = prompt("A fox story cut short.");
    await addRule(text, { break_stream_after: 2, run_ms: 300 });
    const { data: stream, response } = await client()
      .chat.completions.create({ model: "fast", messages: user(text), stream: true }, key("broken"))
      .withResponse();
    const jobId = response.headers.get("onejob-job-id");
    const received = [];
    const broken = await (async () => {
      for await (const chunk of stream) received.push(chunk);
    })().then(
      () => assert.fail("the stream ends with an error"),
      (error) => error,
    );
    assert.ok(received.length > 0, "the chunks before the break came through");
    assert.ok(broken instanceof APIError, String(broken));
    assert.equal(broken.code, "attempt_failed");
    assert.ok(broken.message.includes(jobId), broken.message);
    assert.equal((await upstreamCalls(text)).length, 1);
  });

  it("passes tools and tool_choice through", async () => {
    const text = prompt("What is the weather in Oslo?");
    const tools = [
      {
        type: "function",
        function: {
          name: "weather",
          description: "The weather in a city",
          parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
        },
      },
    ];
    const toolChoice = { type: "function", function: { name: "weather" } };
    const completion = await client().chat.completions.create(
      { model: "fast", messages: user(text), tools, tool_choice: toolChoice },
      key("tools"),
    );
    const calls = completion.choices[0].message.tool_calls;
    assert.deepEqual(
      calls.map((c) => c.function.name),
      ["weather"],
    );
    const [sent, ...more] = await upstreamCalls(text);
    assert.equal(more.length, 0);
    assert.deepEqual(sent.request.tools, tools);
    assert.deepEqual(sent.request.tool_choice, toolChoice);
  });

  it("passes response_format through", async () => {
    const text = prompt("Answer in JSON.");
    const completion = await client().chat.completions.create(
      { model: "fast", messages: user(text), response_format: { type: "json_object" } },
      key("json"),
    );
    assert.equal(typeof JSON.parse(completion.choices[0].message.content), "object");
    const [sent, ...more] = await upstreamCalls(text);
    assert.equal(more.length, 0);
    assert.deepEqual(sent.request.response_format, { type: "json_object" });
  });

  it("answers an unknown model with a 404 and onejob's message", async () => {
    const text = prompt("No such model.");
    const missing = await client()
      .chat.completions.create({ model: "gpt-9", messages: user(text) }, key("missing"))
      .then(
        () => assert.fail("gpt-9 is not served"),
        (error) => error,
      );
    assert.ok(missing instanceof NotFoundError, String(missing));
    assert.equal(missing.status, 404);
    assert.match(missing.message, /"gpt-9" does not exist here/);
    assert.ok(missing.error.models.includes("brief") && missing.error.models.includes("fast"), String(missing.error.models));
    assert.deepEqual(await upstreamCalls(text), []);
  });

  it("refuses a call without a key", async () => {
    const text = prompt("No key.");
    const refused = await client()
      .chat.completions.create({ model: "fast", messages: user(text) })
      .then(
        () => assert.fail("a keyless call is refused by default"),
        (error) => error,
      );
    assert.ok(refused instanceof BadRequestError, String(refused));
    assert.equal(refused.code, "idempotency-key-missing");
    assert.deepEqual(await upstreamCalls(text), []);
  });

  it("forwards the request as sent, in the caller's key order", async () => {
    // Structured outputs emit keys in the schema's order, and a tool's parameters are read
    // in theirs: the upstream must get the caller's JSON as sent, not re-sorted.
    const text = prompt("Think, then answer.");
    const schema = {
      type: "object",
      properties: { reasoning: { type: "string" }, final_answer: { type: "string" } },
      required: ["reasoning", "final_answer"],
      additionalProperties: false,
    };
    const tools = [
      {
        type: "function",
        function: {
          name: "book",
          parameters: { type: "object", properties: { when: { type: "string" }, city: { type: "string" } } },
        },
      },
    ];
    await client().chat.completions.create(
      {
        model: "fast",
        messages: user(text),
        response_format: { type: "json_schema", json_schema: { name: "answer", schema, strict: true } },
        tools,
      },
      key("as-sent"),
    );
    const [sent, ...more] = await upstreamCalls(text);
    assert.equal(more.length, 0);
    const body = sent.body_text;
    assert.ok(body.indexOf('"reasoning"') < body.indexOf('"final_answer"'), body);
    assert.ok(body.indexOf('"when"') < body.indexOf('"city"'), body);
    assert.equal(JSON.parse(body).model, "fake", "only the model is the provider's");
  });

  it("keeps a streamed answer whole and replays it whole", async () => {
    // A reasoning model's stream: reasoning_content first, then content, each content chunk
    // with its logprobs. The job keeps all of it; replays give all of it back.
    const text = prompt("Reason about a fox, streamed.");
    const thought = "First, think about foxes.";
    await addRule(text, { reasoning: thought, run_ms: 300 });
    const sdk = client();
    const ask = (stream) =>
      sdk.chat.completions.create({ model: "fast", messages: user(text), logprobs: true, stream }, key("whole"));
    const read = async (stream) => {
      const choices = [];
      for await (const chunk of stream) if (chunk.choices.length) choices.push(chunk.choices[0]);
      return {
        thought: choices.map((c) => c.delta.reasoning_content ?? "").join(""),
        content: choices.map((c) => c.delta.content ?? "").join(""),
        tokens: choices.flatMap((c) => (c.logprobs ? c.logprobs.content.map((t) => t.token) : [])),
      };
    };
    const live = await read(await ask(true));
    assert.equal(live.thought, thought);
    assert.ok(live.content.includes(text), live.content);
    assert.equal(live.tokens.join(""), live.content, "every content chunk's logprobs");
    const stored = await ask(false);
    assert.equal(stored.choices[0].message.reasoning_content, live.thought);
    assert.equal(stored.choices[0].message.content, live.content);
    assert.deepEqual(
      stored.choices[0].logprobs.content.map((t) => t.token),
      live.tokens,
    );
    assert.deepEqual(await read(await ask(true)), live, "replayed as a stream: all of it");
    assert.equal((await upstreamCalls(text)).length, 1);
  });

  it("refuses a number beyond the exact range instead of rounding it", async () => {
    const text = prompt("A seed too large.");
    for (const seed of [10 ** 30, 2 ** 60]) {
      const refused = await client()
        .chat.completions.create({ model: "fast", messages: user(text), seed }, key("seed"))
        .then(
          () => assert.fail("a seed beyond 2^53 is refused"),
          (error) => error,
        );
      assert.ok(refused instanceof BadRequestError, String(refused));
      assert.equal(refused.code, "params-invalid");
      assert.match(refused.message, /\/seed/);
    }
    assert.deepEqual(await upstreamCalls(text), []);
  });

  it("answers other /v1 paths in OpenAI's shape", async () => {
    const sdk = client();
    const model = await sdk.models.retrieve("fast");
    assert.deepEqual([model.id, model.object], ["fast", "model"]);
    const missing = await sdk.models.retrieve("gpt-9").then(
      () => assert.fail("gpt-9 is not served"),
      (error) => error,
    );
    assert.ok(missing instanceof NotFoundError, String(missing));
    assert.equal(missing.code, "not-found");
    const files = await sdk.files.list().then(
      () => assert.fail("files are not served"),
      (error) => error,
    );
    assert.ok(files instanceof NotFoundError, String(files));
    assert.equal(files.code, "not-found");
    assert.match(files.message, /\/v1\/files/);
  });

  it("lets a stream that keeps producing outlive attempt_timeout", async () => {
    // Model `brief`: attempt_timeout and stream_idle_timeout of 1 s. A stream producing for
    // 3 s is not cut; a stream silent for longer than 1 s is, its outcome unknown.
    const text = prompt("A long fox story, streamed steadily for a while.");
    await addRule(text, { run_ms: 3000 });
    const sdk = client();
    const chunks = [];
    const stream = await sdk.chat.completions.create(
      { model: "brief", messages: user(text), stream: true },
      key("long"),
    );
    for await (const chunk of stream) chunks.push(chunk);
    assert.ok(chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("").includes(text));
    assert.equal(chunks.at(-1).choices[0].finish_reason, "stop");
    const silent = prompt("A fox that falls silent.");
    await addRule(silent, { hang_after_ack: true });
    const quiet = await sdk.chat.completions.create(
      { model: "brief", messages: user(silent), stream: true },
      key("silent"),
    );
    const broken = await (async () => {
      for await (const _ of quiet);
    })().then(
      () => assert.fail("a silent stream ends with an error"),
      (error) => error,
    );
    assert.ok(broken instanceof APIError, String(broken));
    assert.equal(broken.code, "attempt_failed");
    assert.match(broken.message, /unknown/);
  });

  it("answers the upstream's refusal of onejob's own key as a 502, not the caller's 401", async () => {
    const text = prompt("The upstream refuses our key.");
    await addRule(text, { http_status: 401 });
    const [sdk, sent] = counted();
    const error = await sdk.chat.completions.create({ model: "fast", messages: user(text) }, key("upstream-401")).then(
      () => assert.fail("the upstream refused"),
      (error) => error,
    );
    assert.ok(!(error instanceof AuthenticationError), String(error));
    assert.ok(error instanceof InternalServerError, String(error));
    assert.equal(error.status, 502);
    assert.equal(error.code, "upstream_auth_error");
    assert.match(error.message, /"fake"/);
    assert.equal(sent.requests, 1, "not retried");
    const [call] = await upstreamCalls(text);
    assert.equal(error.headers.get("x-request-id"), call.request_id);
  });

  it("passes an upstream rate limit on with its Retry-After, and the request id", async () => {
    const text = prompt("A rate-limited fox.");
    await addRule(text, { http_status: 429, retry_after: 7 });
    const limited = await client()
      .chat.completions.create({ model: "fast", messages: user(text) }, key("upstream-429"))
      .then(
        () => assert.fail("the upstream is rate limited"),
        (error) => error,
      );
    assert.ok(limited instanceof RateLimitError, String(limited));
    assert.equal(limited.headers.get("retry-after"), "7");
    assert.equal((await upstreamCalls(text)).length, 1);
    const asked = prompt("Which request was this?");
    const { request_id } = await client()
      .chat.completions.create({ model: "fast", messages: user(asked) }, key("request-id"))
      .withResponse();
    const [call] = await upstreamCalls(asked);
    assert.ok(call.request_id.startsWith("req_"));
    assert.equal(request_id, call.request_id);
  });
});
