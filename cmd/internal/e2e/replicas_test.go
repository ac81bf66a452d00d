package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/streamgate/streamgate/gateway/store/redistest"
	"github.com/streamgate/streamgate/gateway/ws"
)

// Resumable streams across replicas (DESIGN.md "Scale-out"): two
// `streamgate gateway` processes sharing one real redis-server, one
// `streamgate engine`, nginx in front of both. A stream cut on one
// replica is resumed on the other, over HTTP (Last-Event-ID), through
// Chromium's EventSource (also by its own reconnect after a cut
// connection) and over WebSocket; a DELETE on one replica
// stops the other's request; a replica killed mid-stream leaves its
// readers the stored events and stream_lost; Redis stopped and
// restarted under load stops no live stream and comes back by itself.

// replicaSet is the deployment of these tests.
type replicaSet struct {
	bin   string
	redis *redistest.Server
	eng   *sgProcess
	gw    [2]*sgProcess
	nginx *nginx
	c     *http.Client
}

func startReplicas(t *testing.T) *replicaSet {
	t.Helper()
	if testing.Short() {
		t.Skip("builds streamgate and runs it as processes")
	}
	dir := storiesDir(t)
	rs := &replicaSet{bin: buildStreamgate(t), redis: redistest.Start(t), c: httpClient(t)}
	rs.eng = startEngineProc(t, rs.bin, dir)
	for i := range rs.gw {
		rs.gw[i] = rs.startGateway(t)
	}
	rs.nginx = startNginx(t, rs.gw[0].addr+";\n    server "+rs.gw[1].addr)
	return rs
}

// startGateway starts one more replica on the set's Redis and engine.
func (rs *replicaSet) startGateway(t *testing.T) *sgProcess {
	return startGatewayProc(t, rs.bin, rs.eng.addr, "--redis", rs.redis.URL(), "--no-keys", "--sse-keepalive", "1s")
}

// sseStream is an event stream being read.
type sseStream struct {
	resp *http.Response
	r    *sseReader
}

// open sends a request and returns its answer as an event stream (it
// fails the test on another status). header adds headers.
func (rs *replicaSet) open(t *testing.T, ctx context.Context, method, url, body string, header ...string) *sseStream {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := rs.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	return &sseStream{resp: resp, r: newSSEReader(resp.Body)}
}

// read reads n events (n < 0: to the end of the stream).
func (s *sseStream) read(t *testing.T, n int) []sseEvent {
	t.Helper()
	var out []sseEvent
	for n < 0 || len(out) < n {
		ev, err := s.r.next()
		if err == io.EOF && n < 0 {
			return out
		}
		if err != nil {
			t.Fatalf("after %d events: %v", len(out), err)
		}
		out = append(out, ev)
	}
	return out
}

const storiesCompletion = `{"model":"stories260k","prompt":"Once upon a time","max_tokens":150,"temperature":0,"stream":true}`

// completionText joins the text of completion chunks, failing on
// anything else but [DONE].
func completionText(t *testing.T, datas []string) string {
	t.Helper()
	var b strings.Builder
	for _, d := range datas {
		if d == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Error any `json:"error"`
		}
		if err := json.Unmarshal([]byte(d), &c); err != nil || c.Error != nil {
			t.Fatalf("event %q: %v", d, err)
		}
		for _, ch := range c.Choices {
			b.WriteString(ch.Text)
		}
	}
	return b.String()
}

// checkIDs fails unless events have the ids from, from+1, … in order.
func checkIDs(t *testing.T, events []sseEvent, from int) {
	t.Helper()
	for i, ev := range events {
		if ev.ID != strconv.Itoa(from+i) {
			t.Fatalf("event %d has id %q, want %d (ids %v)", i, ev.ID, from+i, ids(events))
		}
	}
}

func ids(events []sseEvent) []string {
	var out []string
	for _, ev := range events {
		out = append(out, ev.ID)
	}
	return out
}

func datas(events []sseEvent) []string {
	var out []string
	for _, ev := range events {
		out = append(out, ev.Data)
	}
	return out
}

