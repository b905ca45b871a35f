"""onejob's gateway beyond chat (DESIGN §9 "Beyond chat") driven by the real SDKs: the
`openai` package's embeddings, Responses API (`responses.create` plain and streamed) and
image generation (`images.generate`, also from an async-task image provider), and
the `anthropic` package's Messages API (`messages.create` plain and streamed,
`messages.stream`).

Run by `cargo test` (crates/onejob/tests/api/sdk.rs), which starts onejob serving the demo's
models beyond chat on a fake provider (`embed` at /v1/embeddings, `converse` at
/v1/messages, `respond` at /v1/responses, `draw` at /v1/images/generations, and
`draw-polled` there from an async-task provider: the fake's task API), with
`[gateway] wait = "2s"`, and passes:

  ONEJOB_URL       the server, http://127.0.0.1:PORT
  ONEJOB_API_KEY   a onejob API key
  ONEJOB_FAKE_URL  the fake provider's root, for its /_fake control endpoints (rules, and
                   GET /_fake/submissions: the upstream calls counted below)

Every case uses its own input and Idempotency-Key, so the cases do not see each other.
"""

import base64
import json
import os
import time
import unittest
import urllib.request
import uuid

import anthropic
import openai
from anthropic import Anthropic
from openai import OpenAI


def required(name):
    value = os.environ.get(name)
    if not value:
        raise SystemExit(f"{name} is not set; this test is run by cargo test (tests/api/sdk.rs)")
    return value.rstrip("/")


ROOT = required("ONEJOB_URL")
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


def upstream_calls(endpoint, text):
    """The requests the upstream received at `endpoint` whose input mentions `text`."""
    seen = fake("/_fake/submissions")
    return [
        record
        for record in seen["requests"]
        if record["endpoint"] == endpoint and text in json.dumps(record["input"])
    ]


def unique(text):
    """An input no other case (or earlier run against the same fake) sends."""
    return f"{text} [{RUN}]"


def key(case):
    return {"Idempotency-Key": f"py-beyond:{case}:{RUN}"}


def openai_client(**options):
    return OpenAI(base_url=ROOT + "/v1", api_key=API_KEY, **options)


def anthropic_client(**options):
    # Anthropic's SDK sends its key as x-api-key, to {base_url}/v1/messages.
    return Anthropic(base_url=ROOT, api_key=API_KEY, **options)


def asked(text):
    return {"model": "converse", "max_tokens": 64, "messages": [{"role": "user", "content": text}]}


class Embeddings(unittest.TestCase):
    def test_embeddings_create_returns_the_upstreams_vectors_and_usage(self):
        text = unique("A red fox.")
        answer = openai_client().embeddings.create(
            model="embed", input=[text, "a grey hen"], extra_headers=key("embed")
        )
        self.assertEqual(answer.object, "list")
        self.assertEqual([e.index for e in answer.data], [0, 1])
        self.assertEqual(len(answer.data[0].embedding), 8)
        self.assertTrue(all(isinstance(x, float) for x in answer.data[0].embedding))
        self.assertGreater(answer.usage.prompt_tokens, 0)
        # The SDK asks for base64 by itself and decodes it: the format passed through.
        [call] = upstream_calls("embeddings", text)
        self.assertEqual(call["request"]["encoding_format"], "base64")

    def test_floats_asked_for_are_floats(self):
        text = unique("A fox in floats.")
        answer = openai_client().embeddings.create(
            model="embed", input=text, encoding_format="float", extra_headers=key("float")
        )
        self.assertEqual(len(answer.data[0].embedding), 8)
        [call] = upstream_calls("embeddings", text)
        self.assertEqual(call["request"]["encoding_format"], "float")

    def test_the_same_call_twice_under_one_key_is_one_upstream_call(self):
        text = unique("Embed a fox twice.")
        create = openai_client().embeddings.with_raw_response.create
        first = create(model="embed", input=text, extra_headers=key("twice"))
        second = create(model="embed", input=text, extra_headers=key("twice"))
        self.assertIsNone(first.headers.get("idempotent-replayed"))
        self.assertEqual(second.headers["idempotent-replayed"], "true")
        self.assertEqual(first.headers["onejob-job-id"], second.headers["onejob-job-id"])
        self.assertEqual(first.parse().model_dump(), second.parse().model_dump())
        self.assertEqual(len(upstream_calls("embeddings", text)), 1)

    def test_another_input_under_the_key_is_the_sdks_422(self):
        text = unique("Embed a fox, then a hen.")
        sdk = openai_client()
        sdk.embeddings.create(model="embed", input=text, extra_headers=key("changed"))
        with self.assertRaises(openai.UnprocessableEntityError) as raised:
            sdk.embeddings.create(
                model="embed", input=text + " and a hen", extra_headers=key("changed")
            )
        self.assertEqual(raised.exception.code, "key-reused")
        self.assertEqual(raised.exception.body["changed"], ["/input"])
        self.assertEqual(len(upstream_calls("embeddings", text)), 1)

    def test_an_sdk_timeout_retries_into_the_same_job(self):
        # The upstream takes 2.5 s; the SDK gives up on each request after 1 s and retries
        # it with the same headers: every retry attaches to the one job.
        text = unique("A slow fox to embed.")
        add_rule(text, run_ms=2500)
        started = time.monotonic()
        raw = openai_client(timeout=1.0, max_retries=6).embeddings.with_raw_response.create(
            model="embed", input=text, extra_headers=key("timeout")
        )
        self.assertEqual(len(raw.parse().data[0].embedding), 8)
        self.assertGreaterEqual(raw.retries_taken, 1, "the SDK timed out and retried")
        self.assertGreaterEqual(time.monotonic() - started, 2.5)
        self.assertEqual(raw.headers["idempotent-replayed"], "true")
        self.assertEqual(len(upstream_calls("embeddings", text)), 1)


