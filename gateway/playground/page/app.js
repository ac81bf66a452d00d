// app.js: the page. The composer builds a request (route, model,
// transport, JSON body); Send starts one Run per copy, each with its own
// card: streamed output, live figures, raw events, Stop and Drop.

const state = {
  key: sessionStorage.getItem("streamgate.key") || "",
  resumable: "unknown", // "yes" once an answer carried Streamgate-Stream-Id
  models: null, // ids from /v1/models; null while loading
  metadata: new Map(), // model name -> Promise of {ok, status, body}
  nextRun: 1,
  sockets: 0, // sockets opened so far, to number them
  socket: null, // the shared WebSocket
  bodyEdits: 0, // times the user typed into the body
};

const ROUTES = {
  chat: { frame: "chat.completions", path: () => "/v1/chat/completions" },
  completion: { frame: "completions", path: () => "/v1/completions" },
  triton: { frame: "generate", path: (model) => `/v2/models/${encodeURIComponent(model)}/generate_stream` },
};

const TRANSPORTS = {
  fetch: { label: "fetch", start: (run) => startFetch(run) },
  eventsource: { label: "EventSource", start: (run) => startEventSource(run) },
  ws: { label: "WebSocket", start: (run) => startWS(run) },
};

const $ = (id) => document.getElementById(id);
const OTHER = "\u0000other"; // the model select's "Other…" option
const LOG_HEAD = 1500; // raw event lines kept from a request's start
const LOG_TAIL = 500; // and from its end

// ---- Server answers ---------------------------------------------------

// api GETs path with the API key; body is parsed JSON when it is JSON.
async function api(path) {
  const resp = await fetch(path, { headers: authHeaders(), cache: "no-store" });
  const text = await resp.text();
  let body = text;
  try {
    body = JSON.parse(text);
  } catch { /* not JSON: keep the text */ }
  return { ok: resp.ok, status: resp.status, text, body };
}

function metadata(model) {
  if (!state.metadata.has(model)) {
    const p = api("/v2/models/" + encodeURIComponent(model)).catch((e) => ({ ok: false, status: 0, text: e.message }));
    state.metadata.set(model, p);
    // A failure is not cached: the model may be loaded later.
    p.then((r) => { if (!r.ok) state.metadata.delete(model); });
  }
  return state.metadata.get(model);
}

// noteResumable records that the server makes resumable streams.
function noteResumable() {
  if (state.resumable === "yes") return;
  state.resumable = "yes";
  $("transport-es").hidden = false;
  showTransport();
}

// interpret reads one event's data for route: its text, whether it is a
// token (carries output), its finish reason and usage, or an error.
function interpret(route, data) {
  if (data === "[DONE]") return { done: true };
  if (data instanceof Unparsable || data === null || typeof data !== "object" || Array.isArray(data)) return { unknown: true };
  if ("error" in data) return { error: true };
  if (route !== "triton") {
    const c = Array.isArray(data.choices) ? data.choices[0] : undefined;
    const text = c?.delta?.content ?? c?.message?.content ?? c?.text ?? "";
    return { text: String(text), token: text !== "", finish: c?.finish_reason ?? null, usage: data.usage ?? null };
  }
  if ("text_output" in data) {
    const t = Array.isArray(data.text_output) ? data.text_output.join("") : String(data.text_output ?? "");
    return { text: t, token: t !== "", finish: data.finish_reason ?? null };
  }
  // Any other model: one line of its outputs per response.
  const parts = [];
  for (const [k, v] of Object.entries(data)) {
    if (k !== "model_name" && k !== "model_version" && k !== "id") parts.push(`${k}=${JSON.stringify(v)}`);
  }
  return { record: parts.join("  ") || "(no outputs)", token: true };
}

// ---- A request and its card -------------------------------------------

