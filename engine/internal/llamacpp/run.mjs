// Evaluates token ids with llama.cpp (node-llama-cpp's prebuilt CPU build)
// and prints the logits after the prompt and the greedy continuation.
//
// Request on stdin (JSON): {"jobs": [{"model": path, "vocab": n, "tokens":
// [ids], "steps": n, "logitSteps": n, "context": n, "tokenize": [texts]},
// ...], "threads":
// n}. Reply on stdout: {"results": [{"steps": [{"token": id, "logits": [n
// floats]}, ...], "tokens": [[ids], ...]}, ...]}, one per job, in order.
// Only the first "logitSteps" steps (default all) carry their logits; the
// others are llama.cpp's own greedy choice. "decodeSeconds" is the wall
// time of steps 1.. (one token each). With "bench": n instead of steps,
// llama.cpp generates n+1 tokens greedily in its own loop and
// "decodeSeconds" is the time of the last n; "promptSeconds" is the time
// from the call to the first token (the prompt in one batch, and one
// sampling), "decodeCPUSeconds" and "promptCPUSeconds" the process's CPU
// time (user and system) in the same spans, and "rss" its resident bytes
// after the loop. With "parallel": n as well (bench jobs only), n
// sequences of one context each do the same, evaluated together in one
// batch per step; "decodeSeconds" is then the time from every sequence's
// first token to the last one's end, in which each generates n tokens.
// With "promptRuns": n (and tokens, no steps or bench), the prompt is
// evaluated n times on a cleared sequence, each time until its first
// (greedy) token, and "prompts" holds each run's wall and CPU seconds
// ({"seconds", "cpuSeconds"}): the time to first token of a request whose
// prompt is those tokens.
// With "special": true, "special" holds the vocabulary's BOS, EOS and EOT
// ids (-1: none), whether it adds BOS and EOS, and every token id that
// ends a generation ("eog").
// With "pieces": true, "pieces" holds each of the vocab tokens' text
// alone, hex-encoded UTF-8.
// "tokens" are the tokenize texts' token ids, special-token text parsed as
// special tokens and no BOS added (llama_tokenize with parse_special).
// Step 0's logits
// are those after the prompt; each step's token is the argmax of its
// logits and the input of the next step. Logits come for every step.
//
// The context keeps its KV cache in F32 and runs without flash attention,
// so that llama.cpp's arithmetic is that of the plain CPU path.
import {getLlama} from "node-llama-cpp";
import {readFileSync} from "node:fs";

