import asyncio
import os

from agents import Agent, OpenAIProvider, RunConfig, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

set_tracing_disabled(True)  # tracing would send the run's spans to OpenAI


@function_tool
def weigh_fox() -> str:
    """Weighs the fox."""
    return "the fox weighs 7 kg"


async def main():
    client = AsyncOpenAI(
        base_url=os.environ.get("ONEJOB_URL", "http://127.0.0.1:8080") + "/v1",
        api_key=os.environ["ONEJOB_API_KEY"],  # the key `onejob serve` printed
        default_headers={"Idempotency-Key": "order-45:weigh"},  # one key for the whole run
    )
    agent = Agent(name="Fox keeper", instructions="Use your tools.", model="respond",
                  tools=[weigh_fox])
    config = RunConfig(model_provider=OpenAIProvider(openai_client=client))
    result = await Runner.run(agent, "How heavy is the fox? call weigh_fox", run_config=config)
    print(result.final_output)


asyncio.run(main())
