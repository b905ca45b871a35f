import os

from openai import OpenAI

client = OpenAI(
    base_url=os.environ.get("ONEJOB_URL", "http://127.0.0.1:8080") + "/v1",
    api_key=os.environ["ONEJOB_API_KEY"],  # the key `onejob serve` printed
)
completion = client.chat.completions.create(
    model="fast",
    messages=[{"role": "user", "content": "Describe a red fox."}],
    extra_headers={"Idempotency-Key": "order-44:caption"},  # the same on every retry
)
print(completion.choices[0].message.content)
