import { createOpenAI } from "@ai-sdk/openai";
import { generateText, stepCountIs, tool } from "ai";
import { z } from "zod";

const openai = createOpenAI({
  baseURL: (process.env.ONEJOB_URL ?? "http://127.0.0.1:8080") + "/v1",
  apiKey: process.env.ONEJOB_API_KEY, // the key `onejob serve` printed
  headers: { "Idempotency-Key": "order-45:weigh-js" }, // one key for the whole run
});
const { text } = await generateText({
  model: openai.responses("respond"),
  providerOptions: { openai: { store: false } }, // onejob keeps no conversation state
  tools: {
    weigh_fox: tool({
      description: "Weighs the fox.",
      inputSchema: z.object({}),
      execute: async () => "the fox weighs 7 kg",
    }),
  },
  stopWhen: stepCountIs(3),
  prompt: "How heavy is the fox? call weigh_fox",
});
console.log(text);