func TestReplicasResume(t *testing.T) {
	rs := startReplicas(t)
	// An uninterrupted run, not resumable: the text every resumed run must
	// give byte for byte.
	whole := rs.open(t, t.Context(), "POST", rs.gw[1].url+"/v1/completions", storiesCompletion).read(t, -1)
	want := completionText(t, datas(whole))
	if len(whole) < 40 || want == "" {
		t.Fatalf("the uninterrupted run gave %d events, text %q", len(whole), want)
	}

	// cut reads about 20 events of a resumable completion from base, then
	// resumes it on other with Last-Event-ID, and checks the joined run.
	cut := func(t *testing.T, base, other string) {
		ctx, cancel := context.WithCancel(t.Context())
		s := rs.open(t, ctx, "POST", base+"/v1/completions", storiesCompletion, "Streamgate-Resumable", "true")
		sid := s.resp.Header.Get("Streamgate-Stream-Id")
		if sid == "" {
			t.Fatal("no Streamgate-Stream-Id")
		}
		first := s.read(t, 20)
		cancel()
		rest := rs.open(t, t.Context(), "GET", other+"/v1/streams/"+sid, "", "Last-Event-ID", first[len(first)-1].ID).read(t, -1)
		all := append(first, rest...)
		checkIDs(t, all, 1)
		if last := all[len(all)-1].Data; last != "[DONE]" {
			t.Errorf("the resumed stream ends with %q", last)
		}
		if got := completionText(t, datas(all)); got != want {
			t.Errorf("joined text differs from an uninterrupted run:\n got %q\nwant %q", got, want)
		}
		// Read again from the start, as EventSource would: the same events.
		again := rs.open(t, t.Context(), "GET", other+"/v1/streams/"+sid+"?last_event_id=0", "").read(t, -1)
		if !slices.Equal(datas(again), datas(all)) {
			t.Errorf("read again from 0: %d events, want %d", len(again), len(all))
		}
		// After the end: 204, which stops EventSource's reconnects.
		req, _ := http.NewRequest("GET", other+"/v1/streams/"+sid, nil)
		req.Header.Set("Last-Event-ID", all[len(all)-1].ID)
		resp, err := rs.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Errorf("GET after the last event: %d, want 204", resp.StatusCode)
		}
	}
	t.Run("cut on one replica, resumed on the other", func(t *testing.T) { cut(t, rs.gw[0].url, rs.gw[1].url) })
	t.Run("through nginx", func(t *testing.T) { cut(t, rs.nginx.url, rs.nginx.url) })

	t.Run("EventSource in Chromium through nginx", func(t *testing.T) {
		requireTool(t, "chromium", "/usr/bin/chromium")
		page := startChromium(t).openPage(t)
		page.load(t, rs.nginx.url+"/", "true")
		// The page POSTs a resumable completion with fetch, reads 20
		// events and aborts, then follows the stream with EventSource
		// after the last id it saw, until [DONE].
		script := `(async () => {
			const ctl = new AbortController();
			const resp = await fetch("/v1/completions", {method: "POST", signal: ctl.signal,
				headers: {"Content-Type": "application/json", "Streamgate-Resumable": "true"},
				body: ` + strconv.Quote(storiesCompletion) + `});
			const sid = resp.headers.get("Streamgate-Stream-Id");
			const reader = resp.body.getReader();
			const dec = new TextDecoder();
			let buf = "", events = [];
			while (events.length < 20) {
				const {value, done} = await reader.read();
				if (done) break;
				buf += dec.decode(value, {stream: true});
				let i;
				while ((i = buf.indexOf("\n\n")) >= 0 && events.length < 20) {
					const block = buf.slice(0, i); buf = buf.slice(i + 2);
					const ev = {id: "", data: ""};
					for (const line of block.split("\n")) {
						if (line.startsWith("id: ")) ev.id = line.slice(4);
						if (line.startsWith("data: ")) ev.data = line.slice(6);
					}
					if (ev.data) events.push(ev);
				}
			}
			ctl.abort();
			const last = events[events.length - 1].id;
			await new Promise((resolve, reject) => {
				const es = new EventSource("/v1/streams/" + sid + "?last_event_id=" + last);
				es.onmessage = (m) => {
					events.push({id: m.lastEventId, data: m.data});
					if (m.data === "[DONE]") { es.close(); resolve(); }
				};
				es.onerror = () => { if (es.readyState === EventSource.CLOSED) reject(new Error("EventSource closed")); };
			});
			return {sid, events};
		})()`
		var got struct {
			SID    string
			Events []sseEvent
		}
		page.eval(t, script, &got)
		checkIDs(t, got.Events, 1)
		if text := completionText(t, datas(got.Events)); text != want {
			t.Errorf("EventSource joined text:\n got %q\nwant %q", text, want)
		}
	})

	t.Run("EventSource reconnects by itself to the other replica", func(t *testing.T) {
		requireTool(t, "chromium", "/usr/bin/chromium")
		// The page talks to a TCP proxy in front of replica 1; mid-stream
		// the test cuts the proxy's connections and points it at replica
		// 2. EventSource reconnects on its own, with Last-Event-ID.
		px := startCutProxy(t, rs.gw[0].addr)
		page := startChromium(t).openPage(t)
		page.load(t, "http://"+px.addr+"/", "true")
		const n = 60
		page.eval(t, `(async () => {
			const resp = await fetch("/v2/models/repeat_int32/generate_stream", {method: "POST",
				headers: {"Content-Type": "application/json", "Streamgate-Resumable": "true"},
				body: `+strconv.Quote(repeatBody(n, 0, 0, 50))+`});
			const sid = resp.headers.get("Streamgate-Stream-Id");
			await resp.body.cancel();
			window.es = {events: [], opens: 0, closed: false};
			const es = new EventSource("/v1/streams/" + sid + "?last_event_id=0");
			es.onopen = () => window.es.opens++;
			es.onmessage = (m) => window.es.events.push({id: m.lastEventId, data: m.data});
			// A generate_stream stream ends with its connection; the
			// reconnect after its last event gets 204, which closes
			// EventSource.
			es.onerror = () => { if (es.readyState === EventSource.CLOSED) window.es.closed = true; };
			return true;
		})()`, nil)
		count := func() (got struct {
			Events []sseEvent
			Opens  int
			Closed bool
		}) {
			page.eval(t, `window.es`, &got)
			return got
		}
		waitFor(t, "20 events", func() bool { return len(count().Events) >= 20 })
		px.switchTo(rs.gw[1].addr)
		waitFor(t, "the stream to end", func() bool { return count().Closed })
		got := count()
		checkIDs(t, got.Events, 1)
		if len(got.Events) != n || got.Opens < 2 {
			t.Errorf("%d events over %d connections, want %d events over 2 at least (the first, its reconnect; the 204 that ends it opens none)", len(got.Events), got.Opens, n)
		}
		for i, ev := range got.Events {
			if want := fmt.Sprintf(`"OUT":%d,`, i); !strings.Contains(ev.Data, want) {
				t.Fatalf("event %d: %s", i, ev.Data)
			}
		}
	})

	t.Run("WebSocket resume on the other replica", func(t *testing.T) {
		c1 := dialWSURL(t, rs.gw[0].url)
		body := strings.Replace(storiesCompletion, `,"stream":true`, "", 1)
		wsSend(t, c1, `{"type":"completions","id":"a","resumable":true,"body":`+body+`}`)
		var sid string
		var texts []string
		for len(texts) < 20 {
			f, raw, err := wsRead(t, c1)
			if err != nil || f.Type != "data" || f.Seq != uint64(len(texts)) {
				t.Fatalf("frame %s: %v", raw, err)
			}
			if len(texts) == 0 {
				var first struct{ Stream string }
				json.Unmarshal(raw, &first)
				sid = first.Stream
				if sid == "" {
					t.Fatalf("the first frame names no stream: %s", raw)
				}
			}
			texts = append(texts, string(f.Data))
		}
		c1.CloseNow() // the socket drops; the request runs on
		c2 := dialWSURL(t, rs.gw[1].url)
		wsSend(t, c2, fmt.Sprintf(`{"type":"resume","id":"r1","stream":%q,"after":20}`, sid))
		for {
			f, raw, err := wsRead(t, c2)
			if err != nil {
				t.Fatal(err)
			}
			if f.Type == "done" && f.Reason == "final" {
				break
			}
			if f.Type != "data" || f.ID != "r1" || f.Seq != uint64(len(texts)) {
				t.Fatalf("resumed frame %s after %d", raw, len(texts))
			}
			texts = append(texts, string(f.Data))
		}
		if got := completionText(t, texts); got != want {
			t.Errorf("WebSocket joined text:\n got %q\nwant %q", got, want)
		}
	})

	t.Run("DELETE on the other replica stops the request", func(t *testing.T) {
		s := rs.open(t, t.Context(), "POST", rs.gw[0].url+"/v2/models/repeat_int32/generate_stream", repeatBody(200, 0, 0, 50), "Streamgate-Resumable", "true")
		sid := s.resp.Header.Get("Streamgate-Stream-Id")
		s.read(t, 2)
		req, _ := http.NewRequest("DELETE", rs.gw[1].url+"/v1/streams/"+sid, nil)
		start := time.Now()
		resp, err := rs.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("DELETE: %d", resp.StatusCode)
		}
		rest := s.read(t, -1) // the live stream ends: its request stopped
		t.Logf("DELETE on replica 2 to the end of the stream on replica 1: %v", time.Since(start))
		if len(rest) > 150 {
			t.Errorf("%d more events after the DELETE", len(rest))
		}
		// The live client and every reader see an explicit cancel, in
		// the route's error shape, as the last event: not a normal finish,
		// not a loss.
		const cancelled = `{"error":"cancelled: the stream was cancelled, by DELETE /v1/streams/{sid} or for want of a reader within the grace period"}`
		if len(rest) == 0 || rest[len(rest)-1].Data != cancelled {
			t.Errorf("the live client's last events after the DELETE: %v", rest[max(0, len(rest)-2):])
		}
		after := rs.open(t, t.Context(), "GET", rs.gw[1].url+"/v1/streams/"+sid, "").read(t, -1)
		for i, ev := range after {
			if last := i == len(after)-1; last != (ev.Data == cancelled) {
				t.Errorf("a reader of the cancelled stream, event %d of %d: %s", i+1, len(after), ev.Data)
			}
		}
	})

	t.Run("DELETE ends a WebSocket stream and its resume with reason cancelled", func(t *testing.T) {
		c1 := dialWSURL(t, rs.gw[0].url)
		// A paced echo cannot finish before the DELETE lands (stories260k
		// could: its 150 tokens take a few milliseconds).
		body := `{"model":"echo","prompt":"` + words(2000) + `","delay_ms":20}`
		wsSend(t, c1, `{"type":"completions","id":"a","resumable":true,"body":`+body+`}`)
		f, raw, err := wsRead(t, c1)
		var first struct{ Stream string }
		json.Unmarshal(raw, &first)
		if err != nil || f.Type != "data" || first.Stream == "" {
			t.Fatalf("first frame %s: %v", raw, err)
		}
		req, _ := http.NewRequest("DELETE", rs.gw[1].url+"/v1/streams/"+first.Stream, nil)
		resp, err := rs.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("DELETE: %d", resp.StatusCode)
		}
		end := func(c *websocket.Conn, id string) {
			t.Helper()
			for {
				f, raw, err := wsRead(t, c)
				if err != nil {
					t.Fatal(err)
				}
				if f.Type == "data" && f.ID == id {
					continue
				}
				if f.Type != "done" || f.ID != id || f.Reason != "cancelled" {
					t.Fatalf("the end of cancelled stream %s: %s, want done with reason cancelled", id, raw)
				}
				return
			}
		}
		end(c1, "a")
		c2 := dialWSURL(t, rs.gw[1].url)
		wsSend(t, c2, fmt.Sprintf(`{"type":"resume","id":"r1","stream":%q,"after":0}`, first.Stream))
		end(c2, "r1")
	})

	t.Run("another key", func(t *testing.T) {
		// Ownership is tested at the gateway level (withLimitKey); here: an
		// unknown stream is 404 on every replica.
		for _, base := range []string{rs.gw[0].url, rs.gw[1].url} {
			got := request(t, rs.c, "GET", base+"/v1/streams/nosuchstream", "")
			if got.status != 404 || !strings.Contains(got.body, `"code":"stream_not_found"`) {
				t.Errorf("GET of no stream: %+v", got)
			}
		}
	})
}

