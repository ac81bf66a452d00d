// End-to-end tests of streamgate's Responses API (POST /v1/responses) and
// its OpenAI conventions with the official openai SDK and the Vercel AI
// SDK. TestOpenAINodeSDK starts engine + upstream + gateway and runs this
// file with OPENAI_BASE_URL set.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
import { streamText, generateText } from 'ai';
import { cutAfter, resumeText } from './responses.helpers.mjs';

const baseURL = process.env.OPENAI_BASE_URL;
assert.ok(baseURL, 'OPENAI_BASE_URL must be set (…/v1)');
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0 });
// The default chat template renders "user: hello world\nassistant:", and
// the echo model streams back its words.
const echoed = 'user: hello world assistant:';

const opening = ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added'];
const closing = ['response.output_text.done', 'response.content_part.done', 'response.output_item.done'];

// checkEvents checks the order and sequence numbers of a Responses stream
// and returns its text.
function checkEvents(events, terminal) {
  events.forEach((e, i) => assert.equal(e.sequence_number, i, `event ${i} (${e.type})`));
  const types = events.map((e) => e.type).filter((t) => t !== 'response.output_text.delta');
  assert.deepEqual(types, [...opening, ...closing, terminal]);
  return events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
}

test('responses.create', async () => {
  const r = await client.responses.create({ model: 'echo', input: 'hello world', metadata: { k: 'v' } });
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp-/);
  assert.equal(r.status, 'completed');
  assert.equal(r.output_text, echoed); // the SDK's own helper over output
  assert.equal(r.output.length, 1);
  assert.equal(r.output[0].type, 'message');
  assert.equal(r.output[0].role, 'assistant');
  assert.deepEqual(r.metadata, { k: 'v' });
  assert.equal(r.usage.input_tokens, 4);
  assert.equal(r.usage.output_tokens, 4);
  assert.equal(r.usage.total_tokens, 8);
  assert.equal(r.incomplete_details, null);
});

test('responses.create with a token limit is incomplete', async () => {
  const r = await client.responses.create({ model: 'echo', input: 'hello world', max_output_tokens: 2 });
  assert.equal(r.status, 'incomplete');
  assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
  assert.equal(r.output_text, 'user: hello');
  assert.equal(r.usage.output_tokens, 2);
});

test('responses.create streamed', async () => {
  const stream = await client.responses.create({
    model: 'echo', stream: true, instructions: 'be brief',
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'hello world' }] }],
  });
  const events = [];
  for await (const e of stream) events.push(e);
  const text = checkEvents(events, 'response.completed');
  assert.equal(text, 'system: be brief user: hello world assistant:');
  const done = events.at(-1).response;
  assert.equal(done.status, 'completed');
  assert.equal(done.output[0].content[0].text, text);
  assert.deepEqual(
    [done.usage.input_tokens, done.usage.output_tokens, done.usage.total_tokens], [7, 7, 14]);
  assert.equal(events[0].response.id, done.id);
  assert.equal(events[0].response.status, 'in_progress');
});

test('responses.stream helpers', async () => {
  const deltas = [];
  const runner = client.responses.stream({ model: 'echo', input: 'hello world' })
    .on('response.output_text.delta', (e) => deltas.push(e.delta));
  const final = await runner.finalResponse();
  assert.equal(final.output[0].content[0].text, echoed);
  assert.equal(deltas.join(''), echoed);
  assert.equal(final.status, 'completed');
});

test('responses the model cannot honour are refused naming the field', async () => {
  for (const [extra, param] of [
    [{ tools: [{ type: 'web_search' }] }, 'tools[0].type'],
    [{ tools: [{ type: 'function', name: 'f', parameters: {} }], tool_choice: 'required' }, 'tool_choice'],
    [{ text: { format: { type: 'json_object' } } }, 'text.format'],
    [{ reasoning: { effort: 'high' } }, 'reasoning'],
  ]) {
    await assert.rejects(client.responses.create({ model: 'echo', input: 'x', ...extra }), (err) => {
      assert.ok(err instanceof OpenAI.BadRequestError, `got ${err}`);
      assert.equal(err.param, param);
      assert.match(err.message, new RegExp(param.replace(/[.[\]]/g, '\\$&')));
      return true;
    });
  }
});

test('x-request-id on every answer', async () => {
  const { data, response, request_id: id } = await client.responses.create({ model: 'echo', input: 'x' }).withResponse();
  assert.equal(data.status, 'completed');
  assert.match(id, /^req-/);
  assert.equal(response.headers.get('x-request-id'), id);
  assert.match(response.headers.get('openai-processing-ms'), /^\d+$/);
  await assert.rejects(client.responses.create({ model: 'nope', input: 'x' }), (err) => {
    assert.ok(err instanceof OpenAI.NotFoundError, `got ${err}`);
    assert.match(err.requestID, /^req-/);
    return true;
  });
});