class Run {
  constructor(spec) {
    Object.assign(this, spec); // id, route, model, transport, path, bodyText
    this.card = $("card-template").content.firstElementChild.cloneNode(true);
    this.q = (sel) => this.card.querySelector(sel);
    this.out = this.q(".output");
    this.textNode = null;
    this.pendingText = "";
    this.logHead = []; // the first LOG_HEAD lines of the raw event log
    this.logTail = []; // the last LOG_TAIL lines after those
    this.logCount = 0;
    this.logShown = 0; // lines of logHead in the page
    this.logEnded = false; // logTail is in the page
    this.finished = false;
    this.stopping = false;
    this.sid = null; // resumable stream id
    this.lastEventId = ""; // SSE id of the last event; on the WebSocket, seq + 1
    this.records = false; // output is lines of tensors, not text
    this.finish = null;
    this.usage = null;
    this.socket = null;
    this.cut = () => {};
    this.frame = 0;
    this.chartAt = 0;
    this.card.dataset.run = this.id;
    this.q(".name").textContent = "#" + this.id.slice(1);
    this.setWhat();
    this.setState("connecting", "waiting");
    this.q(".stop").onclick = () => this.stop();
    this.q(".drop").onclick = () => this.drop();
    this.q(".remove").onclick = () => {
      if (!this.finished) this.stop();
      this.card.remove();
      showEmpty();
    };
    this.q(".log").addEventListener("toggle", () => this.render());
  }

  start() {
    this.figures = new Figures(performance.now());
    this.log(this.figures.start, this.transport === "ws"
      ? `WebSocket ${ROUTES[this.route].frame} frame`
      : `POST ${this.path}`);
    TRANSPORTS[this.transport].start(this);
  }

  setWhat() {
    let how = TRANSPORTS[this.transport].label;
    if (this.socket) how += " #" + this.socket.n;
    const route = { chat: "chat", completion: "completion", triton: "generate_stream" }[this.route];
    this.q(".what").textContent = `${route} · ${this.model} · ${how}`;
  }

  setState(s, label = s) {
    this.card.dataset.state = s;
    this.q(".badge").textContent = label;
    const live = !["done", "cancelled", "dropped", "error"].includes(s);
    this.q(".stop").disabled = !live || this.stopping;
    this.q(".drop").disabled = !live;
  }

  // log adds a line to the raw event log.
  log(at, text) {
    const t = ((at - (this.figures?.start ?? at)) / 1000).toFixed(3).padStart(7);
    const line = `+${t}s  ${text}\n`;
    this.logCount++;
    if (this.logHead.length < LOG_HEAD) {
      this.logHead.push(line);
    } else {
      this.logTail.push(line);
      if (this.logTail.length > LOG_TAIL) this.logTail.shift();
    }
    this.schedule();
  }

  // responded notes an HTTP answer's status and stream id.
  responded(resp) {
    this.log(performance.now(), `HTTP ${resp.status} ${resp.statusText} ${resp.headers.get("Content-Type") || ""}`);
    const sid = resp.headers.get("Streamgate-Stream-Id");
    if (sid) {
      this.sid = sid;
      noteResumable();
    }
  }

  // receive takes one event: raw is its text for the log, data its
  // parsed payload, eventId the SSE id or WebSocket seq.
  receive(raw, data, at, eventId) {
    this.log(at, raw);
    if (eventId !== null && eventId !== undefined && eventId !== "") this.lastEventId = String(eventId);
    if (this.finished) return; // after Stop: logged, not shown
    const r = interpret(this.route, data);
    if (r.done) {
      this.end("done");
      return;
    }
    if (r.error) {
      this.fail("The server sent an error", typeof raw === "string" ? rawData(raw) : JSON.stringify(data));
      return;
    }
    if (r.unknown) {
      this.fail("An event that is not a JSON object", rawData(raw));
      return;
    }
    if (this.card.dataset.state === "connecting") this.setState("streaming", "streaming");
    if (r.record !== undefined) {
      this.records = true;
      this.pendingText += r.record + "\n";
    } else if (r.text) {
      this.pendingText += r.text;
    }
    if (r.token) this.figures.token(at);
    if (r.finish) this.finish = r.finish;
    if (r.usage) this.usage = r.usage;
    this.schedule();
  }

  // wsFrame takes one frame of the shared socket for this run.
  wsFrame(f, text, at) {
    if (typeof f.stream === "string" && !this.sid) {
      this.sid = f.stream;
      noteResumable();
    }
    switch (f.type) {
      case "data":
        this.receive(text, f.data, at, typeof f.seq === "number" ? String(f.seq + 1) : null);
        break;
      case "done":
        this.log(at, text);
        this.end(f.reason === "cancelled" ? "cancelled" : "done");
        break;
      case "error":
        this.log(at, text);
        this.fail("The server sent an error frame", text);
        break;
      default:
        this.log(at, text);
    }
  }

