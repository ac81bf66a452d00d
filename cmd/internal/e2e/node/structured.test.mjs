// Structured outputs and constrained tool calls through streamgate's
// /v1/chat/completions with the official openai SDK and its zod helpers.
// The model (STREAMGATE_TEXT_MODEL: stories260k, a tiny story model that
// never saw JSON) samples at temperature 1 under the engine's
// guided decoding: every answer must still parse and validate.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { zodResponseFormat, zodFunction, zodTextFormat } from 'openai/helpers/zod';
import { z } from 'zod';

const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: 'unused', maxRetries: 0 });
const model = process.env.STREAMGATE_TEXT_MODEL || 'echo';
const skip = model === 'echo' ? 'echo cannot constrain its output (no model weights)' : false;

const Person = z.object({
  name: z.string().max(12),
  age: z.number().int(),
  mood: z.enum(['happy', 'sad']),
  friends: z.array(z.string().max(8)).max(3),
  pet: z.object({ kind: z.literal('cat'), lives: z.number().int() }).nullable(),
});
const messages = [{ role: 'user', content: 'Tell me about Lily.' }];
// A large vocabulary's forward passes are slow: its caller may ask for fewer seeds.
const seeds = [1, 2, 3, 4, 5].slice(0, Number(process.env.STREAMGATE_STRUCTURED_SEEDS || 5));

test('json_schema from zod, not streamed: parse() validates every answer', { skip }, async () => {
  for (const seed of seeds) {
    const r = await client.chat.completions.parse({
      model, messages, seed, temperature: 1, max_tokens: 400,
      response_format: zodResponseFormat(Person, 'person'),
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'stop', `seed ${seed}: ${c.message.content}`);
    assert.deepEqual(c.message.parsed, Person.parse(JSON.parse(c.message.content)));
  }
});

test('json_schema from zod, streamed: the stream helper parses the final answer', { skip }, async () => {
  for (const seed of seeds) {
    const stream = client.chat.completions.stream({
      model, messages, seed, temperature: 1, max_tokens: 400, stream: true,
      response_format: zodResponseFormat(Person, 'person'),
    });
    let deltas = 0;
    stream.on('content.delta', () => deltas++);
    const final = await stream.finalChatCompletion();
    const c = final.choices[0];
    assert.equal(c.finish_reason, 'stop');
    assert.ok(deltas > 1, 'the answer streams in pieces');
    Person.parse(c.message.parsed);
  }
});

test('json_object: an object from the first byte, JSON whenever the answer ends', { skip }, async () => {
  for (const seed of seeds) {
    const r = await client.chat.completions.create({
      model, messages, seed, temperature: 0.7, max_tokens: 100, response_format: { type: 'json_object' },
    });
    const c = r.choices[0];
    assert.ok(c.message.content.startsWith('{'), c.message.content);
    // Free keys and strings have no bound: a tiny model may write until
    // max_tokens (finish_reason length), as OpenAI's models may.
    if (c.finish_reason === 'stop') {
      const v = JSON.parse(c.message.content);
      assert.ok(typeof v === 'object' && v !== null && !Array.isArray(v));
    }
  }
});

test('Responses API text.format json_schema from zod: parse() and stream()', { skip }, async () => {
  for (const seed of seeds.slice(0, 2)) {
    const r = await client.responses.parse({
      model, input: 'Tell me about Lily.', temperature: 1, max_output_tokens: 400, store: false,
      text: { format: zodTextFormat(Person, 'person') },
    });
    assert.equal(r.status, 'completed', r.output_text);
    assert.deepEqual(r.output_parsed, Person.parse(JSON.parse(r.output_text)));
  }
  const stream = client.responses.stream({
    model, input: 'Tell me about Lily.', temperature: 1, max_output_tokens: 400, store: false,
    text: { format: zodTextFormat(Person, 'person') },
  });
  let deltas = 0;
  stream.on('response.output_text.delta', () => deltas++);
  const final = await stream.finalResponse();
  assert.ok(deltas > 1);
  Person.parse(final.output_parsed);
});

test('Responses API text.format json_schema on a model without guided decoding: 400 naming text.format', async (t) => {
  const models = await client.models.list();
  if (!models.data.some((m) => m.id === 'echo')) return t.skip('no echo model here');
  await assert.rejects(client.responses.create({
    model: 'echo', input: 'x', text: { format: zodTextFormat(Person, 'person') },
  }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, 'text.format');
    return true;
  });
});

const weather = zodFunction({
  name: 'get_weather',
  description: 'The weather in a city.',
  parameters: z.object({ city: z.enum(['Paris', 'Rome', 'Oslo']), days: z.number().int() }),
});
const time = zodFunction({ name: 'get_time', parameters: z.object({ zone: z.string().max(10) }) });
const tools = [weather, time];

