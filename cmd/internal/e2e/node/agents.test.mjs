// Agent frameworks, unmodified, against streamgate's /v1: the Vercel AI
// SDK (ai + @ai-sdk/openai) and LangChain JS (@langchain/openai). The
// model (STREAMGATE_TEXT_MODEL: stories260k, a tiny story model that
// never saw JSON or tools) is held to the schemas by the engine's guided
// decoding, so every tool call and object must still validate.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createOpenAI } from '@ai-sdk/openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText, streamText, generateObject, streamObject, tool, stepCountIs } from 'ai';
import { ChatOpenAI } from '@langchain/openai';
import { tool as lcTool } from '@langchain/core/tools';
import { z } from 'zod';

const baseURL = process.env.OPENAI_BASE_URL;
assert.ok(baseURL, 'OPENAI_BASE_URL must be set (…/v1)');
const model = process.env.STREAMGATE_TEXT_MODEL || 'echo';
const skip = model === 'echo' ? 'echo cannot constrain its output (no model weights)' : false;

const openai = createOpenAI({ baseURL, apiKey: 'unused' });
// The provider made for OpenAI-compatible servers (vLLM, Ollama, ...).
const compatible = createOpenAICompatible({ name: 'streamgate', baseURL, apiKey: 'unused', supportsStructuredOutputs: true, includeUsage: true });
// Chat completions through both providers, and the Responses API.
const models = [openai.chat(model), compatible(model), openai(model)];
const prompt = 'Tell me about Lily.';
const Weather = z.object({ city: z.enum(['Paris', 'Rome', 'Oslo']), days: z.number().int() });
// Sampling that repeats run to run: the Responses API has no seed, so
// that route decodes greedily; chat completions sample with a seed.
function sampling(m, seed) {
  return m.provider.endsWith('.chat') ? { temperature: 1, seed } : { temperature: 0 };
}
const Person = z.object({
  name: z.string().max(12),
  age: z.number().int(),
  mood: z.enum(['happy', 'sad']),
  friends: z.array(z.string().max(8)).max(3),
});

test('AI SDK: generateText and streamText, plain: the streamed text is the generated text', async () => {
  // Greedy decoding: both routes must sample the same tokens.
  for (const m of models) {
    const opts = { model: m, prompt, temperature: 0, maxOutputTokens: 24, maxRetries: 0 };
    const g = await generateText(opts);
    assert.ok(g.text.length > 0);
    const s = streamText(opts);
    let text = '';
    let parts = 0;
    for await (const t of s.textStream) { text += t; parts++; }
    assert.equal(text, g.text, `${m.provider}: stream and generate differ`);
    assert.ok(parts > 1, 'the text streams in pieces');
    assert.equal(await s.finishReason, g.finishReason);
    assert.deepEqual((await s.usage).outputTokens, g.usage.outputTokens);
  }
});

