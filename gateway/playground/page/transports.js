// transports.js: the three ways a Run reaches the gateway. Each sets
// run.cut (end the transport now) and reports through the Run: responded,
// receive, end, fail, streamClosed, socketClosed.
//
//   fetch        POST the request, read the answer as an event stream.
//   eventsource  POST with Streamgate-Resumable: true, then read
//                /v1/streams/{sid} with EventSource (shown only once the
//                server has answered a request with Streamgate-Stream-Id).
//   ws           one shared streamgate.v1 socket; requests are frames.

// authHeaders adds the API key, when one is set, to headers.
function authHeaders(headers = {}) {
  if (state.key) headers.Authorization = "Bearer " + state.key;
  return headers;
}

// Unparsable is event data that is not JSON.
class Unparsable {
  constructor(text) { this.text = text; }
}

// parseData parses one event's data: JSON, "[DONE]", or an Unparsable.
function parseData(text) {
  if (text === "[DONE]") return text;
  try {
    return JSON.parse(text);
  } catch {
    return new Unparsable(text);
  }
}

function streamURL(sid) {
  return "/v1/streams/" + encodeURIComponent(sid);
}

// request fetches for run, which may cut it: run's POST (asking for a
// resumable stream), or with resume the events of its stream after the
// last one seen. It returns the response, or null when the fetch failed
// (run has failed, unless it was cut).
async function request(run, ctl, resume) {
  run.cut = () => ctl.abort();
  try {
    const resp = resume
      ? await fetch(streamURL(run.sid), {
        headers: authHeaders({ Accept: "text/event-stream", "Last-Event-ID": run.lastEventId || "0" }),
        cache: "no-store",
        signal: ctl.signal,
      })
      : await fetch(run.path, {
        method: "POST",
        headers: authHeaders({ "Content-Type": "application/json", "Streamgate-Resumable": "true" }),
        body: run.bodyText,
        signal: ctl.signal,
      });
    run.responded(resp);
    return resp;
  } catch (e) {
    if (!ctl.signal.aborted) run.fail("Network error", e.message);
    return null;
  }
}

// startFetch sends run's request (or resumes its stream) and reads the
// answer.
async function startFetch(run, resume = false) {
  const ctl = new AbortController();
  const resp = await request(run, ctl, resume);
  if (resp) await readAnswer(run, resp, ctl.signal);
}

// readAnswer reads an HTTP answer into run: an error status, one JSON body
// (stream: false) or an event stream.
async function readAnswer(run, resp, signal) {
  try {
    if (!resp.ok) {
      run.httpError(resp, await resp.text());
      return;
    }
    const type = resp.headers.get("Content-Type") || "";
    if (!type.startsWith("text/event-stream")) {
      const text = await resp.text();
      run.receive(text, parseData(text), performance.now(), null);
      if (!run.finished) run.end("done");
      return;
    }
    for await (const ev of sseEvents(resp.body)) {
      run.receive(`id: ${ev.id}  ${ev.data}`, parseData(ev.data), ev.at, ev.id);
    }
    run.streamClosed();
  } catch (e) {
    if (!signal.aborted) run.fail("The stream broke", e.message);
  }
}

// startEventSource creates a resumable stream with a POST, leaves it, and
// reads it from the start with EventSource.
async function startEventSource(run) {
  const ctl = new AbortController();
  const resp = await request(run, ctl, false);
  if (!resp) return;
  if (!resp.ok || !run.sid) {
    if (resp.ok) run.mark("the server made no resumable stream (no Streamgate-Stream-Id): reading the POST's answer");
    await readAnswer(run, resp, ctl.signal);
    return;
  }
  ctl.abort(); // the stream lives on on the server for its resume grace period
  openEventSource(run);
}