  // streamClosed: the server ended the event stream.
  streamClosed() {
    if (this.finished) return;
    if (this.route === "triton") this.end("done"); // Triton streams just end
    else this.fail("The stream ended early", "The event stream closed without data: [DONE].");
  }

  socketClosed(sock, e) {
    if (this.finished) return;
    this.log(performance.now(), `WebSocket closed: ${e.code} ${e.reason}`);
    if (sock.dropped && this.sid) {
      this.resume(() => startWS(this, true));
      return;
    }
    if (sock.dropped) {
      this.dropped("The socket was closed under this request. This server did not make the stream resumable, so it cancelled the request.");
      return;
    }
    this.fail("The WebSocket closed", sock.opened
      ? `code ${e.code}${e.reason ? ": " + e.reason : ""}`
      : `code ${e.code} before it opened: the server refused the handshake (an API key or origin it does not accept?)`);
  }

  stop() {
    if (this.finished || this.stopping) return;
    this.stopping = true;
    if (this.transport === "ws" && this.socket?.live) {
      // The server answers with done/cancelled once the model stopped.
      this.socket.send({ type: "cancel", id: this.id });
      this.setState("streaming", "stopping");
      return;
    }
    this.cut();
    if (this.sid) this.deleteStream();
    this.end("cancelled");
  }

  drop() {
    if (this.finished) return;
    if (this.transport === "ws") {
      this.socket?.drop(); // socketClosed continues
      return;
    }
    this.cut();
    if (!this.sid) {
      this.dropped("The connection was cut. This server did not make the stream resumable (no Streamgate-Stream-Id), so it cancelled the request.");
      return;
    }
    this.resume(() => (this.transport === "eventsource" ? openEventSource(this) : startFetch(this, true)));
  }

  // resume marks the cut and reconnects after a moment, so that the gap
  // shows.
  resume(reconnect) {
    this.mark(`connection dropped after event ${this.lastEventId || 0}: resuming stream ${this.sid}`);
    this.setState("streaming", "resuming");
    setTimeout(() => {
      if (this.finished) return;
      this.setState("streaming", "streaming");
      reconnect();
    }, 500);
  }

  async deleteStream() {
    try {
      const resp = await fetch(streamURL(this.sid), { method: "DELETE", headers: authHeaders() });
      this.log(performance.now(), `DELETE ${streamURL(this.sid)}: HTTP ${resp.status}`);
    } catch (e) {
      this.log(performance.now(), `DELETE ${streamURL(this.sid)}: ${e.message}`);
    }
  }

  end(how) {
    if (this.finished) return;
    this.finished = true;
    if (how === "done") this.setState("done", this.finish ? `done · ${this.finish}` : "done");
    else this.setState("cancelled", "cancelled");
    this.cleanup();
  }

  dropped(why) {
    if (this.finished) return;
    this.finished = true;
    this.mark("connection dropped");
    this.problem("Dropped", why, false);
    this.setState("dropped", "dropped");
    this.cleanup();
  }

  fail(title, detail) {
    if (this.finished) return;
    this.finished = true;
    this.problem(title, detail, true);
    this.setState("error", "error");
    this.cleanup();
  }

  httpError(resp, text) {
    const retry = resp.headers.get("Retry-After");
    this.log(performance.now(), text);
    this.fail(`HTTP ${resp.status} ${resp.statusText}${retry ? ` · Retry-After ${retry}s` : ""}`, text);
  }

  cleanup() {
    if (this.socket) this.socket.runs.delete(this.id);
    this.render(); // now, not at the next frame: a hidden tab may have none
    showSocket();
  }

  problem(title, detail, bad) {
    const box = this.q(".problem");
    const strong = document.createElement("strong");
    strong.textContent = title;
    const pre = document.createElement("pre");
    pre.textContent = detail;
    box.replaceChildren(strong, pre);
    box.hidden = false;
    box.classList.toggle("soft", !bad);
  }

  // mark puts a note into the output, between the text before and after.
  mark(text) {
    this.flushText();
    const m = document.createElement("span");
    m.className = "mark";
    m.textContent = text;
    this.out.append(m);
    this.textNode = null;
    this.log(performance.now(), "— " + text);
  }

