package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// pagePath is where the gateway's test server serves page, on the same
// origin as the API (and through nginx, on nginx's origin).
const pagePath = "/e2e/page.html"

func servePage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	io.WriteString(w, page)
}

// page is a web app using streamgate as the README shows: fetch() reading
// event streams, a streamgate.v1 WebSocket, an AbortController. The test
// drives its steps over the DevTools protocol; each step returns what the
// page saw and also records it as JSON in <pre id=result>.
const page = `<!doctype html>
<html>
<head><meta charset="utf-8"><title>streamgate e2e</title><link rel="icon" href="data:,"></head>
<body>
<pre id="result">{}</pre>
<script>
"use strict";
const results = {};
function record(name, value) {
  results[name] = value;
  document.getElementById("result").textContent = JSON.stringify(results);
  return value;
}

// sseEvents yields the events of a text/event-stream body: {id, data, t}.
async function* sseEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) {
      if (buf.trim() !== "") throw new Error("stream ended inside an event: " + JSON.stringify(buf));
      return;
    }
    buf += value;
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      let id = null;
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("id: ")) id = line.slice(4);
        else if (line.startsWith("data: ")) data.push(line.slice(6));
      }
      if (data.length === 0) continue; // a comment such as ": keepalive"
      yield { id, data: data.join("\n"), t: performance.now() };
    }
  }
}

function post(path, body, signal) {
  return fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
    signal,
  });
}

function repeat(n, first, firstDelay, delay) {
  const IN = [], DELAY = [];
  for (let i = 0; i < n; i++) { IN.push(first + i); DELAY.push(i === 0 ? firstDelay : delay); }
  return { IN, DELAY, WAIT: 0 };
}

window.e2e = {
  // (a) generate_stream read with fetch(): n events delay ms apart, then
  // ten a minute apart (the longest delay the model takes). The page
  // reads the first n and aborts, so they arrive while the stream is
  // open: a path that buffered the stream would deliver none of them.
  async sse(n, delay) {
    const ctl = new AbortController();
    const body = repeat(n + 10, 100, delay, delay);
    body.DELAY.fill(60000, n);
    const resp = await post("/v2/models/repeat_int32/generate_stream", body, ctl.signal);
    const out = {
      status: resp.status,
      contentType: resp.headers.get("content-type"),
      accelBuffering: resp.headers.get("x-accel-buffering"),
      events: [],
    };
    this.sseOut = out;
    if (resp.status === 200) {
      for await (const ev of sseEvents(resp.body)) {
        out.events.push({ id: ev.id, data: JSON.parse(ev.data) });
        if (out.events.length === n) break;
      }
    }
    ctl.abort();
    return record("sse", out);
  },

  // (b) a streaming OpenAI chat read with fetch().
  async chat(content) {
    const resp = await post("/v1/chat/completions", {
      model: "echo", stream: true, stream_options: { include_usage: true },
      messages: [{ role: "user", content }],
    });
    const out = { status: resp.status, contentType: resp.headers.get("content-type"), data: [] };
    for await (const ev of sseEvents(resp.body)) out.data.push(ev.data);
    return record("chat", out);
  },

  // (c) one streamgate.v1 socket, two requests, the long one cancelled
  // after its first data frame.
  ws() {
    return new Promise((resolve, reject) => {
      const scheme = location.protocol === "https:" ? "wss://" : "ws://";
      const ws = new WebSocket(scheme + location.host + "/v1/ws", "streamgate.v1");
      const frames = [], terminal = {};
      let cancelled = false, finished = false;
      const fail = (msg) => { if (!finished) { finished = true; reject(new Error(msg)); } };
      ws.onerror = () => fail("WebSocket error (handshake refused?)");
      ws.onclose = (e) => fail("WebSocket closed early: " + e.code + " " + e.reason);
      ws.onopen = () => {
        ws.send(JSON.stringify({ type: "generate", id: "short", model: "repeat_int32", body: repeat(3, 1, 50, 50) }));
        ws.send(JSON.stringify({ type: "generate", id: "long", model: "repeat_int32", body: repeat(100, 1000, 10, 1000) }));
      };
      ws.onmessage = (m) => {
        const f = JSON.parse(m.data);
        frames.push(f);
        if (f.type === "data" && f.id === "long" && !cancelled) {
          cancelled = true;
          ws.send(JSON.stringify({ type: "cancel", id: "long" }));
        }
        if (f.type !== "data") terminal[f.id] = true;
        if (terminal.short && terminal.long && !finished) {
          finished = true;
          const protocol = ws.protocol;
          ws.close(1000, "done");
          resolve(record("ws", { protocol, frames }));
        }
      };
    });
  },

  // (d) a long stream, aborted with its AbortController once its first
  // event is in; the test checks the engine between the two steps.
  async startLong() {
    this.ctl = new AbortController();
    const resp = await post("/v2/models/repeat_int32/generate_stream", repeat(100, 0, 10, 1000), this.ctl.signal);
    this.long = sseEvents(resp.body);
    const first = await this.long.next();
    return record("longFirst", { status: resp.status, first: JSON.parse(first.value.data) });
  },
  // (e) n long event streams at once, each aborted only by abortOne or
  // abortAll; manyState says how many delivered their first event and
  // how many ended, and lists what happened in order.
  many(n) {
    const st = { first: 0, ended: 0, log: [] };
    this.manyState = st;
    this.streams = [];
    for (let i = 0; i < n; i++) {
      const s = { i, ctl: new AbortController(), first: false, aborted: false };
      this.streams.push(s);
      (async () => {
        try {
          const resp = await post("/v2/models/repeat_int32/generate_stream", repeat(100, 1000 * i, 0, 1000), s.ctl.signal);
          if (resp.status !== 200) throw new Error("status " + resp.status);
          for await (const ev of sseEvents(resp.body)) {
            if (!s.first) { s.first = true; st.first++; st.log.push("first " + i); }
          }
          st.log.push("end " + i);
        } catch (e) {
          st.log.push((e.name === "AbortError" ? "aborted " : "failed " + e.message + " ") + i);
        }
        st.ended++;
      })();
    }
    return n;
  },
  abortOne() {
    const s = this.streams.find((s) => s.first && !s.aborted);
    s.aborted = true;
    this.manyState.log.push("abort " + s.i);
    s.ctl.abort();
    return s.i;
  },
  abortAll() {
    for (const s of this.streams) { s.aborted = true; s.ctl.abort(); }
    return this.streams.length;
  },

  async abortLong() {
    this.ctl.abort();
    const out = { eventsAfterAbort: 0, error: null, ended: false };
    try {
      for (;;) {
        const r = await this.long.next();
        if (r.done) { out.ended = true; break; }
        out.eventsAfterAbort++;
      }
    } catch (e) {
      out.error = e.name;
    }
    return record("abort", out);
  },
};
</script>
</body>
</html>
`

