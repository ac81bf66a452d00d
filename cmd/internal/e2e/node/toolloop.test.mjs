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
assert.ok(model, 'STREAMGATE_TOOLLOOP_MODEL must be set');

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
    const body = { model, messages, tools, tool_choice: turn === 0 ? 'required' : 'auto', temperature: 0, max_tokens: turn === 0 ? 100 : 300 };
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

test('chat.completions: call, tool result, answer; streamed as not', async () => {
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
    const body = { model, input, instructions: system, tools, tool_choice: turn === 0 ? 'required' : 'auto', temperature: 0, max_output_tokens: turn === 0 ? 100 : 300, store: false };
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

test('responses: function_call, function_call_output, answer; streamed as not', async () => {
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