  flushText() {
    if (this.pendingText === "") return;
    if (!this.textNode) {
      this.textNode = document.createTextNode("");
      this.out.append(this.textNode);
    }
    this.textNode.appendData(this.pendingText);
    this.pendingText = "";
  }

  // schedule renders at the next animation frame: many events, one paint.
  schedule() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.render();
    });
  }

  render() {
    const stick = this.out.scrollTop + this.out.clientHeight >= this.out.scrollHeight - 4;
    this.out.classList.toggle("records", this.records);
    this.flushText();
    if (stick) this.out.scrollTop = this.out.scrollHeight;
    const f = this.figures;
    this.card.classList.toggle("no-output", this.finished && (!f || f.tokens === 0) && this.out.textContent === "");
    this.card.classList.toggle("no-gaps", !f || f.gaps.length === 0);
    if (f) {
      this.q(".ttft").textContent = ms(f.ttft);
      this.q(".tokens").textContent = String(f.tokens);
      this.q(".unit-label").textContent = this.records ? "responses" : "tokens";
      this.q(".rate-label").textContent = this.records ? "resp/s" : "tokens/s";
      this.q(".rate").textContent = perSecond(f.rate);
      this.q(".gmax").textContent = ms(f.maxGap);
      // The median sorts every gap and the chart draws a column per
      // pixel: at most ten times a second.
      const now = performance.now();
      if (this.finished || now - this.chartAt > 100) {
        this.chartAt = now;
        const median = f.quantile(0.5);
        this.q(".p50").textContent = ms(median);
        drawGaps(this.q(".chart"), f, median);
      } else {
        this.schedule();
      }
    }
    const summary = [];
    if (this.usage) summary.push(`usage: ${this.usage.prompt_tokens} prompt + ${this.usage.completion_tokens} completion tokens`);
    if (this.sid) summary.push(`stream ${this.sid}`);
    this.q(".summary").textContent = summary.join(" · ");
    this.q(".log .n").textContent = String(this.logCount);
    if (this.q(".log").open) this.renderLog();
  }

  // renderLog appends what the open log does not show yet: the first
  // LOG_HEAD lines as they come, the last LOG_TAIL once the request ended.
  renderLog() {
    const pre = this.q(".log pre");
    if (this.logShown < this.logHead.length) {
      pre.append(this.logHead.slice(this.logShown).join(""));
      this.logShown = this.logHead.length;
    }
    if (this.finished && !this.logEnded && this.logTail.length > 0) {
      this.logEnded = true;
      const skipped = this.logCount - this.logHead.length - this.logTail.length;
      if (skipped > 0) pre.append(`… ${skipped} lines not kept …\n`);
      pre.append(this.logTail.join(""));
    }
  }
}

// rawData is the data of a logged SSE line ("id: N  {...}"), or the line.
function rawData(raw) {
  const m = /^id: \S*  ([\s\S]*)$/.exec(raw);
  return m ? m[1] : raw;
}

// ---- The composer -----------------------------------------------------

function route() { return document.querySelector('input[name="route"]:checked').value; }
function transport() { return document.querySelector('input[name="transport"]:checked').value; }

function model() {
  const v = $("model").value;
  return v === OTHER ? $("model-other").value.trim() : v;
}

// formBody is the request body the form describes.
async function formBody() {
  if (route() === "triton") return tritonBody(model());
  const b = { model: model() };
  const prompt = $("prompt").value;
  if (route() === "chat") b.messages = [{ role: "user", content: prompt }];
  else b.prompt = prompt;
  b.stream = true;
  b.stream_options = { include_usage: true };
  setNumber(b, "max_tokens", $("max-tokens").value);
  setNumber(b, "temperature", $("temperature").value);
  setNumber(b, "seed", $("seed").value);
  return b;
}

function setNumber(obj, key, text) {
  if (text.trim() === "") delete obj[key];
  else obj[key] = Number(text);
}

// tritonBody is a generate_stream body with a value for each input in the
// model's metadata: the prompt for text inputs, small sample values else.
async function tritonBody(name) {
  if (!name) return {};
  const md = await metadata(name);
  if (!md.ok || !Array.isArray(md.body?.inputs)) return {};
  const b = {};
  for (const input of md.body.inputs) b[input.name] = sampleValue(input);
  return b;
}

