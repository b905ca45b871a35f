"""onejob's OpenAI-compatible gateway (DESIGN §9) driven by the real `openai` package.

Run by `cargo test` (crates/onejob/tests/api/sdk.rs), which starts onejob serving model
`fast` (the demo's kind `chat.fast`) on a fake provider, with `[gateway] wait = "2s"`, and
model `brief` (the same, with `attempt_timeout` and `stream_idle_timeout` of 1 s), and
passes:

  ONEJOB_URL       the server, http://127.0.0.1:PORT (the SDK's base_url is ONEJOB_URL/v1)
  ONEJOB_API_KEY   a onejob API key
  ONEJOB_FAKE_URL  the fake provider's root, for its /_fake control endpoints: rules are
                   added with POST /_fake/rules, and GET /_fake/submissions lists every
                   request the upstream received (the upstream calls counted below)

Every case uses its own prompt and Idempotency-Key, so the cases do not see each other.
"""

import asyncio
import concurrent.futures
import json
import os
import time
import unittest
import urllib.request
import uuid

import openai
from openai import AsyncOpenAI, OpenAI


def required(name):
    value = os.environ.get(name)
    if not value:
        raise SystemExit(f"{name} is not set; this test is run by cargo test (tests/api/sdk.rs)")
    return value.rstrip("/")


BASE_URL = required("ONEJOB_URL") + "/v1"
API_KEY = required("ONEJOB_API_KEY")
FAKE_URL = required("ONEJOB_FAKE_URL")
RUN = uuid.uuid4().hex[:8]


