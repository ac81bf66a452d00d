// End-to-end tests of streamgate's OpenAI-compatible routes with the
// official openai SDK. The Go test TestOpenAINodeSDK starts engine +
// upstream + gateway and runs this file with OPENAI_BASE_URL set.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.OPENAI_BASE_URL;
assert.ok(baseURL, 'OPENAI_BASE_URL must be set (…/v1)');
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0 });
const messages = [{ role: 'user', content: 'hello world' }];
// The default chat template renders "user: hello world\nassistant:", and
// the echo model streams back its words.
const echoed = 'user: hello world assistant:';

test('chat completion', async () => {
  const r = await client.chat.completions.create({ model: 'echo', messages });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].message.content, echoed);
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.deepEqual(r.usage, { prompt_tokens: 4, completion_tokens: 4, total_tokens: 8 });
});

test('chat completion stream with usage', async () => {
  const stream = await client.chat.completions.create({
    model: 'echo', messages, stream: true, stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.ok(chunks.length >= 4, `only ${chunks.length} chunks`);
  const [first, ...rest] = chunks;
  assert.deepEqual(first.choices[0].delta, { role: 'assistant', content: '' });
  const usage = rest.pop();
  assert.deepEqual(usage.choices, []);
  assert.deepEqual(usage.usage, { prompt_tokens: 4, completion_tokens: 4, total_tokens: 8 });
  const finish = rest.pop();
  assert.deepEqual(finish.choices[0].delta, {});
  assert.equal(finish.choices[0].finish_reason, 'stop');
  assert.equal(rest.map((c) => c.choices[0].delta.content).join(''), echoed);
  for (const c of chunks) {
    assert.equal(c.object, 'chat.completion.chunk');
    assert.equal(c.id, first.id);
  }
});

test('completion with max_tokens', async () => {
  const r = await client.completions.create({ model: 'echo', prompt: 'one two three', max_tokens: 2 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].text, 'one two');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 2);
});

test('completion stream', async () => {
  const stream = await client.completions.create({ model: 'echo', prompt: 'one two three', stream: true });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0].text;
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.equal(text, 'one two three');
  assert.equal(finish, 'stop');
});

test('aborted stream cancels upstream', async () => {
  // echo_slow takes 20ms a word: 50000 words only end by cancellation.
  const words = Array.from({ length: 50000 }, (_, i) => `w${i}`).join(' ');
  const ac = new AbortController();
  const stream = await client.chat.completions.create(
    { model: 'echo_slow', messages: [{ role: 'user', content: words }], stream: true, max_tokens: 50000 },
    { signal: ac.signal },
  );
  let contentChunks = 0;
  try {
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta?.content) contentChunks++;
      if (contentChunks === 2) {
        ac.abort();
        break;
      }
    }
  } catch (err) {
    // Depending on timing the SDK ends the iteration or throws its abort error.
    if (!(err instanceof OpenAI.APIUserAbortError || err.name === 'AbortError')) throw err;
  }
  assert.equal(contentChunks, 2);
  // The gateway notices the client is gone and cancels upstream.
  const origin = new URL(baseURL).origin;
  for (let i = 0; ; i++) {
    const metrics = await (await fetch(`${origin}/metrics`)).text();
    if (/streamgate_gateway_client_gone_total\{protocol="sse"\} [1-9]/.test(metrics)) break;
    assert.ok(i < 3000, 'client_gone never counted');
    await new Promise((r) => setTimeout(r, 10));
  }
});

test('unknown model', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'no-such-model', messages }),
    (err) => {
      assert.ok(err instanceof OpenAI.NotFoundError, `got ${err}`);
      assert.equal(err.status, 404);
      assert.equal(err.code, 'model_not_found');
      assert.equal(err.param, 'model');
      return true;
    },
  );
  await assert.rejects(
    client.chat.completions.create({ model: 'no-such-model', messages, stream: true }),
    OpenAI.NotFoundError,
  );
});

test('unsupported parameters', async () => {
  for (const [extra, param] of [[{ n: 2 }, 'n'], [{ logit_bias: { 5: 1 } }, 'logit_bias'],
    [{ tools: [{ type: 'web_search' }] }, 'tools\\[0\\].type']]) {
    await assert.rejects(
      client.chat.completions.create({ model: 'echo', messages, ...extra }),
      (err) => {
        assert.ok(err instanceof OpenAI.BadRequestError, `got ${err}`);
        assert.match(err.param, new RegExp(`^${param}$`));
        assert.match(err.message, new RegExp(param));
        return true;
      },
    );
  }
});

test('models', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.ok(ids.includes('echo'), `models ${ids}`);
  const m = await client.models.retrieve('echo');
  assert.equal(m.id, 'echo');
  assert.equal(m.object, 'model');
});
