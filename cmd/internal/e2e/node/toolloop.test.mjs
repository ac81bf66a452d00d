// An agent's tool loop with the official openai SDK on a GGUF model with
// trained weights (STREAMGATE_TOOLLOOP_MODEL: stories260K converted to
// GGUF, with a Hermes-style chat template that renders tools): the first
// turn must call a tool (tool_choice required), the agent runs the tool
// and sends its result, and the model answers. Streamed and not, on
// /v1/chat/completions and /v1/responses; greedy, so the streamed loop
// must give what the unstreamed one gives.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: 'unused', maxRetries: 0 });
const model = process.env.STREAMGATE_TOOLLOOP_MODEL;
// TestGGUFAgentToolLoop sets it to the model it serves.
const skip = model ? false : 'STREAMGATE_TOOLLOOP_MODEL is not set (run by TestGGUFAgentToolLoop)';

const parameters = {
  type: 'object',
  properties: { city: { type: 'string', enum: ['Paris', 'Rome', 'Oslo'] } },
  required: ['city'],
  additionalProperties: false,
};
const cities = { Paris: 'Sunny.', Rome: 'Rain.', Oslo: 'Snow.' };
// The agent's one tool: it throws on arguments its schema does not allow.
function getWeather(json) {
  const args = JSON.parse(json);
  assert.deepEqual(Object.keys(args), ['city']);
  assert.ok(args.city in cities, json);
  return cities[args.city];
}
const system = 'You tell stories.';
const question = 'What is the weather in Paris?';

// chatLoop runs the loop on chat.completions: turns until the model
// answers without a call.
async function chatLoop(stream) {
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city.', parameters, strict: true } }];
  const messages = [{ role: 'system', content: system }, { role: 'user', content: question }];
  const calls = [];
  for (let turn = 0; turn < 3; turn++) {
    // One call a turn: greedy, this model would repeat parallel calls to the token limit.
    const body = { model, messages, tools, tool_choice: turn === 0 ? 'required' : 'auto', parallel_tool_calls: false, temperature: 0, max_tokens: turn === 0 ? 100 : 300 };
    let deltas = 0;
    let r;
    if (stream) {
      const s = client.chat.completions.stream({ ...body, stream: true });
      s.on('content.delta', () => deltas++);
      s.on('tool_calls.function.arguments.delta', () => deltas++);
      r = await s.finalChatCompletion();
      assert.ok(deltas > 0, 'the turn streamed');
    } else {
      r = await client.chat.completions.create(body);
    }
    const c = r.choices[0];
    messages.push(c.message);
    if (!c.message.tool_calls?.length) {
      assert.equal(turn, 1, 'the answer comes right after the tool result');
      return { calls, answer: c, usage: r.usage };
    }
    assert.equal(c.finish_reason, 'tool_calls');
    for (const call of c.message.tool_calls) {
      assert.match(call.id, /^call_/);
      assert.equal(call.function.name, 'get_weather');
      calls.push(call.function.arguments);
      messages.push({ role: 'tool', tool_call_id: call.id, content: getWeather(call.function.arguments) });
    }
  }
  assert.fail('no answer after 3 turns');
}

test('chat.completions: call, tool result, answer; streamed as not', { skip }, async () => {
  const plain = await chatLoop(false);
  assert.equal(plain.calls.length, 1);
  assert.ok(['stop', 'length'].includes(plain.answer.finish_reason), plain.answer.finish_reason);
  assert.ok(plain.answer.message.content.trim().length > 0, 'an answer in words');
  assert.equal(plain.answer.message.tool_calls ?? undefined, undefined);
  console.log('chat answer:', JSON.stringify(plain.answer.message.content), plain.answer.finish_reason, plain.usage, 'after', plain.calls);
  const streamed = await chatLoop(true);
  assert.deepEqual(streamed.calls, plain.calls);
  assert.equal(streamed.answer.message.content, plain.answer.message.content);
  assert.equal(streamed.answer.finish_reason, plain.answer.finish_reason);
});