// dialWSURL opens a streamgate.v1 socket to the gateway at base.
func dialWSURL(t *testing.T, base string) *websocket.Conn {
	t.Helper()
	c, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(base, "http")+"/v1/ws",
		&websocket.DialOptions{Subprotocols: []string{ws.Subprotocol}})
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(1 << 22)
	t.Cleanup(func() { c.CloseNow() })
	return c
}

// A replica killed (SIGKILL) mid-stream: a reader on another replica gets
// every event it stored, in order, then stream_lost, within 15 s (its
// lease runs out within 5 s, and must stay out for 5 s more).
func TestReplicaKilledStreamLost(t *testing.T) {
	rs := startReplicas(t)
	victim := rs.startGateway(t)
	s := rs.open(t, t.Context(), "POST", victim.url+"/v2/models/repeat_int32/generate_stream", repeatBody(400, 0, 0, 50), "Streamgate-Resumable", "true")
	sid := s.resp.Header.Get("Streamgate-Stream-Id")
	s.read(t, 5)
	// A reader on another replica follows the stream live, past the
	// events the victim's client has seen.
	follower := rs.open(t, t.Context(), "GET", rs.gw[0].url+"/v1/streams/"+sid, "")
	got := follower.read(t, 5)
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	got = append(got, follower.read(t, -1)...)
	lostAfter := time.Since(killed)
	stored, last := got[:len(got)-1], got[len(got)-1]
	checkIDs(t, stored, 1)
	if !strings.Contains(last.Data, "the stream was lost") || last.ID != stored[len(stored)-1].ID {
		t.Errorf("last event %+v, want the stream_lost error repeating id %s", last, stored[len(stored)-1].ID)
	}
	for i, ev := range stored {
		if want := fmt.Sprintf(`"OUT":%d,`, i); !strings.Contains(ev.Data, want) {
			t.Fatalf("stored event %d: %s", i, ev.Data)
		}
	}
	// A reader that comes later gets the same events and the same end.
	again := rs.open(t, t.Context(), "GET", rs.gw[1].url+"/v1/streams/"+sid, "").read(t, -1)
	if !slices.Equal(datas(again), datas(got)) {
		t.Errorf("a later reader got %d events, the follower %d", len(again), len(got))
	}
	t.Logf("stream_lost %v after the SIGKILL (%d stored events)", lostAfter, len(stored))
	if lostAfter > 15*time.Second {
		t.Errorf("stream_lost came %v after the kill, want within 15s", lostAfter)
	}
}