const {jobs, threads} = JSON.parse(readFileSync(0, "utf8"));
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const results = [];
for (const req of jobs) {
  const model = await llama.loadModel({modelPath: req.model, useMmap: true});
  const tokens = (req.tokenize ?? []).map((text) => Array.from(model.tokenize(text, true)));
  // Each token's piece alone (llama_token_to_piece without special
  // tokens), as UTF-8 in hex: a piece may be part of a code point.
  const pieces = req.pieces
    ? Array.from({length: req.vocab}, (_, i) => Buffer.from(model.detokenize([i], false), "utf8").toString("hex"))
    : undefined;
  // The vocabulary's special tokens as llama.cpp reads them.
  const m = model._model;
  const special = req.special
    ? {
        bos: m.tokenBos(), eos: m.tokenEos(), eot: m.eotToken(),
        addBos: m.shouldPrependBosToken(), addEos: m.shouldAppendEosToken(),
        eog: Array.from({length: req.vocab}, (_, i) => i).filter((i) => m.isEogToken(i)),
      }
    : undefined;
  if (!req.steps && !req.bench && !req.promptRuns) {
    results.push({steps: [], tokens, pieces, special});
    await model.dispose();
    continue;
  }
  const parallel = req.parallel ?? 1;
  const context = await model.createContext({
    contextSize: (req.context ?? 256) * parallel,
    sequences: parallel,
    batchSize: Math.max(req.tokens.length * parallel, 32),
    flashAttention: false,
    experimentalKvCacheKeyType: "F32",
    experimentalKvCacheValueType: "F32",
    threads: threads ?? 1,
  });
  if (req.bench && parallel > 1) {
    // Batched decode: parallel sequences, each the same prompt and then
    // bench greedy tokens, which node-llama-cpp evaluates together (one
    // llama_decode per step for every sequence that has a token waiting),
    // as llama.cpp's server does with -np. The clock starts once every
    // sequence has its first token and stops when the last one is done.
    let firstAll = 0;
    let cpuStart = null;
    let started = 0;
    const called = performance.now();
    const cpuCalled = process.cpuUsage();
    const runs = Array.from({length: parallel}, () => context.getSequence()).map(async (seq) => {
      let n = 0;
      for await (const tok of seq.evaluate(req.tokens, {temperature: 0})) {
        if (n === 0 && ++started === parallel) {
          firstAll = performance.now();
          cpuStart = process.cpuUsage();
        }
        if (++n > req.bench) break;
      }
    });
    await Promise.all(runs);
    const end = performance.now();
    const cpuEnd = process.cpuUsage();
    const cpu = (a, b) => (b.user + b.system - a.user - a.system) / 1e6;
    results.push({
      steps: [], tokens, special, decodeSeconds: (end - firstAll) / 1000, promptSeconds: (firstAll - called) / 1000,
      decodeCPUSeconds: cpu(cpuStart, cpuEnd), promptCPUSeconds: cpu(cpuCalled, cpuStart), rss: process.memoryUsage().rss,
    });
    await context.dispose();
    await model.dispose();
    continue;
  }
  const seq = context.getSequence();
  if (req.promptRuns) {
    const cpu = (a, b) => (b.user + b.system - a.user - a.system) / 1e6;
    const prompts = [];
    for (let i = 0; i < req.promptRuns; i++) {
      await seq.clearHistory();
      const called = performance.now();
      const cpuCalled = process.cpuUsage();
      for await (const tok of seq.evaluate(req.tokens, {temperature: 0})) break;
      prompts.push({seconds: (performance.now() - called) / 1000, cpuSeconds: cpu(cpuCalled, process.cpuUsage())});
    }
    results.push({steps: [], tokens, special, prompts, rss: process.memoryUsage().rss});
    await context.dispose();
    await model.dispose();
    continue;
  }
  if (req.bench) {
    // Decode speed: llama.cpp's own generation loop, greedy, after the
    // prompt; the clock starts at the first generated token.
    let n = 0;
    let start = 0;
    let cpuStart = null;
    const called = performance.now();
    const cpuCalled = process.cpuUsage();
    for await (const tok of seq.evaluate(req.tokens, {temperature: 0})) {
      if (n === 0) {
        start = performance.now();
        cpuStart = process.cpuUsage();
      }
      if (++n > req.bench) break;
    }
    results.push({steps: [], tokens, special, decodeSeconds: (performance.now() - start) / 1000});
    const cpuEnd = process.cpuUsage();
    const cpu = (a, b) => (b.user + b.system - a.user - a.system) / 1e6;
    Object.assign(results[results.length - 1], {
      promptSeconds: (start - called) / 1000,
      decodeCPUSeconds: cpu(cpuStart, cpuEnd), promptCPUSeconds: cpu(cpuCalled, cpuStart),
      rss: process.memoryUsage().rss,
    });
    await context.dispose();
    await model.dispose();
    continue;
  }
  const steps = [];
  const logitSteps = req.logitSteps ?? req.steps;
  const ask = (s) => (s < logitSteps ? {logits: true} : {token: true, options: {temperature: 0}});
  let input = req.tokens.map((t, i) => (i === req.tokens.length - 1 ? [t, {generateNext: ask(0)}] : t));
  let decodeStart = 0;
  for (let s = 0; s < req.steps; s++) {
    if (s === 1) decodeStart = performance.now();
    const res = await seq.controlledEvaluate(input);
    const next = res[res.length - 1].next;
    let best = next.token;
    let logits = null;
    if (s < logitSteps) {
      logits = new Array(req.vocab).fill(0);
      for (const [t, v] of next.logits) logits[t] = v;
      best = 0;
      for (let i = 1; i < logits.length; i++) if (logits[i] > logits[best]) best = i;
    }
    steps.push({token: best, logits});
    input = [[best, {generateNext: ask(s + 1)}]];
  }
  const decodeSeconds = req.steps > 1 ? (performance.now() - decodeStart) / 1000 : 0;
  results.push({steps, tokens, pieces, special, decodeSeconds});
  await context.dispose();
  await model.dispose();
}
process.stdout.write(JSON.stringify({results}));
await llama.dispose();