// responsesLoop runs the loop on the Responses API, stateless: the agent
// sends the whole conversation back, the call items included.
async function responsesLoop(stream) {
  const tools = [{ type: 'function', name: 'get_weather', description: 'The weather in a city.', parameters, strict: true }];
  const input = [{ role: 'user', content: question }];
  const calls = [];
  for (let turn = 0; turn < 3; turn++) {
    const body = { model, input, instructions: system, tools, tool_choice: turn === 0 ? 'required' : 'auto', parallel_tool_calls: false, temperature: 0, max_output_tokens: turn === 0 ? 100 : 300, store: false };
    let r;
    const events = { delta: 0, done: 0, text: 0 };
    if (stream) {
      const s = client.responses.stream(body);
      s.on('response.function_call_arguments.delta', () => events.delta++);
      s.on('response.function_call_arguments.done', () => events.done++);
      s.on('response.output_text.delta', () => events.text++);
      r = await s.finalResponse();
    } else {
      r = await client.responses.create(body);
    }
    input.push(...r.output);
    r.text = r.output.filter((o) => o.type === 'message').flatMap((o) => o.content).map((c) => c.text).join('');
    const fc = r.output.filter((o) => o.type === 'function_call');
    if (fc.length === 0) {
      assert.equal(turn, 1, 'the answer comes right after the tool result');
      if (stream) assert.ok(events.text > 0, 'the answer streamed');
      return { calls, answer: r };
    }
    assert.equal(r.status, 'completed');
    if (stream) {
      assert.equal(events.done, fc.length, 'one arguments.done per call');
      assert.ok(events.delta >= fc.length, 'arguments deltas');
    }
    for (const call of fc) {
      assert.equal(call.name, 'get_weather');
      calls.push(call.arguments);
      input.push({ type: 'function_call_output', call_id: call.call_id, output: getWeather(call.arguments) });
    }
  }
  assert.fail('no answer after 3 turns');
}

test('responses: function_call, function_call_output, answer; streamed as not', { skip }, async () => {
  const plain = await responsesLoop(false);
  assert.equal(plain.calls.length, 1);
  assert.ok(['completed', 'incomplete'].includes(plain.answer.status), plain.answer.status);
  assert.ok(plain.answer.text.trim().length > 0, 'an answer in words');
  console.log('responses answer:', JSON.stringify(plain.answer.text), plain.answer.status, plain.answer.usage, 'after', plain.calls);
  const streamed = await responsesLoop(true);
  assert.deepEqual(streamed.calls, plain.calls);
  assert.equal(streamed.answer.text, plain.answer.text);
  assert.equal(streamed.answer.status, plain.answer.status);
});

const both = [
  { type: 'function', function: { name: 'get_weather', parameters, strict: true } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string', enum: ['UTC', 'CET'] } }, required: ['zone'], additionalProperties: false }, strict: true } },
];
const seeds = [1, 2, 3, 4, 5, 6, 7, 8];

// checkArgs validates a call's arguments against its function's schema.
function checkArgs(name, json) {
  const args = JSON.parse(json);
  if (name === 'get_weather') getWeather(json);
  else assert.ok(name === 'get_time' && ['UTC', 'CET'].includes(args.zone) && Object.keys(args).length === 1, `${name} ${json}`);
}

// checkCalls validates calls ([name, arguments]); with cut, the last
// one's arguments may be cut off.
function checkCalls(calls, cut) {
  assert.ok(calls.length >= 1);
  calls.forEach(([name, args], i) => {
    if (cut && i === calls.length - 1) {
      try { JSON.parse(args); } catch { return; }
    }
    checkArgs(name, args);
  });
}

// streamedCalls reads a raw chat stream's tool_calls deltas: each call's
// first delta has its index, id, type and name; its arguments come in
// pieces that add up.
async function streamedCalls(body) {
  const stream = await client.chat.completions.create({ ...body, stream: true });
  const calls = [];
  let pieces = 0;
  let finish;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      finish = c.finish_reason ?? finish;
      for (const d of c.delta.tool_calls ?? []) {
        if (!calls[d.index]) {
          assert.equal(d.index, calls.length, 'calls are numbered in order');
          assert.equal(d.type, 'function');
          assert.match(d.id, /^call_/);
          calls[d.index] = { id: d.id, name: d.function.name, arguments: '' };
        } else {
          assert.equal(d.id, undefined, 'only the first delta carries the id');
        }
        calls[d.index].arguments += d.function.arguments ?? '';
        pieces++;
      }
    }
  }
  return { calls, pieces, finish };
}

