import OpenAI from "openai";

const client = new OpenAI({
  baseURL: `${process.env.ONEJOB_URL ?? "http://127.0.0.1:8080"}/v1`,
  apiKey: process.env.ONEJOB_API_KEY, // the key `onejob serve` printed
});
const completion = await client.chat.completions.create(
  { model: "fast", messages: [{ role: "user", content: "Describe a red fox." }] },
  { headers: { "Idempotency-Key": "order-44:caption" } }, // the same on every retry
);
console.log(completion.choices[0].message.content);
