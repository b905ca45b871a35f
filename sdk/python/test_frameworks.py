"""onejob's OpenAI-compatible gateway (DESIGN §9) driven by two frameworks that call it
through OpenAI's protocol without anyone here writing their client code: LangChain's
`ChatOpenAI` (the `langchain-openai` package) and `litellm.completion`.

Run by `cargo test` (crates/onejob/tests/api/sdk.rs) against the same server as
test_gateway.py (model `fast` on a fake provider), with the same environment:
ONEJOB_URL, ONEJOB_API_KEY and ONEJOB_FAKE_URL (the fake's /_fake control endpoints).

Each framework: a call (invoke / completion), a stream, a repeated key answered from the
one job (one upstream call), and a changed body under a used key raised as a 422.
"""

import os
import unittest

# litellm would fetch its model price list from the internet at import; the copy it ships
# is enough here.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402
import openai  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402

from test_gateway import API_KEY, BASE_URL, RUN, prompt, upstream_calls, user  # noqa: E402

litellm.telemetry = False


def key(case):
    return {"Idempotency-Key": f"frameworks:{case}:{RUN}"}


def chat(case, **options):
    """LangChain's ChatOpenAI against onejob, under the Idempotency-Key of `case`."""
    return ChatOpenAI(
        model="fast",
        base_url=BASE_URL,
        api_key=API_KEY,
        default_headers=key(case),
        max_retries=2,
        **options,
    )


def complete(case, text, **options):
    """litellm.completion against onejob, under the Idempotency-Key of `case`."""
    return litellm.completion(
        model="openai/fast",
        api_base=BASE_URL,
        api_key=API_KEY,
        messages=user(text),
        extra_headers=key(case),
        **options,
    )


class LangChain(unittest.TestCase):
    def test_invoke_answers_the_prompt(self):
        text = prompt("LangChain: describe a red fox.")
        message = chat("lc-invoke").invoke(text)
        self.assertIn(text, message.content)
        self.assertEqual(message.response_metadata["finish_reason"], "stop")

    def test_stream_yields_the_answer_in_pieces(self):
        text = prompt("LangChain: stream a fox.")
        pieces = [chunk.content for chunk in chat("lc-stream").stream(text)]
        self.assertGreater(len([p for p in pieces if p]), 2, pieces)
        self.assertIn(text, "".join(pieces))
        self.assertEqual(len(upstream_calls(text)), 1)

    def test_a_repeated_key_is_one_job(self):
        text = prompt("LangChain: name three foxes.")
        llm = chat("lc-replay")
        first, second = llm.invoke(text), llm.invoke(text)
        self.assertEqual(first.content, second.content)
        self.assertEqual(first.response_metadata["id"], second.response_metadata["id"])
        self.assertEqual(len(upstream_calls(text)), 1)

    def test_another_body_under_the_key_is_a_422(self):
        text = prompt("LangChain: a fox, warmly.")
        chat("lc-changed", temperature=0.2).invoke(text)
        with self.assertRaises(openai.UnprocessableEntityError) as raised:
            chat("lc-changed", temperature=0.9).invoke(text)
        self.assertEqual(raised.exception.code, "key-reused")
        self.assertIn("/temperature", raised.exception.message)
        self.assertEqual(len(upstream_calls(text)), 1)


class LiteLLM(unittest.TestCase):
    def test_completion_answers_the_prompt(self):
        text = prompt("litellm: describe a red fox.")
        response = complete("ll-completion", text)
        self.assertIn(text, response.choices[0].message.content)
        self.assertEqual(response.choices[0].finish_reason, "stop")

    def test_stream_yields_the_answer_in_pieces(self):
        text = prompt("litellm: stream a fox.")
        pieces = [
            chunk.choices[0].delta.content or ""
            for chunk in complete("ll-stream", text, stream=True)
            if chunk.choices
        ]
        self.assertGreater(len([p for p in pieces if p]), 2, pieces)
        self.assertIn(text, "".join(pieces))
        self.assertEqual(len(upstream_calls(text)), 1)

    def test_a_repeated_key_is_one_job(self):
        text = prompt("litellm: name three foxes.")
        first = complete("ll-replay", text)
        second = complete("ll-replay", text)
        self.assertEqual(first.id, second.id)
        self.assertEqual(
            first.choices[0].message.content, second.choices[0].message.content
        )
        self.assertEqual(len(upstream_calls(text)), 1)

    def test_another_body_under_the_key_is_a_422(self):
        text = prompt("litellm: a fox, warmly.")
        complete("ll-changed", text, temperature=0.2)
        # litellm maps an OpenAI-compatible upstream's 422 to its own BadRequestError,
        # keeping the answer it got.
        with self.assertRaises(litellm.BadRequestError) as raised:
            complete("ll-changed", text, temperature=0.9)
        error = raised.exception
        self.assertEqual(error.response.status_code, 422)
        self.assertEqual(error.body["code"], "key-reused")
        self.assertIn("/temperature", str(error))
        self.assertEqual(len(upstream_calls(text)), 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