// Redis stopped under load: live resumable streams run to their end;
// resume answers 503; Redis restarted (empty): new resumable streams work
// again within seconds, with nothing restarted.
func TestReplicasRedisDown(t *testing.T) {
	rs := startReplicas(t)
	const n, events = 4, 60
	streams := make([]*sseStream, n)
	for i := range streams {
		streams[i] = rs.open(t, t.Context(), "POST", rs.gw[i%2].url+"/v2/models/repeat_int32/generate_stream", repeatBody(events, 0, 0, 40), "Streamgate-Resumable", "true")
		streams[i].read(t, 1)
	}
	sid := streams[0].resp.Header.Get("Streamgate-Stream-Id")
	rs.redis.Stop()
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Go(func() {
			rest := s.read(t, -1)
			if len(rest) != events-1 {
				t.Errorf("stream %d: %d events after Redis stopped, want %d", i, len(rest), events-1)
			}
		})
	}
	got := request(t, rs.c, "GET", rs.gw[1].url+"/v1/streams/"+sid, "")
	if got.status != 503 || got.header.Get("Retry-After") == "" || !strings.Contains(got.body, `"code":"unavailable"`) {
		t.Errorf("resume with Redis down: %+v", got)
	}
	wg.Wait()
	rs.redis.Restart()
	waitFor(t, "resumable streams to work again", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", rs.gw[0].url+"/v2/models/repeat_int32/generate_stream", strings.NewReader(repeatBody(3, 0, 0, 0)))
		req.Header.Set("Streamgate-Resumable", "true")
		resp, err := rs.c.Do(req)
		if err != nil {
			return false
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		sid := resp.Header.Get("Streamgate-Stream-Id")
		again := request(t, rs.c, "GET", rs.gw[1].url+"/v1/streams/"+sid, "")
		return again.status == 200 && strings.Count(again.body, "data: ") == 3
	})
}