test('tool_choice named: a call of that function, arguments per its schema', { skip }, async () => {
  for (const stream of [false, true]) {
    for (const seed of seeds) {
      const body = { model, messages, seed, temperature: 1, max_tokens: 200, tools, tool_choice: { type: 'function', function: { name: 'get_time' } } };
      const r = stream
        ? await client.chat.completions.stream({ ...body, stream: true }).finalChatCompletion()
        : await client.chat.completions.create(body);
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c.message));
      assert.equal(c.message.tool_calls.length, 1);
      assert.equal(c.message.tool_calls[0].function.name, 'get_time');
      z.object({ zone: z.string().max(10) }).strict().parse(JSON.parse(c.message.tool_calls[0].function.arguments));
    }
  }
});

test('tool loop with tool_choice required: call, tool result, answer', { skip }, async () => {
  for (const stream of [false, true]) {
    const history = [...messages];
    const body = { model, messages: history, temperature: 1, seed: 7, max_tokens: 200, tools, tool_choice: 'required', parallel_tool_calls: false };
    const r = stream
      ? await client.chat.completions.stream({ ...body, stream: true }).finalChatCompletion()
      : await client.chat.completions.create(body);
    const m = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    const call = m.tool_calls[0];
    assert.ok(['get_weather', 'get_time'].includes(call.function.name));
    const args = JSON.parse(call.function.arguments);
    if (call.function.name === 'get_weather') z.object({ city: z.enum(['Paris', 'Rome', 'Oslo']), days: z.number().int() }).strict().parse(args);
    else z.object({ zone: z.string().max(10) }).strict().parse(args);
    history.push(m, { role: 'tool', tool_call_id: call.id, content: 'Sunny, 21C.' });
    const answer = await client.chat.completions.create({ model, messages: history, tools, max_tokens: 30, temperature: 0 });
    assert.ok(['stop', 'length'].includes(answer.choices[0].finish_reason));
    assert.equal(typeof answer.choices[0].message.content, 'string');
  }
});

// zod's string checks become pattern and format (both at once for
// email, uuid and dates; the engine enforces the two together, each
// bounded): parse() validates with zod itself.
const Contact = z.object({
  email: z.email(), id: z.uuid(), day: z.iso.date(), at: z.iso.datetime(), code: z.string().regex(/^[A-Z]{2}-\d{3}$/),
});

test('json_schema with pattern and format (zod email, uuid, date, datetime, regex): every answer validates', { skip }, async () => {
  for (const seed of seeds) {
    const r = await client.chat.completions.parse({
      model, messages, seed, temperature: 1, max_tokens: 400,
      response_format: zodResponseFormat(Contact, 'contact'),
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'stop', c.message.content);
    assert.deepEqual(c.message.parsed, Contact.parse(JSON.parse(c.message.content)));
  }
});

test('a schema the engine cannot enforce is refused with 400 naming the keyword', { skip }, async () => {
  await assert.rejects(client.chat.completions.create({
    model, messages, max_tokens: 10,
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { type: 'string', pattern: '^\\bé+$' } } } } },
  }), (e) => {
    assert.equal(e.status, 400);
    assert.match(e.message, /properties\/a\/pattern/);
    return true;
  });
  await assert.rejects(client.chat.completions.create({
    model, messages, response_format: { type: 'json_schema', json_schema: { schema: {} } },
  }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, 'response_format.json_schema.name');
    return true;
  });
});

test('Responses API: tool_choice required, the call answered by function_call_output after previous_response_id', { skip }, async () => {
  const rtools = tools.map((t) => ({ type: 'function', name: t.function.name, parameters: t.function.parameters, strict: true }));
  for (const stream of [false, true]) {
    const body = { model, input: 'Tell me about Lily.', tools: rtools, tool_choice: 'required', parallel_tool_calls: false, temperature: 1, max_output_tokens: 200 };
    const r = stream ? await client.responses.stream(body).finalResponse() : await client.responses.create(body);
    assert.equal(r.status, 'completed');
    const calls = r.output.filter((o) => o.type === 'function_call');
    assert.equal(calls.length, 1, JSON.stringify(r.output));
    assert.equal(r.output.filter((o) => o.type === 'message').length, 0, 'only the call');
    const args = JSON.parse(calls[0].arguments);
    if (calls[0].name === 'get_weather') z.object({ city: z.enum(['Paris', 'Rome', 'Oslo']), days: z.number().int() }).strict().parse(args);
    else z.object({ zone: z.string().max(10) }).strict().parse(args);
    const answer = await client.responses.create({ model, previous_response_id: r.id, tools: rtools, max_output_tokens: 20, temperature: 0,
      input: [{ type: 'function_call_output', call_id: calls[0].call_id, output: 'Sunny, 21C.' }] });
    assert.ok(['completed', 'incomplete'].includes(answer.status));
  }
});