// TestBrowser runs a web page in headless Chromium against streamgate,
// served from the gateway's own origin and then through nginx: fetch()
// event streams, a streaming chat, a WebSocket session with a cancel, and
// an aborted fetch, checking each result and that cancelled work stops in
// the engine.
func TestBrowser(t *testing.T) {
	requireTool(t, "chromium", "/usr/bin/chromium")
	s := startStack(t)
	browser := startChromium(t)
	page := browser.openPage(t)
	t.Run("direct", func(t *testing.T) {
		runPage(t, s, page, s.url, true)
	})
	t.Run("nginx", func(t *testing.T) {
		ng := startNginx(t, s.addr)
		runPage(t, s, page, ng.url, false)
	})
}

// runPage loads the page from origin and runs its steps.
func runPage(t *testing.T, s *testStack, page *cdp, origin string, direct bool) {
	c := s.client(t)
	waitFor(t, "engine idle", func() bool { return s.eng.InFlight() == 0 })
	sseGone := metric(t, c, s.url, `streamgate_gateway_client_gone_total{protocol="sse"}`)
	wsGone := metric(t, c, s.url, `streamgate_gateway_client_gone_total{protocol="ws"}`)
	page.navigate(t, origin+pagePath)

	sseOK := t.Run("fetch generate_stream", func(t *testing.T) {
		const n, delay = 6, 50 // ms
		var got struct {
			Status         int
			ContentType    string
			AccelBuffering *string
			Events         []struct {
				ID   string
				Data map[string]any
			}
		}
		// The stream's end is ten minutes away: the page has its first n
		// events only if they were relayed as they came.
		if err := page.evalErr(t, fmt.Sprintf("e2e.sse(%d, %d)", n, delay), &got); err != nil {
			var seen struct{ Events []any }
			_ = page.evalErr(t, "e2e.sseOut", &seen)
			t.Fatalf("the page got %d of the stream's first %d events while it was open (buffered?): %v", len(seen.Events), n, err)
		}
		if got.Status != 200 || got.ContentType != "text/event-stream; charset=utf-8" {
			t.Errorf("status %d, Content-Type %q", got.Status, got.ContentType)
		}
		if direct && (got.AccelBuffering == nil || *got.AccelBuffering != "no") {
			t.Errorf("X-Accel-Buffering %v, want no", got.AccelBuffering)
		}
		if len(got.Events) != n {
			t.Fatalf("%d events, want %d: %+v", len(got.Events), n, got.Events)
		}
		for i, ev := range got.Events {
			if ev.ID != strconv.Itoa(i+1) || ev.Data["OUT"] != float64(100+i) || ev.Data["IDX"] != float64(i) ||
				ev.Data["model_name"] != "repeat_int32" || len(ev.Data) != 4 {
				t.Errorf("event %d: %+v", i, ev)
			}
		}
		waitFor(t, "the aborted stream to stop in the engine", func() bool { return s.eng.InFlight() == 0 })
	})

	chatOK := t.Run("fetch chat stream", func(t *testing.T) {
		var got struct {
			Status      int
			ContentType string
			Data        []string
		}
		page.eval(t, `e2e.chat("hello from the browser")`, &got)
		if got.Status != 200 || got.ContentType != "text/event-stream; charset=utf-8" {
			t.Errorf("status %d, Content-Type %q", got.Status, got.ContentType)
		}
		checkChatStream(t, got.Data, "hello from the browser")
	})

	wsOK := t.Run("websocket with cancel", func(t *testing.T) {
		var got struct {
			Protocol string
			Frames   []struct {
				Type, ID, Reason string
				Seq              int
				Data             map[string]any
				Error            any
			}
		}
		if err := page.evalErr(t, "e2e.ws()", &got); err != nil {
			msg := err.Error()
			if !direct {
				msg += "\n(a browser refused here while the direct run passes: nginx sends `Host: $host`, " +
					"dropping the port, so the gateway's same-origin check fails; " +
					"deploy/nginx.conf needs `proxy_set_header Host $http_host;`)"
			}
			t.Fatal(msg)
		}
		if got.Protocol != "streamgate.v1" {
			t.Errorf("protocol %q", got.Protocol)
		}
		seq := map[string]int{}
		end := map[string]string{}
		for _, f := range got.Frames {
			if end[f.ID] != "" {
				t.Errorf("frame after %s's terminal: %+v", f.ID, f)
			}
			switch f.Type {
			case "data":
				base := map[string]int{"short": 1, "long": 1000}[f.ID]
				if f.Seq != seq[f.ID] || f.Data["OUT"] != float64(base+f.Seq) || f.Data["IDX"] != float64(f.Seq) {
					t.Errorf("frame %+v, want seq %d", f, seq[f.ID])
				}
				seq[f.ID]++
			case "done":
				end[f.ID] = "done/" + f.Reason
			default:
				end[f.ID] = fmt.Sprintf("%s %v", f.Type, f.Error)
			}
		}
		if seq["short"] != 3 || end["short"] != "done/final" {
			t.Errorf("short: %d data frames, ended %q; want 3, done/final", seq["short"], end["short"])
		}
		// The long request has 100 responses a second apart; the page
		// cancelled it after the first.
		if seq["long"] < 1 || seq["long"] > 10 || end["long"] != "done/cancelled" {
			t.Errorf("long: %d data frames, ended %q; want a few, done/cancelled", seq["long"], end["long"])
		}
		waitFor(t, "the cancelled request to stop in the engine", func() bool { return s.eng.InFlight() == 0 })
	})

	abortOK := t.Run("fetch abort", func(t *testing.T) {
		var first struct {
			Status int
			First  map[string]any
		}
		page.eval(t, "e2e.startLong()", &first)
		if first.Status != 200 || first.First["OUT"] != float64(0) || first.First["IDX"] != float64(0) {
			t.Fatalf("long stream start: %+v", first)
		}
		if n := s.eng.InFlight(); n != 1 {
			t.Fatalf("engine runs %d requests while the page reads the long stream, want 1", n)
		}
		var got struct {
			EventsAfterAbort int
			Error            *string
			Ended            bool
		}
		aborted := time.Now()
		page.eval(t, "e2e.abortLong()", &got)
		if got.Error == nil || *got.Error != "AbortError" || got.Ended {
			t.Errorf("after abort the page read %+v, want an AbortError", got)
		}
		// ~100s of work left: only the abort ends it within the test.
		// Usually it stops at once; but Chromium may keep an aborted
		// HTTP/1.1 response's connection for up to 5s, draining the body
		// to reuse the socket (net/http/http_response_body_drainer.h,
		// kTimeoutInSeconds), and the gateway learns of the abort only
		// when that socket closes.
		waitFor(t, "the aborted request to stop in the engine", func() bool { return s.eng.InFlight() == 0 })
		t.Logf("the engine stopped the aborted request %v after the abort", time.Since(aborted).Round(time.Millisecond))
	})

	t.Run("results in the DOM", func(t *testing.T) {
		var text string
		page.eval(t, `document.getElementById("result").textContent`, &text)
		var results map[string]json.RawMessage
		if err := json.Unmarshal([]byte(text), &results); err != nil {
			t.Fatalf("<pre id=result>: %v: %q", err, tail(text, 2000))
		}
		// Every step that passed has its result there.
		for k, passed := range map[string]bool{"sse": sseOK, "chat": chatOK, "ws": wsOK, "longFirst": abortOK, "abort": abortOK} {
			if _, ok := results[k]; passed && !ok {
				t.Errorf("<pre id=result> lacks %q: %s", k, tail(text, 2000))
			}
		}
		if abortOK {
			var abort struct{ Error string }
			if err := json.Unmarshal(results["abort"], &abort); err != nil || abort.Error != "AbortError" {
				t.Errorf("<pre id=result> abort: %s", results["abort"])
			}
		}
	})

	// The gateway counted the cancel and the aborts as clients going away.
	wantSSE, wantWS := sseGone, wsGone
	for _, aborted := range []bool{sseOK, abortOK} {
		if aborted {
			wantSSE++
		}
	}
	if wsOK {
		wantWS++
	}
	waitFor(t, "client_gone metrics", func() bool {
		return metric(t, c, s.url, `streamgate_gateway_client_gone_total{protocol="sse"}`) == wantSSE &&
			metric(t, c, s.url, `streamgate_gateway_client_gone_total{protocol="ws"}`) == wantWS
	})
}
