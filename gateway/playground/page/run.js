// run.js: one request and its card. A Run starts its transport
// (transports.js), which tells it what happens: an answer's headers, each
// event, the end. It renders the text, the figures (figures.js) and the
// raw event log at most once per animation frame.

const LOG_HEAD = 1500; // raw event lines kept from a request's start
const LOG_TAIL = 500; // and from its end

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
    if (resp.status === 401) {
      askForKey();
      this.fail(`HTTP 401: ${state.key ? "API key refused" : "API key needed"}`, keyWanted());
      return;
    }
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
      this.q(".unit-label").textContent = this.records ? "resp." : "tokens";
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
