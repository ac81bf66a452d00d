// The official openai SDK streams a chat from a GGUF model (gguf_test.go
// writes the file and starts `streamgate serve --model FILE.gguf`).
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

const client = new OpenAI();
const model = process.env.STREAMGATE_GGUF_MODEL;
const messages = JSON.parse(process.env.STREAMGATE_GGUF_MESSAGES);
const promptTokens = Number(process.env.STREAMGATE_GGUF_PROMPT_TOKENS);
const maxTokens = Number(process.env.STREAMGATE_GGUF_MAX_TOKENS);
const want = process.env.STREAMGATE_GGUF_CONTENT;

test("a GGUF model streams a chat through the openai SDK", async () => {
  const models = await client.models.list();
  assert.ok(models.data.some((m) => m.id === model), `/v1/models lists ${model}`);
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: maxTokens, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let content = "", pieces = 0, finish, usage;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta?.content) { content += c.delta.content; pieces++; }
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(pieces >= 2, `the answer arrives in pieces (${pieces})`);
  assert.equal(content, want);
  assert.equal(finish, "length");
  assert.deepEqual(
    { prompt: usage.prompt_tokens, completion: usage.completion_tokens, total: usage.total_tokens },
    { prompt: promptTokens, completion: maxTokens, total: promptTokens + maxTokens });
});