// The agent loop: step 1 must call a tool (toolChoice required, enforced
// by guided decoding), the SDK runs it, step 2 answers with its result.
test('AI SDK: tool loop, generateText and streamText, two providers and the Responses API', { skip }, async () => {
  for (const m of models) {
    for (const stream of [false, true]) {
      const ran = [];
      const opts = {
        model: m, prompt, ...sampling(m, 3), maxOutputTokens: 200, maxRetries: 0,
        tools: {
          get_weather: tool({
            description: 'The weather in a city.',
            inputSchema: Weather,
            execute: async (input) => { ran.push(input); return `Sunny, 21C in ${input.city}.`; },
          }),
        },
        toolChoice: 'required',
        // One call a step: a required choice otherwise lets the model make
        // one or more, and this tiny model greedily repeats its call.
        providerOptions: { openai: { parallelToolCalls: false }, streamgate: { parallel_tool_calls: false } },
        stopWhen: stepCountIs(2),
        prepareStep: ({ stepNumber }) => (stepNumber > 0 ? { toolChoice: 'none' } : undefined),
      };
      const where = `${m.provider} stream=${stream}`;
      let r;
      if (stream) {
        r = streamText(opts);
        await r.consumeStream();
        r = { steps: await r.steps, text: await r.text };
      } else {
        r = await generateText(opts);
      }
      assert.equal(r.steps.length, 2, where);
      const [first, second] = r.steps;
      assert.equal(first.finishReason, 'tool-calls', where);
      assert.equal(first.toolCalls.length, 1, where);
      assert.equal(first.toolCalls[0].toolName, 'get_weather', where);
      Weather.strict().parse(first.toolCalls[0].input);
      assert.deepEqual(ran, [first.toolCalls[0].input], where);
      assert.equal(first.toolResults[0].output, `Sunny, 21C in ${ran[0].city}.`);
      assert.equal(second.toolCalls.length, 0, where);
      assert.ok(['stop', 'length'].includes(second.finishReason), `${where}: ${second.finishReason}`);
      assert.equal(r.text, second.text);
    }
  }
});

test('AI SDK: generateObject and streamObject with a zod schema', { skip }, async () => {
  for (const m of models) {
    for (const seed of [1, 2]) {
      const g = await generateObject({ model: m, schema: Person, schemaName: 'person', prompt, ...sampling(m, seed), maxOutputTokens: 400, maxRetries: 0 });
      assert.equal(g.finishReason, 'stop');
      Person.strict().parse(g.object);
    }
    const s = streamObject({ model: m, schema: Person, schemaName: 'person', prompt, ...sampling(m, 4), maxOutputTokens: 400, maxRetries: 0 });
    let partials = 0;
    for await (const p of s.partialObjectStream) { assert.equal(typeof p, 'object'); partials++; }
    assert.ok(partials > 1, 'partial objects stream');
    Person.strict().parse(await s.object);
  }
});

function chat(opts) {
  return new ChatOpenAI({ model, apiKey: 'unused', configuration: { baseURL }, maxRetries: 0, ...opts });
}

test('LangChain: ChatOpenAI invoke and stream agree', async () => {
  const llm = chat({ temperature: 0, maxTokens: 24 });
  const m = await llm.invoke(prompt);
  assert.equal(typeof m.content, 'string');
  assert.ok(m.content.length > 0);
  let text = '';
  let chunks = 0;
  for await (const c of await llm.stream(prompt)) { text += c.content; chunks++; }
  assert.equal(text, m.content);
  assert.ok(chunks > 1);
});

test('LangChain: bindTools with tool_choice required, the call answered by a ToolMessage', { skip }, async () => {
  const weather = lcTool(async ({ city }) => `Sunny, 21C in ${city}.`, {
    name: 'get_weather', description: 'The weather in a city.', schema: Weather,
  });
  const llm = chat({ temperature: 1, maxTokens: 200 });
  const withTools = llm.bindTools([weather], { tool_choice: 'required', parallel_tool_calls: false });
  for (const stream of [false, true]) {
    let ai;
    if (stream) {
      for await (const c of await withTools.stream(prompt, { seed: 5 })) ai = ai ? ai.concat(c) : c;
    } else {
      ai = await withTools.invoke(prompt, { seed: 5 });
    }
    assert.equal(ai.tool_calls.length, 1, JSON.stringify(ai));
    const call = ai.tool_calls[0];
    assert.equal(call.name, 'get_weather');
    Weather.strict().parse(call.args);
    const result = await weather.invoke(call);
    assert.equal(result.tool_call_id, call.id);
    const answer = await llm.bindTools([weather]).invoke([['user', prompt], ai, result], { tool_choice: 'none' });
    assert.equal(answer.tool_calls.length, 0);
    assert.equal(typeof answer.content, 'string');
  }
});