test('chat.completions tool_choice required: parallel calls when allowed, one when not; arguments stream in pieces', { skip }, async () => {
  let most = 0;
  for (const seed of seeds) {
    for (const parallel of [true, false]) {
      const body = { model, messages: [{ role: 'user', content: question }], tools: both, tool_choice: 'required', parallel_tool_calls: parallel, temperature: 1, seed, max_tokens: 200 };
      const r = await client.chat.completions.create(body);
      const finish = r.choices[0].finish_reason;
      const calls = r.choices[0].message.tool_calls;
      if (!parallel) {
        assert.equal(finish, 'tool_calls', JSON.stringify(r.choices[0]));
        assert.equal(calls.length, 1, `seed ${seed}: parallel_tool_calls false gave ${calls.length} calls`);
      }
      // A tiny model may go on calling until max_tokens: then the last
      // call may be cut off, as OpenAI's are.
      assert.ok(['tool_calls', 'length'].includes(finish), finish);
      checkCalls(calls.map((c) => [c.function.name, c.function.arguments]), finish === 'length');
      most = Math.max(most, calls.length);
      const s = await streamedCalls(body);
      assert.equal(s.finish, finish);
      assert.deepEqual(s.calls.map((c) => [c.name, c.arguments]), calls.map((c) => [c.function.name, c.function.arguments]), `seed ${seed}: streamed as not`);
      assert.ok(s.pieces > 2 * calls.length, `seed ${seed}: ${s.pieces} deltas for ${calls.length} calls`);
    }
  }
  assert.ok(most >= 2, `no seed made parallel calls (at most ${most})`);
});

test('responses tool_choice required: parallel function_call items, arguments in several deltas then done', { skip }, async () => {
  const rtools = both.map((t) => ({ type: 'function', name: t.function.name, parameters: t.function.parameters, strict: true }));
  let most = 0;
  for (const seed of seeds.slice(0, 4)) {
    const body = { model, input: question, tools: rtools, tool_choice: 'required', temperature: 1, seed, max_output_tokens: 200, store: false };
    const plain = await client.responses.create(body);
    const stream = client.responses.stream(body);
    const deltas = {};
    const done = {};
    const added = [];
    stream.on('response.output_item.added', (e) => added.push([e.output_index, e.item.type, e.item.name]));
    stream.on('response.function_call_arguments.delta', (e) => { (deltas[e.item_id] ??= []).push([e.output_index, e.delta]); });
    stream.on('response.function_call_arguments.done', (e) => { done[e.item_id] = e.arguments; });
    // The stream helper's final response is the one of response.completed,
    // else (response.incomplete) its own snapshot, still in_progress.
    let ended;
    stream.on('event', (e) => { if (e.type === 'response.completed' || e.type === 'response.incomplete') ended = e.response; });
    await stream.finalResponse();
    const r = ended;
    const calls = r.output.filter((o) => o.type === 'function_call');
    assert.equal(calls.length, r.output.length, 'only calls');
    assert.equal(r.status, plain.status);
    assert.ok(['completed', 'incomplete'].includes(r.status), r.status);
    checkCalls(calls.map((c) => [c.name, c.arguments]), r.status === 'incomplete');
    assert.deepEqual(calls.map((c) => [c.name, c.arguments]), plain.output.map((c) => [c.name, c.arguments]), `seed ${seed}: streamed as not`);
    assert.deepEqual(added, calls.map((c, i) => [i, 'function_call', c.name]));
    calls.forEach((c, i) => {
      const ds = deltas[c.id] ?? [];
      if (c.status === 'completed') assert.ok(ds.length >= 2, `seed ${seed}: call ${i}'s arguments came in ${ds.length} delta(s)`);
      else assert.ok(r.status === 'incomplete' && i === calls.length - 1, `seed ${seed}: call ${i} ${c.status}`);
      assert.ok(ds.every(([index]) => index === i));
      assert.equal(ds.map(([, d]) => d).join(''), c.arguments);
      assert.equal(done[c.id] ?? '', c.arguments);
    });
    most = Math.max(most, calls.length);
  }
  assert.ok(most >= 2, `no seed made parallel calls (at most ${most})`);
});
