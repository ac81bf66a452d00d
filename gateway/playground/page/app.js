// app.js: the page's state and its composer, which builds a request
// (route, model, transport, JSON body); Send starts one Run (run.js) per
// copy, each with its own card. init() at the end wires it all.

const state = {
  key: sessionStorage.getItem("streamgate.key") || "",
  resumable: "unknown", // "yes" once an answer carried Streamgate-Stream-Id
  models: null, // ids from /v1/models; null while loading
  tritonModels: null, // ready models of POST /v2/repository/index; null while loading
  metadata: new Map(), // model name -> Promise of {ok, status, body}
  nextRun: 1,
  sockets: 0, // sockets opened so far, to number them
  socket: null, // the shared WebSocket
  bodyEdits: 0, // times the user typed into the body
  needKey: false, // the server answered 401: it wants an API key
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

// ---- Server answers ---------------------------------------------------

// api GETs path (or POSTs send, when given) with the API key; body is
// parsed JSON when it is JSON.
async function api(path, send) {
  const init = { headers: authHeaders(), cache: "no-store" };
  if (send !== undefined) {
    // JSON by name: the gateway refuses text bodies (a browser sends them from any site).
    Object.assign(init, { method: "POST", body: send, headers: authHeaders({ "Content-Type": "application/json" }) });
  }
  const resp = await fetch(path, init);
  const text = await resp.text();
  let body = text;
  try {
    body = JSON.parse(text);
  } catch { /* not JSON: keep the text */ }
  if (resp.status === 401) askForKey();
  return { ok: resp.ok, status: resp.status, text, body };
}

// problemText is what a failed answer r says, in a line: its error's
// message when it has one, not the raw JSON.
function problemText(what, r) {
  if (r.status === 401) return keyWanted();
  const msg = r.body?.error?.message ?? (typeof r.body?.error === "string" ? r.body.error : r.text);
  return `${what}: HTTP ${r.status} ${String(msg).slice(0, 200)}`;
}

// keyWanted is the sentence that asks for a key, as the key box holds one
// or not.
function keyWanted() {
  return state.key
    ? "This API key was refused: enter a valid one in the API key box above."
    : "This gateway needs an API key: enter it in the API key box above.";
}

// askForKey notes that the server wants an API key and points at the box.
function askForKey() {
  state.needKey = true;
  $("api-key").classList.add("wanted");
  $("api-key").placeholder = "required";
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
  setNumber(b, "delay_ms", $("delay-ms").value);
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
    case "delay_ms": setNumber(b, "delay_ms", $("delay-ms").value); break;
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
  $("delay-ms").value = b.delay_ms ?? "";
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
// every ready model of the repository index instead, names used before
// and "Other…" for any model upstream serves.
function fillModels() {
  const sel = $("model");
  const before = model();
  const names = [...((route() === "triton" ? state.tritonModels : state.models) ?? [])];
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
  if (state.tritonModels?.includes(name) || remembered().includes(name)) return;
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

// loadModels lists the text models (/v1/models) and every ready model
// (Triton's POST /v2/repository/index, for the Triton route).
async function loadModels() {
  const failed = (e) => ({ ok: false, status: 0, text: e.message });
  const [r, index] = await Promise.all([
    api("/v1/models").catch(failed),
    api("/v2/repository/index", JSON.stringify({ ready: true })).catch(failed),
  ]);
  if (r.ok && Array.isArray(r.body?.data)) {
    state.models = r.body.data.map((m) => m.id).filter((id) => typeof id === "string");
  } else {
    state.models = [];
  }
  const names = index.ok && Array.isArray(index.body) ? index.body.map((m) => m?.name).filter((n) => typeof n === "string") : [];
  state.tritonModels = [...new Set(names)];
  fillModels();
  const bad = [[r, "GET /v1/models"], [index, "POST /v2/repository/index"]].find(([x]) => !x.ok);
  if (bad) {
    $("model-info").textContent = problemText(bad[1], bad[0]);
    $("model-info").classList.add("error-text");
  }
}

async function loadServer() {
  const [md, ready] = await Promise.all([
    api("/v2").catch((e) => ({ ok: false, status: 0, text: e.message })),
    fetch("/readyz", { headers: authHeaders(), cache: "no-store" }).then((r) => r.ok, () => false),
  ]);
  if (md.status === 401) {
    setServer("down", state.key ? "API key refused" : "needs an API key");
    return;
  }
  if (!md.ok) {
    setServer("down", problemText("GET /v2", md));
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
  if (state.needKey && !state.key) {
    $("model-info").textContent = keyWanted();
    $("model-info").classList.add("error-text");
    $("api-key").focus();
    return;
  }
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
    state.needKey = false;
    $("api-key").classList.remove("wanted");
    $("model-info").textContent = "";
    $("model-info").classList.remove("error-text");
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
  $("delay-ms").addEventListener("input", () => patchBody("delay_ms"));
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