function sampleValue(input) {
  const { name, datatype } = input;
  const shape = Array.isArray(input.shape) ? input.shape : [1];
  const n = shape.reduce((p, d) => p * (d < 0 ? 3 : d), 1);
  const one = (i) => {
    switch (datatype) {
      case "BYTES":
        if (name === "sampling_parameters") return JSON.stringify({ max_tokens: 64, temperature: 0.8 });
        return $("prompt").value || "Once upon a time";
      case "BOOL":
        return name === "stream" || name === "exclude_input_in_output";
      case "FP16": case "BF16": case "FP32": case "FP64":
        return 0.5;
      default:
        if (/delay/i.test(name)) return 300;
        if (/^wait$/i.test(name)) return 0;
        return n === 1 ? 3 : i + 1;
    }
  };
  if (shape.length <= 1 && n === 1) return one(0);
  return Array.from({ length: n }, (_, i) => one(i));
}

// setBody replaces the body editor's text.
function setBody(obj) {
  $("body").value = JSON.stringify(obj, null, 2);
  checkBody();
}

// resetBody sets the body from the form, unless the route or model
// changed or the user typed into the body while the model's metadata
// was on its way.
async function resetBody() {
  const want = `${route()}/${model()}/${state.bodyEdits}`;
  const b = await formBody();
  if (`${route()}/${model()}/${state.bodyEdits}` === want) setBody(b);
}

// patchBody sets one form field into the body, leaving the rest as the
// user edited it.
function patchBody(field) {
  let b;
  try {
    b = JSON.parse($("body").value);
  } catch {
    return; // checkBody already says why
  }
  if (b === null || typeof b !== "object" || Array.isArray(b)) return;
  switch (field) {
    case "model":
      b.model = model();
      break;
    case "prompt": {
      const prompt = $("prompt").value;
      if (route() === "completion") {
        b.prompt = prompt;
        break;
      }
      if (!Array.isArray(b.messages)) b.messages = [];
      const last = b.messages.findLast((m) => m && m.role === "user");
      if (last) last.content = prompt;
      else b.messages.push({ role: "user", content: prompt });
      break;
    }
    case "max_tokens": setNumber(b, "max_tokens", $("max-tokens").value); break;
    case "temperature": setNumber(b, "temperature", $("temperature").value); break;
    case "seed": setNumber(b, "seed", $("seed").value); break;
  }
  setBody(b);
}

// fieldsFromBody shows an edited body's values in the form.
function fieldsFromBody() {
  if (route() === "triton") return;
  let b;
  try {
    b = JSON.parse($("body").value);
  } catch {
    return;
  }
  if (b === null || typeof b !== "object") return;
  if (route() === "completion" && typeof b.prompt === "string") $("prompt").value = b.prompt;
  if (route() === "chat" && Array.isArray(b.messages)) {
    const last = b.messages.findLast((m) => m && m.role === "user");
    if (last && typeof last.content === "string") $("prompt").value = last.content;
  }
  $("max-tokens").value = b.max_tokens ?? "";
  $("temperature").value = b.temperature ?? "";
  $("seed").value = b.seed ?? "";
}

function checkBody() {
  const err = $("body-error");
  try {
    JSON.parse($("body").value);
    err.hidden = true;
  } catch (e) {
    err.textContent = "The body is not valid JSON (" + e.message + "). Send shows what the server answers to it.";
    err.hidden = false;
  }
}

function showRoute() {
  const r = route();
  $("text-fields").hidden = r === "triton";
  $("max-tokens").placeholder = r === "chat" ? "no limit" : "16";
  if (r === "triton") $("body-box").open = true;
  fillModels();
  showPath();
}

function showPath() {
  const r = route();
  $("route-path").textContent = transport() === "ws"
    ? `WebSocket /v1/ws  {"type":"${ROUTES[r].frame}", …}`
    : `POST ${ROUTES[r].path(model() || "{model}")}`;
}

function showTransport() {
  const t = transport();
  let hint = {
    fetch: "fetch() POSTs the request and reads the answer as an event stream. Stop aborts the fetch: the server cancels the work.",
    eventsource: "A POST creates a resumable stream; EventSource reads /v1/streams/{id} and reconnects with Last-Event-ID by itself.",
    ws: "Every request shares one streamgate.v1 socket, interleaved; Stop sends a cancel frame. Send several at once with ×.",
  }[t];
  if (t !== "ws" && Number($("count").value) > 6) {
    hint += " Browsers open at most 6 HTTP/1.1 connections to a server: the requests beyond wait for one (the WebSocket has no such limit).";
  }
  $("transport-hint").textContent = hint;
  showPath();
}