// openEventSource follows /v1/streams/{sid} after run's last event.
// EventSource cannot send an Authorization header, so with an API key the
// stream is read with fetch instead.
function openEventSource(run) {
  if (state.key) {
    run.mark("EventSource cannot send the API key: reading /v1/streams with fetch");
    startFetch(run, true);
    return;
  }
  const es = new EventSource(streamURL(run.sid) + "?last_event_id=" + encodeURIComponent(run.lastEventId || "0"));
  run.cut = () => es.close();
  es.onopen = () => run.log(performance.now(), `EventSource open: GET ${streamURL(run.sid)}`);
  es.onmessage = (m) => {
    run.receive(`id: ${m.lastEventId}  ${m.data}`, parseData(m.data), performance.now(), m.lastEventId);
    if (run.finished) es.close();
  };
  es.onerror = () => {
    if (run.finished) {
      es.close();
      return;
    }
    if (es.readyState === EventSource.CLOSED) {
      run.fail("EventSource failed", "The server refused GET " + streamURL(run.sid) +
        " (EventSource does not show why: the fetch transport shows the server's answer).");
      return;
    }
    // The connection ended. Triton streams have no terminal event: their
    // end is the end of the connection. Others reconnect by themselves,
    // sending Last-Event-ID.
    if (run.route === "triton") {
      es.close();
      run.streamClosed();
      return;
    }
    run.mark(`EventSource lost the connection after event ${run.lastEventId || "0"}; reconnecting`);
  };
}

// Socket is one streamgate.v1 WebSocket shared by many runs, each named
// by its id. Frames sent before the socket opens wait in order.
class Socket {
  constructor(key) {
    this.n = ++state.sockets;
    this.key = key;
    this.runs = new Map();
    this.waiting = [];
    this.status = "connecting";
    this.opened = false;
    this.dropped = false; // closed by drop()
    this.note = "";
    const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/v1/ws";
    const protocols = ["streamgate.v1"];
    if (key) protocols.push("streamgate.key." + key);
    this.ws = new WebSocket(url, protocols); // throws SyntaxError for a key that is not a token
    this.ws.onopen = () => {
      this.status = "open";
      this.opened = true;
      for (const f of this.waiting) this.ws.send(f);
      this.waiting = [];
      showSocket();
    };
    this.ws.onmessage = (m) => this.frame(m.data, performance.now());
    this.ws.onclose = (e) => this.closed(e);
    showSocket();
  }

  get live() { return this.status === "connecting" || this.status === "open"; }

  add(run, frame) {
    this.runs.set(run.id, run);
    this.send(frame);
    showSocket();
  }

  send(frame) {
    const text = JSON.stringify(frame);
    if (this.status === "open") this.ws.send(text);
    else this.waiting.push(text);
  }

  frame(text, at) {
    let f;
    try {
      f = JSON.parse(text);
    } catch {
      this.note = "a frame that is not JSON: " + text.slice(0, 200);
      showSocket();
      return;
    }
    const run = typeof f.id === "string" ? this.runs.get(f.id) : undefined;
    if (!run) {
      // An error about a frame that named no valid id, or a frame for a
      // request this page no longer follows.
      this.note = "frame for no request: " + text.slice(0, 300);
      showSocket();
      return;
    }
    run.wsFrame(f, text, at);
    if (run.finished) {
      this.runs.delete(f.id);
      showSocket();
    }
  }

  closed(e) {
    this.status = "closed";
    this.closeInfo = e.code + (e.reason ? " " + e.reason : "");
    const runs = [...this.runs.values()];
    this.runs.clear();
    for (const run of runs) run.socketClosed(this, e);
    showSocket();
  }

  // drop closes the socket under every request on it.
  drop() {
    if (!this.live) return;
    this.dropped = true;
    this.ws.close(4000, "dropped by the playground");
  }
}

// sharedSocket returns the open (or opening) socket for the current key,
// opening one if there is none.
function sharedSocket() {
  if (!state.socket || !state.socket.live || state.socket.key !== state.key) {
    state.socket = new Socket(state.key);
  }
  return state.socket;
}

// startWS sends run's request (or, with resume, a resume frame for its
// stream) on the shared socket.
function startWS(run, resume = false) {
  let frame;
  if (resume) {
    frame = { type: "resume", id: run.id, stream: run.sid, after: Number(run.lastEventId || 0) };
  } else {
    frame = { type: ROUTES[run.route].frame, id: run.id };
    if (run.route === "triton") frame.model = run.model;
    try {
      frame.body = JSON.parse(run.bodyText);
    } catch (e) {
      // The server could not tell which request a broken frame meant.
      run.fail("The body is not JSON", e.message + " (a WebSocket frame must be JSON; the fetch transport sends the body as it is)");
      return;
    }
    if (state.resumable === "yes") frame.resumable = true;
  }
  let sock;
  try {
    sock = sharedSocket();
  } catch (e) {
    run.fail("Cannot open the WebSocket", e.message);
    return;
  }
  run.socket = sock;
  run.cut = () => sock.drop();
  run.setWhat();
  sock.add(run, frame);
}
