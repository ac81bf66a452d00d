// Tool calling through streamgate's /v1/chat/completions with the
// official openai SDK. The echo model has no chat template: it answers
// its prompt back, so a user message that holds a Hermes-style
// <tool_call> makes it "call" a tool, deterministically.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.OPENAI_BASE_URL;
assert.ok(baseURL, 'OPENAI_BASE_URL must be set (…/v1)');
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0 });

const tools = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city.',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];
const call = '<tool_call>{"name":"get_weather","arguments":{"city":"Paris"}}</tool_call>';
const messages = [{ role: 'user', content: call }];

function checkCall(tc) {
  assert.equal(tc.type, 'function');
  assert.match(tc.id, /^call_/);
  assert.equal(tc.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(tc.function.arguments), { city: 'Paris' });
}

test('tool call, not streamed', async () => {
  const r = await client.chat.completions.create({ model: 'echo', messages, tools });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(m.tool_calls.length, 1);
  checkCall(m.tool_calls[0]);
  // echo's answer around the call ("user:" before, "assistant:" after) stays content
  assert.equal(m.content, 'user: assistant:');
});

test('tool call, streamed: deltas the stream helper assembles, no half call as content', async () => {
  const stream = client.chat.completions.stream({ model: 'echo', messages, tools, stream: true });
  const content = [];
  const done = [];
  stream.on('content.delta', ({ delta }) => content.push(delta));
  stream.on('tool_calls.function.arguments.done', (e) => done.push(e));
  const final = await stream.finalChatCompletion();
  for (const c of content) assert.ok(!/[<{}>]/.test(c), `content delta ${JSON.stringify(c)} holds part of a call`);
  assert.equal(final.choices[0].finish_reason, 'tool_calls');
  assert.equal(final.choices[0].message.tool_calls.length, 1);
  checkCall(final.choices[0].message.tool_calls[0]);
  assert.equal(done.length, 1);
  assert.equal(done[0].name, 'get_weather');
  assert.deepEqual(done[0].parsed_arguments ?? JSON.parse(done[0].arguments), { city: 'Paris' });
});

test('raw stream chunks: index, id, type, name, then arguments', async () => {
  const stream = await client.chat.completions.create({ model: 'echo', messages, tools, stream: true });
  const deltas = [];
  let finish = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (c.delta.tool_calls) deltas.push(...c.delta.tool_calls);
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(deltas.length, 2);
  assert.equal(deltas[0].index, 0);
  assert.match(deltas[0].id, /^call_/);
  assert.equal(deltas[0].type, 'function');
  assert.equal(deltas[0].function.name, 'get_weather');
  assert.equal(deltas[1].index, 0);
  assert.deepEqual(JSON.parse(deltas[1].function.arguments), { city: 'Paris' });
});

test('tool loop: call, tool result, answer', async () => {
  for (const stream of [false, true]) {
    const history = [...messages];
    let r;
    if (stream) r = await client.chat.completions.stream({ model: 'echo', messages: history, tools, stream: true }).finalChatCompletion();
    else r = await client.chat.completions.create({ model: 'echo', messages: history, tools });
    const m = r.choices[0].message;
    assert.equal(m.tool_calls.length, 1);
    history.push(m);
    const args = JSON.parse(m.tool_calls[0].function.arguments);
    history.push({ role: 'tool', tool_call_id: m.tool_calls[0].id, content: `18C in ${args.city}` });
    // echo would repeat the user's call; tool_choice none makes this the answer turn.
    const answer = await client.chat.completions.create({ model: 'echo', messages: history, tools, tool_choice: 'none' });
    assert.equal(answer.choices[0].finish_reason, 'stop');
    assert.equal(answer.choices[0].message.tool_calls, undefined);
    assert.match(answer.choices[0].message.content, /tool: 18C in Paris assistant:$/);
  }
});

test('what needs constrained decoding is refused, naming the field', async () => {
  for (const [body, param] of [
    [{ tools, tool_choice: 'required' }, 'tool_choice'],
    [{ tools, tool_choice: { type: 'function', function: { name: 'get_weather' } } }, 'tool_choice'],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object' } } } }, 'response_format'],
    [{ response_format: { type: 'json_object' } }, 'response_format'],
  ]) {
    await assert.rejects(client.chat.completions.create({ model: 'echo', messages, ...body }), (e) => {
      assert.equal(e.status, 400);
      assert.equal(e.param, param);
      return true;
    });
  }
});

// The Responses API: flat function tools, function_call output items,
// function_call / function_call_output input items.
const rtools = [{ type: 'function', name: 'get_weather', description: 'The weather in a city.',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];

function checkItem(item) {
  assert.equal(item.type, 'function_call');
  assert.match(item.call_id, /^call_/);
  assert.equal(item.name, 'get_weather');
  assert.deepEqual(JSON.parse(item.arguments), { city: 'Paris' });
}

test('responses: a function_call output item, not streamed', async () => {
  const r = await client.responses.create({ model: 'echo', input: call, tools: rtools, store: false });
  const calls = r.output.filter((o) => o.type === 'function_call');
  assert.equal(calls.length, 1);
  checkItem(calls[0]);
  assert.equal(r.output_text, 'user: assistant:'); // echo's text around the call
  assert.equal(r.tools[0].name, 'get_weather');
});

test('responses: streamed function_call_arguments events, assembled by the SDK', async () => {
  const stream = client.responses.stream({ model: 'echo', input: call, tools: rtools, store: false });
  const deltas = [];
  const done = [];
  const text = [];
  stream.on('response.function_call_arguments.delta', (e) => deltas.push(e.delta));
  stream.on('response.function_call_arguments.done', (e) => done.push(e));
  stream.on('response.output_text.delta', (e) => text.push(e.delta));
  const final = await stream.finalResponse();
  for (const t of text) assert.ok(!/[<{}>]/.test(t), `text delta ${JSON.stringify(t)} holds part of a call`);
  assert.equal(done.length, 1);
  assert.deepEqual(JSON.parse(done[0].arguments), { city: 'Paris' });
  assert.deepEqual(JSON.parse(deltas.join('')), { city: 'Paris' });
  const calls = final.output.filter((o) => o.type === 'function_call');
  assert.equal(calls.length, 1);
  checkItem(calls[0]);
});

test('responses: tool loop with function_call_output, by input items and by previous_response_id', async () => {
  const first = await client.responses.create({ model: 'echo', input: call, tools: rtools });
  const fc = first.output.find((o) => o.type === 'function_call');
  const output = { type: 'function_call_output', call_id: fc.call_id, output: '18C in Paris' };
  // The whole conversation as input items.
  const a = await client.responses.create({ model: 'echo', tools: rtools, tool_choice: 'none', store: false,
    input: [{ role: 'user', content: call }, fc, output] });
  assert.equal(a.output.filter((o) => o.type === 'function_call').length, 0);
  assert.match(a.output_text, /tool: 18C in Paris assistant:$/);
  // Continuing the stored response: its call is in the history.
  const b = await client.responses.create({ model: 'echo', tools: rtools, tool_choice: 'none', store: false,
    previous_response_id: first.id, input: [output] });
  assert.match(b.output_text, /tool: 18C in Paris assistant:$/);
});

test('responses: tool_choice required on a model without guided decoding is 400', async () => {
  await assert.rejects(client.responses.create({ model: 'echo', input: 'x', tools: rtools, tool_choice: 'required' }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, 'tool_choice');
    return true;
  });
});