class Messages(unittest.TestCase):
    def test_messages_create_returns_the_upstreams_message(self):
        text = unique("Describe a red fox.")
        message = anthropic_client().messages.create(
            **asked(text), extra_headers=key("messages-plain")
        )
        self.assertEqual((message.type, message.role), ("message", "assistant"))
        self.assertEqual(message.content[0].type, "text")
        self.assertIn(text, message.content[0].text)
        self.assertEqual(message.stop_reason, "end_turn")
        self.assertGreater(message.usage.output_tokens, 0)
        [call] = upstream_calls("messages", text)
        self.assertEqual(call["request"]["max_tokens"], 64)

    def test_the_same_call_twice_under_one_key_is_one_upstream_call(self):
        text = unique("A fox, asked twice.")
        create = anthropic_client().messages.with_raw_response.create
        first = create(**asked(text), extra_headers=key("messages-twice"))
        second = create(**asked(text), extra_headers=key("messages-twice"))
        self.assertIsNone(first.headers.get("idempotent-replayed"))
        self.assertEqual(second.headers["idempotent-replayed"], "true")
        self.assertEqual(first.headers["onejob-job-id"], second.headers["onejob-job-id"])
        self.assertEqual(first.parse().model_dump(), second.parse().model_dump())
        self.assertEqual(len(upstream_calls("messages", text)), 1)

    def test_another_body_under_the_key_is_the_sdks_422_in_anthropics_shape(self):
        text = unique("A fox, then a longer fox.")
        sdk = anthropic_client()
        sdk.messages.create(**asked(text), extra_headers=key("messages-changed"))
        with self.assertRaises(anthropic.UnprocessableEntityError) as raised:
            sdk.messages.create(
                **{**asked(text), "max_tokens": 128}, extra_headers=key("messages-changed")
            )
        body = raised.exception.body
        self.assertEqual(body["type"], "error")
        self.assertEqual(body["error"]["code"], "key-reused")
        self.assertEqual(body["error"]["changed"], ["/max_tokens"])
        self.assertEqual(len(upstream_calls("messages", text)), 1)

    def test_a_stream_reads_message_start_to_message_stop(self):
        text = unique("Stream a red fox.")
        add_rule(text, run_ms=300)
        stream = anthropic_client().messages.create(
            **asked(text), stream=True, extra_headers=key("messages-stream")
        )
        events = list(stream)
        types = [event.type for event in events]
        self.assertEqual((types[0], types[-1]), ("message_start", "message_stop"))
        streamed = "".join(
            event.delta.text for event in events if event.type == "content_block_delta"
        )
        self.assertIn(text, streamed)
        self.assertEqual(len(upstream_calls("messages", text)), 1)

    def test_messages_stream_gives_the_text_and_the_final_message(self):
        text = unique("Stream a fox with the helper.")
        add_rule(text, run_ms=300)
        helper = anthropic_client().messages.stream
        with helper(**asked(text), extra_headers=key("messages-helper")) as stream:
            streamed = "".join(stream.text_stream)
            final = stream.get_final_message()
        self.assertIn(text, streamed)
        self.assertEqual(final.content[0].text, streamed)
        self.assertEqual(final.stop_reason, "end_turn")
        # Asked again under the key after it finished: the stored message, not another call.
        again = anthropic_client().messages.create(
            **asked(text), extra_headers=key("messages-helper")
        )
        self.assertEqual(again.content[0].text, streamed)
        self.assertEqual(len(upstream_calls("messages", text)), 1)

    def test_tools_reach_the_upstream_and_a_tool_use_comes_back(self):
        text = unique("What is the weather in Oslo?")
        tools = [
            {
                "name": "weather",
                "description": "The weather in a city",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
            }
        ]
        message = anthropic_client().messages.create(
            **asked(text),
            tools=tools,
            tool_choice={"type": "tool", "name": "weather"},
            extra_headers=key("messages-tools"),
        )
        self.assertEqual(message.stop_reason, "tool_use")
        block = message.content[0]
        self.assertEqual((block.type, block.name), ("tool_use", "weather"))
        [call] = upstream_calls("messages", text)
        self.assertEqual(call["request"]["tools"], tools)

    def test_still_running_is_the_sdks_409_which_its_retries_attach_to(self):
        # The server waits 2 s ([gateway] wait), the upstream takes 3 s: without retries the
        # SDK raises the 409 (Retry-After: 1); with them it asks again and gets the answer.
        text = unique("A fox that takes its time.")
        add_rule(text, run_ms=3000)
        with self.assertRaises(anthropic.ConflictError) as raised:
            anthropic_client(max_retries=0).messages.create(
                **asked(text), extra_headers=key("messages-running")
            )
        error = raised.exception
        self.assertEqual(error.response.headers["retry-after"], "1")
        self.assertEqual(error.body["error"]["state"], "running")
        raw = anthropic_client().messages.with_raw_response.create(
            **asked(text), extra_headers=key("messages-running")
        )
        self.assertEqual(raw.headers["onejob-job-id"], error.body["error"]["job_id"])
        self.assertIn(text, raw.parse().content[0].text)
        self.assertEqual(len(upstream_calls("messages", text)), 1)

    def test_an_sdk_timeout_retries_into_the_same_job(self):
        text = unique("A slow fox for Claude.")
        add_rule(text, run_ms=2500)
        started = time.monotonic()
        raw = anthropic_client(timeout=1.0, max_retries=6).messages.with_raw_response.create(
            **asked(text), extra_headers=key("messages-timeout")
        )
        self.assertIn(text, raw.parse().content[0].text)
        self.assertGreaterEqual(raw.retries_taken, 1, "the SDK timed out and retried")
        self.assertGreaterEqual(time.monotonic() - started, 2.5)
        self.assertEqual(raw.headers["idempotent-replayed"], "true")
        self.assertEqual(len(upstream_calls("messages", text)), 1)