def fake(path, body=None):
    """A call to the fake provider's control endpoints."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        FAKE_URL + path, data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"null")


def add_rule(matches, **behaviour):
    fake("/_fake/rules", {"matches": matches, **behaviour})


def upstream_calls(prompt):
    """The chat requests the upstream received whose messages hold `prompt`."""
    seen = fake("/_fake/submissions")
    return [
        record
        for record in seen["requests"]
        if record["endpoint"] == "chat"
        and any(prompt in str(m.get("content")) for m in record["request"]["messages"])
    ]


def prompt(text):
    """A prompt no other case (or earlier run against the same fake) sends."""
    return f"{text} [{RUN}]"


def key(case):
    return {"Idempotency-Key": f"py:{case}:{RUN}"}


def user(text):
    return [{"role": "user", "content": text}]


def client(**options):
    return OpenAI(base_url=BASE_URL, api_key=API_KEY, **options)


class Gateway(unittest.TestCase):
    maxDiff = None

    def test_models_lists_fast(self):
        models = [m.id for m in client().models.list()]
        self.assertEqual(models, sorted(models))
        self.assertTrue({"brief", "fast"} <= set(models), models)

    def test_a_plain_call_returns_a_completion_echoing_the_prompt(self):
        text = prompt("Describe a red fox.")
        completion = client().chat.completions.create(
            model="fast", messages=user(text), extra_headers=key("plain")
        )
        self.assertEqual(completion.object, "chat.completion")
        self.assertEqual(completion.choices[0].message.role, "assistant")
        self.assertIn(text, completion.choices[0].message.content)
        self.assertEqual(completion.choices[0].finish_reason, "stop")

    def test_the_same_call_twice_under_one_key_is_one_job(self):
        text = prompt("Name three foxes.")
        create = client().chat.completions.with_raw_response.create
        first = create(model="fast", messages=user(text), extra_headers=key("twice"))
        second = create(model="fast", messages=user(text), extra_headers=key("twice"))
        self.assertIsNone(first.headers.get("idempotent-replayed"))
        self.assertEqual(second.headers["idempotent-replayed"], "true")
        self.assertEqual(first.headers["onejob-job-id"], second.headers["onejob-job-id"])
        self.assertEqual(first.parse().id, second.parse().id)
        self.assertEqual(first.parse().model_dump(), second.parse().model_dump())
        self.assertEqual(len(upstream_calls(text)), 1)

    def test_another_body_under_the_key_is_a_422_naming_the_changed_path(self):
        text = prompt("A fox, warmly.")
        sdk = client()
        sdk.chat.completions.create(
            model="fast", messages=user(text), temperature=0.2, extra_headers=key("changed")
        )
        with self.assertRaises(openai.UnprocessableEntityError) as raised:
            sdk.chat.completions.create(
                model="fast", messages=user(text), temperature=0.9, extra_headers=key("changed")
            )
        error = raised.exception
        self.assertEqual(error.status_code, 422)
        self.assertEqual(error.code, "key-reused")
        self.assertEqual(error.body["changed"], ["/temperature"])
        self.assertIn("this Idempotency-Key already names a job", error.body["message"])
        self.assertIn("/temperature", error.body["message"])
        self.assertIn("/temperature", str(error))
        self.assertEqual(len(upstream_calls(text)), 1, "the refused call ran nothing")

    def test_an_sdk_timeout_retries_into_the_same_job(self):
        # The upstream takes 2.5 s; the SDK gives up on each request after 1 s and retries
        # it by itself, with the same headers: every retry attaches to the one job.
        text = prompt("A slow fox, timed out.")
        add_rule(text, run_ms=2500)
        started = time.monotonic()
        raw = client(timeout=1.0, max_retries=6).chat.completions.with_raw_response.create(
            model="fast", messages=user(text), extra_headers=key("timeout")
        )
        elapsed = time.monotonic() - started
        self.assertIn(text, raw.parse().choices[0].message.content)
        self.assertGreaterEqual(raw.retries_taken, 1, "the SDK timed out and retried")
        self.assertGreaterEqual(elapsed, 2.5)
        self.assertEqual(raw.headers["idempotent-replayed"], "true")
        self.assertEqual(len(upstream_calls(text)), 1, "one upstream call for every retry")

    def test_still_running_is_a_409_with_retry_after_that_the_sdk_retries(self):
        # The server waits 2 s ([gateway] wait), the upstream takes 3 s. Two callers of the
        # one call at once: without retries, the SDK raises the 409; with its default
        # retries, it waits Retry-After and asks again, and gets the same job's completion.
        text = prompt("A fox that takes its time.")
        add_rule(text, run_ms=3000)

        def once():
            return client(max_retries=0).chat.completions.create(
                model="fast", messages=user(text), extra_headers=key("running")
            )

        def retrying():
            return client().chat.completions.with_raw_response.create(
                model="fast", messages=user(text), extra_headers=key("running")
            )

        with concurrent.futures.ThreadPoolExecutor() as pool:
            refused, answered = pool.submit(once), pool.submit(retrying)
            with self.assertRaises(openai.ConflictError) as raised:
                refused.result()
            raw = answered.result()
        error = raised.exception
        self.assertEqual(error.status_code, 409)
        self.assertEqual(error.response.headers["retry-after"], "1")
        self.assertEqual(error.body["state"], "running")
        self.assertIn("still running", error.body["message"])
        self.assertEqual(raw.headers["onejob-job-id"], error.body["job_id"])
        self.assertGreaterEqual(raw.retries_taken, 1, "the SDK retried the 409")
        self.assertIn(text, raw.parse().choices[0].message.content)
        self.assertEqual(len(upstream_calls(text)), 1)

    def test_a_failed_job_is_raised_at_once_not_retried(self):
        # The upstream refuses with a 503: the job failed, and onejob answers its status with
        # x-should-retry: false, since every retry under the key gets the same answer.
        text = prompt("An overloaded fox.")
        add_rule(text, http_status=503)
        sent = []
        http = openai.DefaultHttpxClient(event_hooks={"request": [sent.append]})
        with self.assertRaises(openai.InternalServerError) as raised:
            client(http_client=http).chat.completions.create(
                model="fast", messages=user(text), extra_headers=key("failed")
            )
        error = raised.exception
        self.assertEqual(error.status_code, 503)
        self.assertEqual(error.code, "upstream_error")
        self.assertIn(error.response.headers["onejob-job-id"], error.body["message"])
        self.assertEqual(len(sent), 1, "not retried")
        self.assertEqual(len(upstream_calls(text)), 1)

    def test_two_concurrent_streams_under_one_key_read_one_upstream_call(self):
        text = prompt("Stream a fox story slowly.")
        add_rule(text, run_ms=1500)

        async def consume(sdk, delay):
            await asyncio.sleep(delay)
            stream = await sdk.chat.completions.create(
                model="fast", messages=user(text), stream=True, extra_headers=key("stream")
            )
            return [chunk async for chunk in stream]

        async def both():
            async with AsyncOpenAI(base_url=BASE_URL, api_key=API_KEY) as sdk:
                # The second asks while the first is streaming.
                return await asyncio.gather(consume(sdk, 0), consume(sdk, 0.3))

        first, second = asyncio.run(both())
        texts = [
            "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            for chunks in (first, second)
        ]
        self.assertEqual(texts[0], texts[1])
        self.assertIn(text, texts[0])
        self.assertGreater(len(first), 2, "streamed in pieces")
        self.assertEqual({c.id for c in first}, {c.id for c in second})
        self.assertEqual(first[0].object, "chat.completion.chunk")
        self.assertEqual([c.choices[0].finish_reason for c in first if c.choices][-1], "stop")
        self.assertEqual(len(upstream_calls(text)), 1)

    def test_a_live_stream_reads_as_in_openais_examples(self):
        # OpenAI's examples read choices[0] of every chunk: a chunk without choices (the
        # usage chunk) may come only when stream_options asks include_usage.
        text = prompt("Stream a fox, plainly.")
        add_rule(text, run_ms=300)
        sdk = client()
        stream = sdk.chat.completions.create(
            model="fast", messages=user(text), stream=True, extra_headers=key("usage-plain")
        )
        streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
        self.assertIn(text, streamed)
        stream = sdk.chat.completions.create(
            model="fast",
            messages=user(text),
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=key("usage-asked"),
        )
        chunks = list(stream)
        self.assertEqual(chunks[-1].choices, [])
        self.assertGreater(chunks[-1].usage.total_tokens, 0)

    def test_a_stream_whose_attempt_breaks_off_raises_onejobs_error(self):
        # The upstream dies after two content chunks: onejob ends the stream with an error
        # event naming the job, which the SDK raises.
        text = prompt("A fox story cut short.")
        add_rule(text, break_stream_after=2, run_ms=300)
        stream = client().chat.completions.create(
            model="fast", messages=user(text), stream=True, extra_headers=key("broken")
        )
        job_id = stream.response.headers["onejob-job-id"]
        received = []
        with self.assertRaises(openai.APIError) as raised:
            for chunk in stream:
                received.append(chunk)
        self.assertGreater(len(received), 0, "the chunks before the break came through")
        self.assertEqual(raised.exception.code, "attempt_failed")
        self.assertIn(job_id, raised.exception.message)
        self.assertEqual(len(upstream_calls(text)), 1)

    def test_tools_and_tool_choice_pass_through(self):
        text = prompt("What is the weather in Oslo?")
        tools = [
            {
                "type": "function",
                "function": {
                    "name": "weather",
                    "description": "The weather in a city",
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "required": ["city"],
                    },
                },
            }
        ]
        tool_choice = {"type": "function", "function": {"name": "weather"}}
        completion = client().chat.completions.create(
            model="fast",
            messages=user(text),
            tools=tools,
            tool_choice=tool_choice,
            extra_headers=key("tools"),
        )
        calls = completion.choices[0].message.tool_calls
        self.assertEqual([c.function.name for c in calls], ["weather"])
        (sent,) = upstream_calls(text)
        self.assertEqual(sent["request"]["tools"], tools)
        self.assertEqual(sent["request"]["tool_choice"], tool_choice)

    def test_response_format_passes_through(self):
        text = prompt("Answer in JSON.")
        completion = client().chat.completions.create(
            model="fast",
            messages=user(text),
            response_format={"type": "json_object"},
            extra_headers=key("json"),
        )
        self.assertIsInstance(json.loads(completion.choices[0].message.content), dict)
        (sent,) = upstream_calls(text)
        self.assertEqual(sent["request"]["response_format"], {"type": "json_object"})

    def test_an_unknown_model_is_a_404_with_onejobs_message(self):
        text = prompt("No such model.")
        with self.assertRaises(openai.NotFoundError) as raised:
            client().chat.completions.create(
                model="gpt-9", messages=user(text), extra_headers=key("missing")
            )
        error = raised.exception
        self.assertEqual(error.status_code, 404)
        self.assertIn('"gpt-9" does not exist here', error.body["message"])
        self.assertTrue({"brief", "fast"} <= set(error.body["models"]), error.body["models"])
        self.assertEqual(upstream_calls(text), [])

    def test_a_call_without_a_key_is_refused(self):
        text = prompt("No key.")
        with self.assertRaises(openai.BadRequestError) as raised:
            client().chat.completions.create(model="fast", messages=user(text))
        self.assertEqual(raised.exception.code, "idempotency-key-missing")
        self.assertEqual(upstream_calls(text), [])

    def test_the_upstream_receives_the_request_as_sent(self):
        # Structured outputs emit keys in the schema's order, and a tool's parameters are
        # read in theirs: the upstream must get the caller's JSON as sent, not re-sorted.
        text = prompt("Think, then answer.")
        schema = {
            "type": "object",
            "properties": {"reasoning": {"type": "string"}, "final_answer": {"type": "string"}},
            "required": ["reasoning", "final_answer"],
            "additionalProperties": False,
        }
        tools = [
            {
                "type": "function",
                "function": {
                    "name": "book",
                    "parameters": {
                        "type": "object",
                        "properties": {"when": {"type": "string"}, "city": {"type": "string"}},
                    },
                },
            }
        ]
        client().chat.completions.create(
            model="fast",
            messages=user(text),
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": schema, "strict": True},
            },
            tools=tools,
            extra_headers=key("as-sent"),
        )
        (sent,) = upstream_calls(text)
        body = sent["body_text"]
        self.assertLess(body.index('"reasoning"'), body.index('"final_answer"'), body)
        self.assertLess(body.index('"when"'), body.index('"city"'), body)
        self.assertEqual(json.loads(body)["model"], "fake", "only the model is the provider's")

    def test_a_streamed_answer_is_kept_whole_and_replayed_whole(self):
        # A reasoning model's stream: reasoning_content first, then content, each content
        # chunk with its logprobs. The job keeps all of it; replays give all of it back.
        text = prompt("Reason about a fox, streamed.")
        thought = "First, think about foxes."
        add_rule(text, reasoning=thought, run_ms=300)
        sdk = client()

        def ask(stream):
            return sdk.chat.completions.create(
                model="fast",
                messages=user(text),
                logprobs=True,
                stream=stream,
                extra_headers=key("whole"),
            )

        def read(chunks):
            choices = [c.choices[0] for c in chunks if c.choices]
            return (
                "".join(getattr(c.delta, "reasoning_content", None) or "" for c in choices),
                "".join(c.delta.content or "" for c in choices),
                [t.token for c in choices if c.logprobs for t in c.logprobs.content],
            )

        live = read(list(ask(True)))
        self.assertEqual(live[0], thought)
        self.assertIn(text, live[1])
        self.assertEqual("".join(live[2]), live[1], "every content chunk's logprobs")
        stored = ask(False)
        message = stored.choices[0].message
        self.assertEqual(getattr(message, "reasoning_content", None), live[0])
        self.assertEqual(message.content, live[1])
        self.assertEqual([t.token for t in stored.choices[0].logprobs.content], live[2])
        self.assertEqual(read(list(ask(True))), live, "replayed as a stream: all of it")
        self.assertEqual(len(upstream_calls(text)), 1)

    def test_a_number_beyond_the_exact_range_is_refused_not_rounded(self):
        # 10**30 and 10**30 + 1 are both the double 1e30: taken, they would share one
        # fingerprint, and the upstream would get a rounded seed.
        text = prompt("A seed too large.")
        for seed in (10**30, 10**30 + 1):
            with self.assertRaises(openai.BadRequestError) as raised:
                client().chat.completions.create(
                    model="fast", messages=user(text), seed=seed, extra_headers=key("seed")
                )
            self.assertEqual(raised.exception.code, "params-invalid")
            self.assertIn("/seed", raised.exception.message)
        self.assertEqual(upstream_calls(text), [])

    def test_other_v1_paths_answer_in_openais_shape(self):
        sdk = client()
        model = sdk.models.retrieve("fast")
        self.assertEqual((model.id, model.object), ("fast", "model"))
        with self.assertRaises(openai.NotFoundError) as raised:
            sdk.models.retrieve("gpt-9")
        self.assertEqual(raised.exception.code, "not-found")
        self.assertIn('"gpt-9"', raised.exception.message)
        with self.assertRaises(openai.NotFoundError) as raised:
            sdk.files.list()
        self.assertEqual(raised.exception.code, "not-found")
        self.assertIn("/v1/files", raised.exception.message)

    def test_a_stream_that_keeps_producing_outlives_attempt_timeout(self):
        # Model `brief`: attempt_timeout and stream_idle_timeout of 1 s. A stream producing
        # for 3 s is not cut; a stream silent for longer than 1 s is, its outcome unknown.
        text = prompt("A long fox story, streamed steadily for a while.")
        add_rule(text, run_ms=3000)
        sdk = client()
        stream = sdk.chat.completions.create(
            model="brief", messages=user(text), stream=True, extra_headers=key("long")
        )
        chunks = list(stream)
        self.assertIn(text, "".join(c.choices[0].delta.content or "" for c in chunks))
        self.assertEqual(chunks[-1].choices[0].finish_reason, "stop")
        silent = prompt("A fox that falls silent.")
        add_rule(silent, hang_after_ack=True)
        stream = sdk.chat.completions.create(
            model="brief", messages=user(silent), stream=True, extra_headers=key("silent")
        )
        with self.assertRaises(openai.APIError) as raised:
            for _ in stream:
                pass
        self.assertEqual(raised.exception.code, "attempt_failed")
        self.assertIn("unknown", raised.exception.message)

    def test_the_upstreams_account_errors_are_not_the_callers(self):
        # The upstream refuses onejob's own key: the caller's key is fine, so the SDK must
        # not raise its AuthenticationError; a 502 names the provider, not retried.
        text = prompt("The upstream refuses our key.")
        add_rule(text, http_status=401)
        sent = []
        http = openai.DefaultHttpxClient(event_hooks={"request": [sent.append]})
        with self.assertRaises(openai.APIStatusError) as raised:
            client(http_client=http).chat.completions.create(
                model="fast", messages=user(text), extra_headers=key("upstream-401")
            )
        error = raised.exception
        self.assertNotIsInstance(error, openai.AuthenticationError)
        self.assertEqual(error.status_code, 502)
        self.assertEqual(error.code, "upstream_auth_error")
        self.assertIn('"fake"', error.message)
        self.assertEqual(len(sent), 1)
        (call,) = upstream_calls(text)
        self.assertEqual(error.response.headers["x-request-id"], call["request_id"])

    def test_an_upstream_rate_limit_keeps_its_retry_after(self):
        text = prompt("A rate-limited fox.")
        add_rule(text, http_status=429, retry_after=7)
        with self.assertRaises(openai.RateLimitError) as raised:
            client().chat.completions.create(
                model="fast", messages=user(text), extra_headers=key("upstream-429")
            )
        error = raised.exception
        self.assertEqual(error.status_code, 429)
        self.assertEqual(error.response.headers["retry-after"], "7")
        self.assertEqual(len(upstream_calls(text)), 1)

    def test_the_upstreams_request_id_comes_through(self):
        text = prompt("Which request was this?")
        completion = client().chat.completions.create(
            model="fast", messages=user(text), extra_headers=key("request-id")
        )
        (call,) = upstream_calls(text)
        self.assertTrue(call["request_id"].startswith("req_"))
        self.assertEqual(completion._request_id, call["request_id"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
