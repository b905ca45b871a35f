"""One Idempotency-Key for a whole agent run (DESIGN §9 "Agent runs", issue 45), driven by
OpenAI's Agents SDK (the `openai-agents` package): `Runner.run` of an agent with one
function tool, its client sending the same `Idempotency-Key` on every model call of the
run, as agent code does (`AsyncOpenAI(default_headers={"Idempotency-Key": run_key})`).

Run by `cargo test` (crates/onejob/tests/api/sdk.rs) against onejob serving the demo's
models `respond` (at /v1/responses) and `fast` (at /v1/chat/completions) on a fake
provider, with the environment of test_gateway.py: ONEJOB_URL, ONEJOB_API_KEY and
ONEJOB_FAKE_URL (the fake's /_fake control endpoints). The fake answers like a model in a tool loop: the user
input says `call weigh_fox`, so the first model call asks for the tool; the conversation
then ends with the tool's result, and the second answers text naming it.

Each model, the SDK's default Responses model (model `respond`, through a run's
`OpenAIProvider`) and `OpenAIChatCompletionsModel` (model `fast`), has three cases:

  * a run succeeds under one key, with two model calls (two upstream calls) and the tool
    really run in between;
  * the same run again under the same key makes no upstream call and ends with the same
    output, every model response replayed;
  * a run whose process dies in the tool, after the first model call (a child process that
    calls os._exit), run again here under its key: only the remaining model call goes
    upstream, and the output is an uninterrupted run's.

Nothing needs setting beyond the key: the Agents SDK sends the whole conversation on every
model call and leaves `store` and `previous_response_id` out unless told to send them
(`ModelSettings(store=True)`, `Runner.run(previous_response_id=…)`,
`auto_previous_response_id=True`, `conversation_id=…`: onejob's stateless gateway
refuses those); on chat it sends `store: true` only to OpenAI's own base_url.
"""

import asyncio
import json
import logging
import os
import sys
import unittest

from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIProvider,
    RunConfig,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from test_gateway import API_KEY, BASE_URL, RUN, fake

# Tracing would send the run's spans to OpenAI.
set_tracing_disabled(True)
# IsolatedAsyncioTestCase runs in asyncio's debug mode, which logs every step of the loop
# slower than 0.1 s (the SDK's first imports, the fake's control calls made inline).
logging.getLogger("asyncio").setLevel(logging.ERROR)

TOOL = "weigh_fox"
WEIGHT = "the fox weighs 7 kg"
# What the child process exits with, in its tool, once the first model call asked for it.
DIED = 17


def agent_run(api, client, tool):
    """The agent and run config of a run through `client`, on the `api` model."""
    if api == "chat":
        model = OpenAIChatCompletionsModel(model="fast", openai_client=client)
        config = RunConfig()
    else:
        # The default: a model name, served by the Responses API of the run's provider.
        model = "respond"
        config = RunConfig(model_provider=OpenAIProvider(openai_client=client))
    agent = Agent(
        name="Fox keeper",
        instructions="You keep foxes. Use your tools when asked to.",
        model=model,
        tools=[tool],
    )
    return agent, config


def weighing(calls):
    """The agent's one function tool, counting its calls in `calls`."""

    @function_tool(name_override=TOOL)
    def weigh_fox() -> str:
        """Weighs the fox."""
        calls.append(TOOL)
        return WEIGHT

    return weigh_fox


def dying():
    """The tool of a process that dies in it: the first model call already asked for it."""

    @function_tool(name_override=TOOL)
    def weigh_fox() -> str:
        """Weighs the fox."""
        sys.stdout.flush()
        os._exit(DIED)

    return weigh_fox


async def run(api, run_key, text, tool):
    """A run of the agent on the `api` model under `run_key`, its user input `text`."""
    client = AsyncOpenAI(
        base_url=BASE_URL,
        api_key=API_KEY,
        default_headers={"Idempotency-Key": run_key},
    )
    try:
        agent, config = agent_run(api, client, tool)
        return await Runner.run(agent, text, run_config=config)
    finally:
        await client.close()