// cutProxy is a TCP proxy whose target the test can switch, cutting every
// connection it carries.
type cutProxy struct {
	addr string
	ln   net.Listener

	mu     sync.Mutex
	target string
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{addr: ln.Addr().String(), ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		up, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			continue
		}
		p.track(c, up)
		p.wg.Go(func() { io.Copy(up, c); up.Close() })
		p.wg.Go(func() { io.Copy(c, up); c.Close() })
	}
}

func (p *cutProxy) track(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
}

// cut closes every connection carried so far.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// switchTo sends new connections to target and cuts the current ones.
func (p *cutProxy) switchTo(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
	p.cut()
}

// With API keys (--redis without --no-keys): a stream belongs to the key
// that made it, on every replica. Another key gets 404 (GET, DELETE, a
// WebSocket resume), no key 401; EventSource's way, ?token=KEY, reads it.
func TestReplicasKeyedStreams(t *testing.T) {
	rs := startReplicas(t)
	key := func(name string) string {
		out, err := exec.Command(rs.bin, "keys", "create", "--redis", rs.redis.URL(), "--name", name).Output()
		if err != nil {
			t.Fatalf("keys create %s: %v", name, err)
		}
		return strings.TrimSpace(string(out))
	}
	alice, bob := key("alice"), key("bob")
	gw := [2]*sgProcess{
		startGatewayProc(t, rs.bin, rs.eng.addr, "--redis", rs.redis.URL()),
		startGatewayProc(t, rs.bin, rs.eng.addr, "--redis", rs.redis.URL()),
	}
	s := rs.open(t, t.Context(), "POST", gw[0].url+"/v2/models/repeat_int32/generate_stream", repeatBody(40, 0, 0, 25),
		"Streamgate-Resumable", "true", "Authorization", "Bearer "+alice)
	sid := s.resp.Header.Get("Streamgate-Stream-Id")
	s.read(t, 1)
	do := func(method, url, key string) reply {
		req, _ := http.NewRequestWithContext(t.Context(), method, url, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := rs.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
	}
	for _, method := range []string{"GET", "DELETE"} {
		if got := do(method, gw[1].url+"/v1/streams/"+sid, bob); got.status != 404 || !strings.Contains(got.body, `"code":"stream_not_found"`) {
			t.Errorf("%s with another key: %+v", method, got)
		}
		if got := do(method, gw[1].url+"/v1/streams/"+sid, ""); got.status != 401 {
			t.Errorf("%s without a key: %+v", method, got)
		}
	}
	c, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(gw[1].url, "http")+"/v1/ws",
		&websocket.DialOptions{Subprotocols: []string{ws.Subprotocol, "streamgate.key." + bob}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	wsSend(t, c, fmt.Sprintf(`{"type":"resume","id":"r1","stream":%q}`, sid))
	if f, raw, err := wsRead(t, c); err != nil || f.Type != "error" || f.Error == nil || f.Error.Code != "stream_not_found" {
		t.Errorf("WebSocket resume with another key: %s %v", raw, err)
	}
	// The owner, as EventSource sends it: the key in the URL.
	all := rs.open(t, t.Context(), "GET", gw[1].url+"/v1/streams/"+sid+"?last_event_id=0&token="+alice, "").read(t, -1)
	checkIDs(t, all, 1)
	if len(all) != 40 {
		t.Errorf("the owner read %d events, want 40", len(all))
	}
}
