"""onejob's gateway beyond chat (DESIGN §9 "Beyond chat") driven by the real SDKs: the
`openai` package's embeddings, and what each case names.

Run by `cargo test` (crates/onejob/tests/api/sdk.rs), which starts onejob serving the demo's
models beyond chat on a fake provider (`embed` at /v1/embeddings, …), with
`[gateway] wait = "2s"`, and passes:

  ONEJOB_URL       the server, http://127.0.0.1:PORT
  ONEJOB_API_KEY   a onejob API key
  ONEJOB_FAKE_URL  the fake provider's root, for its /_fake control endpoints (rules, and
                   GET /_fake/submissions: the upstream calls counted below)

Every case uses its own input and Idempotency-Key, so the cases do not see each other.
"""

import json
import os
import time
import unittest
import urllib.request
import uuid

import openai
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


if __name__ == "__main__":
    unittest.main(verbosity=2)