async def run_dying(api, run_key, text):
    """The same run in a child process that dies in the tool; its exit status."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        os.path.abspath(__file__),
        "die-in-the-tool",
        api,
        run_key,
        text,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    printed, _ = await asyncio.wait_for(child.communicate(), timeout=120)
    return child.returncode, printed.decode(errors="replace")


def upstream_calls(api, text):
    """The requests the upstream received at the `api` endpoint whose input holds `text`."""
    seen = fake("/_fake/submissions")
    return [
        record
        for record in seen["requests"]
        if record["endpoint"] == api and text in json.dumps(record["input"])
    ]


def unique(case, api):
    """A user input naming the tool that no other case (or earlier run) sends."""
    return f"Please call {TOOL} for {case} on {api} [{RUN}]"


def run_key(case, api):
    return f"agents:{case}:{api}:{RUN}"


class AgentRun:
    """The cases, for the model of `api`."""

    api = None

    async def test_a_run_is_two_model_calls_around_the_tool_under_one_key(self):
        text = unique("one run", self.api)
        calls = []
        result = await run(self.api, run_key("one", self.api), text, weighing(calls))
        self.assertEqual(calls, [TOOL], "the tool ran once")
        self.assertEqual(len(result.raw_responses), 2, "two model calls")
        self.assertIn(WEIGHT, result.final_output)
        self.assertIn(text, result.final_output)
        sent = upstream_calls(self.api, text)
        self.assertEqual(len(sent), 2, "each model call went upstream once")
        self.assertIn(WEIGHT, json.dumps(sent[1]["input"]), "the second one has the result")

    async def test_the_same_run_again_under_its_key_replays_every_step(self):
        text = unique("run twice", self.api)
        key = run_key("twice", self.api)
        first_calls, again_calls = [], []
        first = await run(self.api, key, text, weighing(first_calls))
        self.assertEqual(len(upstream_calls(self.api, text)), 2)
        again = await run(self.api, key, text, weighing(again_calls))
        self.assertEqual(len(upstream_calls(self.api, text)), 2, "no upstream call again")
        self.assertEqual(again.final_output, first.final_output)
        self.assertEqual(
            [r.response_id for r in again.raw_responses],
            [r.response_id for r in first.raw_responses],
            "every model response replayed",
        )
        # The tool is the agent's own code: a re-run runs it again (make it idempotent).
        self.assertEqual((first_calls, again_calls), ([TOOL], [TOOL]))

    async def test_a_run_that_died_in_its_tool_goes_on_from_the_unanswered_step(self):
        text = unique("died", self.api)
        key = run_key("died", self.api)
        status, printed = await run_dying(self.api, key, text)
        self.assertEqual(status, DIED, printed)
        self.assertEqual(len(upstream_calls(self.api, text)), 1, "it died after step 1")
        calls = []
        resumed = await run(self.api, key, text, weighing(calls))
        self.assertEqual(
            len(upstream_calls(self.api, text)), 2, "only the remaining step went upstream"
        )
        self.assertEqual(calls, [TOOL])
        self.assertEqual(len(resumed.raw_responses), 2)
        uninterrupted = await run(
            self.api, run_key("died-baseline", self.api), text, weighing([])
        )
        self.assertEqual(resumed.final_output, uninterrupted.final_output)
        self.assertIn(WEIGHT, resumed.final_output)


class ResponsesModel(AgentRun, unittest.IsolatedAsyncioTestCase):
    api = "responses"


class ChatCompletionsModel(AgentRun, unittest.IsolatedAsyncioTestCase):
    api = "chat"


def die_in_the_tool(api, key, text):
    """The child process of the third case: runs the agent until its tool kills it."""
    asyncio.run(run(api, key, text, dying()))
    raise SystemExit("the run ended without calling its tool")


if __name__ == "__main__":
    if sys.argv[1:2] == ["die-in-the-tool"]:
        die_in_the_tool(*sys.argv[2:5])
    else:
        unittest.main(verbosity=2)