test('unknown routes are OpenAI errors the SDK understands', async () => {
  await assert.rejects(client.get('/no/such/route'), (err) => {
    assert.ok(err instanceof OpenAI.NotFoundError, `got ${err}`);
    assert.equal(err.status, 404);
    assert.equal(err.code, 'not_found');
    assert.equal(err.message, '404 no route for GET /v1/no/such/route');
    return true;
  });
  await assert.rejects(client.delete('/chat/completions'), (err) => {
    assert.equal(err.status, 405);
    assert.equal(err.code, 'method_not_allowed');
    assert.match(err.message, /method DELETE is not allowed on \/v1\/chat\/completions/);
    return true;
  });
});

test('Vercel AI SDK: createOpenAI({baseURL})(model) streams text', async () => {
  const openai = createOpenAI({ baseURL, apiKey: 'unused' });
  const result = streamText({ model: openai('echo'), prompt: 'hello world', maxRetries: 0 });
  let text = '';
  for await (const t of result.textStream) text += t;
  assert.equal(text, echoed);
  assert.equal(await result.finishReason, 'stop');
  const usage = await result.usage;
  assert.equal(usage.inputTokens, 4);
  assert.equal(usage.outputTokens, 4);

  const r = await generateText({ model: openai('echo'), system: 'be brief', prompt: 'hello world', maxRetries: 0 });
  assert.equal(r.text, 'system: be brief user: hello world assistant:');
});

// waitStatus polls a stored response until its status is one of want.
async function waitStatus(id, ...want) {
  for (let i = 0; ; i++) {
    const r = await client.responses.retrieve(id);
    if (want.includes(r.status)) return r;
    assert.ok(i < 3000, `response ${id} stayed ${r.status}`);
    await new Promise((res) => setTimeout(res, 10));
  }
}

test('previous_response_id continues a stored conversation', async () => {
  const first = await client.responses.create({ model: 'echo', input: 'hello world' });
  const again = await client.responses.retrieve(first.id);
  assert.equal(again.status, 'completed');
  assert.equal(again.output[0].content[0].text, echoed);
  const items = [];
  for await (const item of client.responses.inputItems.list(first.id)) items.push(item);
  assert.deepEqual(items.map((i) => [i.role, i.content[0].text]), [['user', 'hello world']]);
  const next = await client.responses.create({ model: 'echo', input: 'more', previous_response_id: first.id });
  assert.equal(next.output_text, `user: hello world assistant: ${echoed} user: more assistant:`);
  assert.equal(next.previous_response_id, first.id);
  const deleted = await client.responses.delete(first.id);
  assert.deepEqual(deleted, { id: first.id, object: 'response', deleted: true });
  await assert.rejects(client.responses.retrieve(first.id), OpenAI.NotFoundError);
});

test('background response and cancel', async () => {
  const bg = await client.responses.create({ model: 'echo', input: 'hello world', background: true });
  assert.equal(bg.status, 'queued');
  assert.equal(bg.background, true);
  const done = await waitStatus(bg.id, 'completed');
  assert.equal(done.output[0].content[0].text, echoed);

  // echo_slow takes 20ms a word: 5000 words only end by cancellation.
  const words = Array.from({ length: 5000 }, (_, i) => `w${i}`).join(' ');
  const long = await client.responses.create({ model: 'echo_slow', input: words, background: true });
  const cancelled = await client.responses.cancel(long.id);
  assert.equal(cancelled.status, 'cancelled');
  assert.equal((await client.responses.retrieve(long.id)).status, 'cancelled');
});

// The stack's real model (stories260k when its weights are found, else
// echo): greedy decoding makes every run of a prompt the same text.
const textModel = process.env.STREAMGATE_TEXT_MODEL || 'echo';
const greedy = { model: textModel, input: 'Once upon a time', temperature: 0, max_output_tokens: 100 };

test('background response cut after five deltas, resumed with retrieve(id, {stream, starting_after})', async () => {
  const whole = (await client.responses.create({ ...greedy, store: false })).output[0].content[0].text;
  const cut = await cutAfter(client, greedy, 5);
  const text = cut.text + await resumeText(client, cut.id, cut.last);
  assert.equal(text, whole);

  // The SDK's responses.stream({response_id, starting_after}) helper
  // reads the stream again from the start and skips what was seen.
  const deltas = [];
  const runner = client.responses.stream({ response_id: cut.id, starting_after: cut.last })
    .on('response.output_text.delta', (e) => deltas.push(e.delta));
  const final = await runner.finalResponse();
  assert.equal(final.output[0].content[0].text, whole);
  assert.equal(cut.text + deltas.join(''), whole);
});