// fillModels lists the text models of /v1/models; on the Triton route
// also names used before and "Other…" for any model upstream serves.
function fillModels() {
  const sel = $("model");
  const before = model();
  const names = [...(state.models ?? [])];
  if (route() === "triton") {
    for (const n of remembered()) if (!names.includes(n)) names.push(n);
  }
  const opts = names.map((n) => new Option(n, n));
  if (route() === "triton") opts.push(new Option("Other…", OTHER));
  if (opts.length === 0) opts.push(new Option("(no text models)", ""));
  sel.replaceChildren(...opts);
  if (names.includes(before)) sel.value = before;
  else if (names.includes("stories260k")) sel.value = "stories260k";
  else if (names.length === 0 && route() === "triton") sel.value = OTHER;
  modelChanged();
}

function remembered() {
  try {
    const v = JSON.parse(localStorage.getItem("streamgate.tritonModels") || "[]");
    return Array.isArray(v) ? v.filter((x) => typeof x === "string").slice(0, 20) : [];
  } catch {
    return [];
  }
}

function remember(name) {
  if (state.models?.includes(name) || remembered().includes(name)) return;
  localStorage.setItem("streamgate.tritonModels", JSON.stringify([name, ...remembered()].slice(0, 20)));
}

async function modelChanged() {
  $("model-other-box").hidden = $("model").value !== OTHER;
  const name = model();
  showPath();
  const info = $("model-info");
  if (!name) {
    info.classList.remove("error-text");
    info.textContent = route() === "triton"
      ? "Type the name of any model upstream serves."
      : state.models === null ? "Loading models…" : "No text models upstream: the Triton route takes any model by name.";
    if (route() === "triton") setBody({});
    return;
  }
  if (route() === "triton") await resetBody();
  else patchBody("model");
  const md = await metadata(name);
  if (name !== model()) return;
  if (!md.ok) {
    info.textContent = `GET /v2/models/${name}: HTTP ${md.status} ${md.text}`;
    info.classList.add("error-text");
    return;
  }
  info.classList.remove("error-text");
  if (route() === "triton") remember(name);
  const inputs = (md.body.inputs || []).map((i) => `${i.name} ${i.datatype}[${(i.shape || []).join(",")}]`);
  info.textContent = `${md.body.platform || "model"} · inputs: ${inputs.join(", ") || "none"}`;
}

async function loadModels() {
  const r = await api("/v1/models").catch((e) => ({ ok: false, status: 0, text: e.message }));
  if (r.ok && Array.isArray(r.body?.data)) {
    state.models = r.body.data.map((m) => m.id).filter((id) => typeof id === "string");
  } else {
    state.models = [];
  }
  fillModels();
  if (!r.ok) {
    $("model-info").textContent = `GET /v1/models: HTTP ${r.status} ${r.text}`;
    $("model-info").classList.add("error-text");
  }
}

async function loadServer() {
  const [md, ready] = await Promise.all([
    api("/v2").catch((e) => ({ ok: false, status: 0, text: e.message })),
    fetch("/readyz", { headers: authHeaders(), cache: "no-store" }).then((r) => r.ok, () => false),
  ]);
  if (!md.ok) {
    setServer("down", `GET /v2: HTTP ${md.status} ${md.text}`);
    return;
  }
  const name = `${md.body.name || "server"} ${md.body.version || ""}`.trim();
  setServer(ready ? "ready" : "down", `${name} · ${ready ? "ready" : "not ready"} · ${location.host}`);
}

function setServer(cls, text) {
  const el = $("server");
  el.className = "server muted " + cls;
  const dot = document.createElement("span");
  dot.className = "dot";
  el.replaceChildren(dot, text);
}

function showSocket() {
  const s = state.socket;
  const el = $("socket");
  if (!s) {
    el.textContent = "WebSocket: not connected";
    return;
  }
  let text = `WebSocket #${s.n}: ${s.status}`;
  if (s.status === "closed") text += ` (${s.closeInfo})`;
  else text += ` · ${s.runs.size} in flight`;
  if (s.note) text += ` · ${s.note}`;
  el.textContent = text;
}