class Responses(unittest.TestCase):
    def test_responses_create_returns_the_upstreams_response(self):
        text = unique("Describe a red fox.")
        response = openai_client().responses.create(
            model="respond", input=text, extra_headers=key("responses-plain")
        )
        self.assertEqual((response.object, response.status), ("response", "completed"))
        self.assertIn(text, response.output_text)
        self.assertGreater(response.usage.total_tokens, 0)
        [call] = upstream_calls("responses", text)
        self.assertEqual(call["request"]["input"], text)

    def test_a_stream_reads_typed_events_to_response_completed(self):
        text = unique("Stream a red fox.")
        add_rule(text, run_ms=300)
        stream = openai_client().responses.create(
            model="respond", input=text, stream=True, extra_headers=key("responses-stream")
        )
        events = list(stream)
        types = [event.type for event in events]
        self.assertEqual((types[0], types[-1]), ("response.created", "response.completed"))
        self.assertEqual([e.sequence_number for e in events], list(range(len(events))))
        streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        self.assertIn(text, streamed)
        self.assertEqual(events[-1].response.output_text, streamed)
        self.assertEqual(len(upstream_calls("responses", text)), 1)

    def test_the_same_call_twice_under_one_key_is_one_upstream_call(self):
        text = unique("A fox, asked twice.")
        create = openai_client().responses.with_raw_response.create
        first = create(model="respond", input=text, extra_headers=key("responses-twice"))
        second = create(model="respond", input=text, extra_headers=key("responses-twice"))
        self.assertIsNone(first.headers.get("idempotent-replayed"))
        self.assertEqual(second.headers["idempotent-replayed"], "true")
        self.assertEqual(first.parse().model_dump(), second.parse().model_dump())
        self.assertEqual(len(upstream_calls("responses", text)), 1)

    def test_conversation_state_is_refused_with_a_clear_error(self):
        text = unique("A fox to remember.")
        with self.assertRaises(openai.BadRequestError) as raised:
            openai_client().responses.create(
                model="respond", input=text, store=True, extra_headers=key("responses-store")
            )
        self.assertIn("does not keep conversation state", raised.exception.message)
        self.assertEqual(upstream_calls("responses", text), [])

    def test_an_sdk_timeout_retries_into_the_same_job(self):
        text = unique("A slow fox to answer.")
        add_rule(text, run_ms=2500)
        started = time.monotonic()
        raw = openai_client(timeout=1.0, max_retries=6).responses.with_raw_response.create(
            model="respond", input=text, extra_headers=key("responses-timeout")
        )
        self.assertIn(text, raw.parse().output_text)
        self.assertGreaterEqual(raw.retries_taken, 1, "the SDK timed out and retried")
        self.assertGreaterEqual(time.monotonic() - started, 2.5)
        self.assertEqual(raw.headers["idempotent-replayed"], "true")
        self.assertEqual(len(upstream_calls("responses", text)), 1)


