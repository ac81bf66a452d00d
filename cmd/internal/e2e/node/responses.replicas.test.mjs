// Background responses across two gateway replicas sharing one Redis:
// TestOpenAINodeSDKReplicas starts them (each with its own engine serving
// the same models) and runs this file with OPENAI_BASE_URL (replica A)
// and OPENAI_BASE_URL_B (replica B).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { cutAfter, resumeText } from './responses.helpers.mjs';

// OPENAI_API_KEY is the tests' key; OTHER_API_KEY another one.
const a = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, maxRetries: 0 });
const b = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL_B, maxRetries: 0 });
const stranger = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL_B, apiKey: process.env.OTHER_API_KEY, maxRetries: 0 });
assert.ok(process.env.OPENAI_BASE_URL_B && process.env.OTHER_API_KEY, 'OPENAI_BASE_URL_B and OTHER_API_KEY must be set');
const textModel = process.env.STREAMGATE_TEXT_MODEL || 'echo';
const greedy = { model: textModel, input: 'Once upon a time', temperature: 0, max_output_tokens: 100 };

test('cut on one replica, resumed on the other', async () => {
  const whole = (await a.responses.create({ ...greedy, store: false })).output[0].content[0].text;
  const cut = await cutAfter(a, greedy, 5);
  assert.equal(cut.text + await resumeText(b, cut.id, cut.last), whole);
  const stored = await b.responses.retrieve(cut.id);
  assert.equal(stored.output[0].content[0].text, whole);
});

test('previous_response_id across replicas', async () => {
  const first = await a.responses.create({ model: 'echo', input: 'hello world' });
  const next = await b.responses.create({ model: 'echo', input: 'more', previous_response_id: first.id });
  assert.equal(next.output_text, 'user: hello world assistant: user: hello world assistant: user: more assistant:');
});

test('a response is its API key\'s only', async () => {
  const mine = await a.responses.create({ model: 'echo', input: 'hello world', background: true });
  for (const attempt of [
    () => stranger.responses.retrieve(mine.id),
    () => stranger.responses.retrieve(mine.id, { stream: true, starting_after: 0 }),
    () => stranger.responses.inputItems.list(mine.id),
    () => stranger.responses.cancel(mine.id),
    () => stranger.responses.delete(mine.id),
    () => stranger.responses.create({ model: 'echo', input: 'x', previous_response_id: mine.id }),
  ]) {
    await assert.rejects(attempt(), (err) => {
      assert.ok(err instanceof OpenAI.NotFoundError, `got ${err}`);
      return true;
    });
  }
  assert.equal((await b.responses.retrieve(mine.id)).id, mine.id);
});

test('cancel on the other replica', async () => {
  // echo_slow takes 20ms a word: 5000 words only end by cancellation.
  const words = Array.from({ length: 5000 }, (_, i) => `w${i}`).join(' ');
  const long = await a.responses.create({ model: 'echo_slow', input: words, background: true });
  const cancelled = await b.responses.cancel(long.id);
  assert.equal(cancelled.status, 'cancelled');
  assert.equal((await a.responses.retrieve(long.id)).status, 'cancelled');
});