function showEmpty() {
  $("empty").hidden = $("cards").children.length > 0;
}

async function send() {
  const r = route();
  const name = model();
  if (!name) {
    $("model-info").textContent = "Pick or type a model first.";
    return;
  }
  const n = Math.max(1, Math.min(16, Math.floor(Number($("count").value)) || 1));
  const bodyText = $("body").value;
  const runs = [];
  for (let i = 0; i < n; i++) {
    runs.push(new Run({
      id: "r" + state.nextRun++,
      route: r,
      model: name,
      transport: transport(),
      path: ROUTES[r].path(name),
      bodyText,
    }));
  }
  $("cards").prepend(...runs.map((run) => run.card));
  showEmpty();
  for (const run of runs) run.start();
}

function copyCurl() {
  const q = (s) => "'" + s.replaceAll("'", "'\\''") + "'";
  let cmd = `curl -N ${location.origin}${ROUTES[route()].path(model())} -H 'Content-Type: application/json'`;
  if (state.key) cmd += ` -H ${q("Authorization: Bearer " + state.key)}`;
  cmd += ` -d ${q(JSON.stringify(JSON.parse($("body").value)))}`;
  return cmd;
}

// ---- Theme ------------------------------------------------------------

function applyTheme(t) {
  if (t === "light" || t === "dark") document.documentElement.dataset.theme = t;
  else delete document.documentElement.dataset.theme;
  $("theme").textContent = "Theme: " + (t === "light" || t === "dark" ? t : "auto");
}

// ---- Wiring -----------------------------------------------------------

function init() {
  applyTheme(localStorage.getItem("streamgate.theme"));
  $("theme").onclick = () => {
    const next = { auto: "light", light: "dark", dark: "auto" }[localStorage.getItem("streamgate.theme") || "auto"] || "auto";
    localStorage.setItem("streamgate.theme", next);
    applyTheme(next);
  };

  $("api-key").value = state.key;
  $("api-key").addEventListener("change", () => {
    state.key = $("api-key").value.trim();
    if (state.key) sessionStorage.setItem("streamgate.key", state.key);
    else sessionStorage.removeItem("streamgate.key");
    state.metadata.clear();
    loadServer();
    loadModels();
  });

  for (const el of document.querySelectorAll('input[name="route"]')) {
    el.addEventListener("change", async () => {
      showRoute();
      if (route() !== "triton") await resetBody();
    });
  }
  for (const el of document.querySelectorAll('input[name="transport"]')) el.addEventListener("change", showTransport);
  $("model").addEventListener("change", modelChanged);
  $("model-other").addEventListener("change", modelChanged);
  $("prompt").addEventListener("input", () => patchBody("prompt"));
  $("max-tokens").addEventListener("input", () => patchBody("max_tokens"));
  $("temperature").addEventListener("input", () => patchBody("temperature"));
  $("seed").addEventListener("input", () => patchBody("seed"));
  $("body").addEventListener("input", () => {
    state.bodyEdits++;
    checkBody();
    fieldsFromBody();
  });
  $("reset-body").onclick = resetBody;
  $("copy-curl").onclick = async () => {
    const out = $("curl-out");
    let cmd;
    try {
      cmd = copyCurl();
    } catch {
      checkBody();
      return;
    }
    out.textContent = cmd;
    out.hidden = false;
    try {
      await navigator.clipboard.writeText(cmd);
      $("copy-curl").textContent = "Copied";
      setTimeout(() => { $("copy-curl").textContent = "Copy as curl"; }, 1500);
    } catch {
      // No clipboard here (not a secure context): it is shown to copy by hand.
    }
  };
  $("send").onclick = send;
  $("count").addEventListener("input", showTransport);
  for (const id of ["prompt", "body"]) {
    $(id).addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        send();
      }
    });
  }
  $("clear").onclick = () => {
    for (const card of [...$("cards").children]) {
      if (["done", "cancelled", "dropped", "error"].includes(card.dataset.state)) card.remove();
    }
    showEmpty();
  };

  showRoute();
  showTransport();
  loadServer();
  loadModels().then(() => resetBody());
}

init();
