import os

from anthropic import Anthropic
from openai import OpenAI

url, key = os.environ.get("ONEJOB_URL", "http://127.0.0.1:8080"), os.environ["ONEJOB_API_KEY"]
openai, claude = OpenAI(base_url=url + "/v1", api_key=key), Anthropic(base_url=url, api_key=key)


def once(name):  # an Idempotency-Key naming the call, the same on every retry of it
    return {"extra_headers": {"Idempotency-Key": name}}


vectors = openai.embeddings.create(model="embed", input="A red fox.", **once("fox:embed"))
ask = [{"role": "user", "content": "A red fox?"}]
message = claude.messages.create(model="converse", max_tokens=64, messages=ask, **once("fox:ask"))
response = openai.responses.create(model="respond", input="A red fox?", **once("fox:respond"))
image = openai.images.generate(model="draw", prompt="A red fox.", **once("fox:draw"))
print(len(vectors.data[0].embedding), message.content[0].text, response.output_text,
      image.data[0].url, sep=" | ")