class Images(unittest.TestCase):
    def test_images_generate_returns_the_upstreams_image_urls(self):
        text = unique("A red fox in the snow.")
        images = openai_client().images.generate(
            model="draw", prompt=text, n=2, extra_headers=key("images-plain")
        )
        self.assertEqual(len(images.data), 2)
        self.assertTrue(images.data[0].url.startswith("https://"), images.data[0].url)
        self.assertGreater(images.created, 0)

    def test_b64_json_asked_is_the_image_itself(self):
        text = unique("A red fox, inline.")
        images = openai_client().images.generate(
            model="draw", prompt=text, response_format="b64_json", extra_headers=key("images-b64")
        )
        self.assertTrue(base64.b64decode(images.data[0].b64_json).startswith(b"\x89PNG"))
        self.assertIsNone(images.data[0].url)

    def test_an_async_task_provider_answers_its_tasks_image(self):
        text = unique("A red fox, polled.")
        images = openai_client().images.generate(
            model="draw-polled", prompt=text, extra_headers=key("images-polled")
        )
        self.assertTrue(
            images.data[0].url.startswith("https://fake.invalid/images/task_"), images.data[0].url
        )
        [task] = [
            r for r in fake("/_fake/submissions")["requests"]
            if r["endpoint"] == "tasks" and text in json.dumps(r["input"])
        ]
        self.assertEqual(task["request"]["prompt"], text, "the request went to the task API")

    def test_the_same_call_twice_under_one_key_is_one_upstream_call(self):
        text = unique("A fox drawn twice.")
        generate = openai_client().images.with_raw_response.generate
        first = generate(model="draw", prompt=text, extra_headers=key("images-twice"))
        second = generate(model="draw", prompt=text, extra_headers=key("images-twice"))
        self.assertEqual(second.headers["idempotent-replayed"], "true")
        self.assertEqual(first.parse().model_dump(), second.parse().model_dump())
        self.assertEqual(len(upstream_calls("images", text)), 1)

    def test_an_sdk_timeout_retries_into_the_same_job(self):
        text = unique("A slow fox to draw.")
        add_rule(text, run_ms=2500)
        started = time.monotonic()
        raw = openai_client(timeout=1.0, max_retries=6).images.with_raw_response.generate(
            model="draw", prompt=text, extra_headers=key("images-timeout")
        )
        self.assertTrue(raw.parse().data[0].url.startswith("https://"))
        self.assertGreaterEqual(raw.retries_taken, 1, "the SDK timed out and retried")
        self.assertGreaterEqual(time.monotonic() - started, 2.5)
        self.assertEqual(raw.headers["idempotent-replayed"], "true")
        self.assertEqual(len(upstream_calls("images", text)), 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