test('LangChain: withStructuredOutput, json schema and function calling', { skip }, async () => {
  for (const method of ['jsonSchema', 'functionCalling']) {
    const llm = chat({ temperature: 0, maxTokens: 400 }).withStructuredOutput(Person, { name: 'person', method, strict: true });
    const p = await llm.invoke(prompt);
    Person.strict().parse(p);
  }
});

// echo answers its prompt back: a user message holding a Hermes-style
// <tool_call> makes it call the tool, and the answer turn shows the whole
// history the framework sent, the tool's result included.
const served = (await (await fetch(`${baseURL}/models`)).json()).data.map((m) => m.id);
const noEcho = served.includes('echo') ? false : 'no echo model here';
const echoCall = '<tool_call>{"name":"get_weather","arguments":{"city":"Paris","days":2}}</tool_call>';

test('AI SDK on echo: the tool result reaches the model in the answer turn', { skip: noEcho }, async () => {
  const answers = {};
  for (const [m, store] of [[openai.chat('echo'), false], [compatible('echo'), false], [openai('echo'), true], [openai('echo'), false]]) {
    for (const stream of [false, true]) {
      const opts = {
        model: m, prompt: echoCall, maxRetries: 0,
        // With store (OpenAI's default) the Responses provider sends the
        // first turn's text back as an item_reference; without, as text.
        providerOptions: { openai: { store } },
        tools: { get_weather: tool({ inputSchema: Weather, execute: async ({ city, days }) => `Sunny for ${days} days in ${city}.` }) },
        stopWhen: stepCountIs(2),
        // echo would repeat the call: the answer turn may not call.
        prepareStep: ({ stepNumber }) => (stepNumber > 0 ? { toolChoice: 'none' } : undefined),
      };
      const where = `${m.provider} store=${store} stream=${stream}`;
      let steps;
      if (stream) {
        const r = streamText(opts);
        await r.consumeStream();
        steps = await r.steps;
      } else {
        steps = (await generateText(opts)).steps;
      }
      assert.equal(steps.length, 2, where);
      assert.deepEqual(steps[0].toolCalls.map((c) => [c.toolName, c.input]), [['get_weather', { city: 'Paris', days: 2 }]], where);
      // The first turn's text ("user: assistant:", echo's answer around the
      // call) comes back, by item_reference or as text, then the result.
      assert.match(steps[1].text, /^user: <tool_call>.*<\/tool_call> assistant: user: assistant: (assistant: )?tool: Sunny for 2 days in Paris\. assistant:$/, where);
      answers[m.provider] ??= steps[1].text;
      assert.equal(steps[1].text, answers[m.provider], `${where}: another prompt than the provider's first`);
    }
  }
});

test('an item_reference that names no stored message is 404 naming it', { skip: noEcho }, async () => {
  const r = await fetch(`${baseURL}/responses`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'echo', input: [{ role: 'user', content: 'x' }, { type: 'item_reference', id: 'msg-0123' }] }) });
  assert.equal(r.status, 404);
  assert.equal((await r.json()).error.param, 'input[1].id');
});

test('LangChain on echo: the ToolMessage reaches the model in the answer turn', { skip: noEcho }, async () => {
  const weather = lcTool(async ({ city, days }) => `Sunny for ${days} days in ${city}.`, { name: 'get_weather', schema: Weather });
  const llm = new ChatOpenAI({ model: 'echo', apiKey: 'unused', configuration: { baseURL }, maxRetries: 0 });
  const ai = await llm.bindTools([weather]).invoke(echoCall);
  assert.deepEqual(ai.tool_calls.map((c) => [c.name, c.args]), [['get_weather', { city: 'Paris', days: 2 }]]);
  const result = await weather.invoke(ai.tool_calls[0]);
  const answer = await llm.bindTools([weather]).invoke([['user', echoCall], ai, result], { tool_choice: 'none' });
  assert.match(answer.content, /tool: Sunny for 2 days in Paris\. assistant:$/);
});
