package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// resumeStand is a stand-in, in front of a gateway that makes no resumable
// streams yet, for the HTTP side of DESIGN.md's resumable-stream contract,
// so that the playground's client side of it runs against something:
//
//   - a streaming POST with "Streamgate-Resumable: true" is answered with
//     "Streamgate-Stream-Id: <sid>", and its SSE events get ids 1, 2, 3 …;
//   - the request runs on when its client leaves;
//   - GET /v1/streams/{sid} with Last-Event-ID: N (or ?last_event_id=N)
//     replays the events after N, then follows live to the stream's end;
//   - DELETE /v1/streams/{sid} cancels the request.
//
// It is one process's memory, keeps no grace period, leases or keys, and
// knows nothing of WebSockets. The real implementation (issue 10) should
// replace it in TestPlaygroundResume.
type resumeStand struct {
	next http.Handler

	mu      sync.Mutex
	streams map[string]*standStream
	n       int
	reads   []string       // "sid after N" for each GET /v1/streams/{sid}
	running sync.WaitGroup // producers
}

// takeReads returns the stream reads since the last call.
func (e *resumeStand) takeReads() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.reads
	e.reads = nil
	return r
}

type standStream struct {
	cancel context.CancelFunc

	mu      sync.Mutex
	status  int
	header  http.Header
	started chan struct{} // closed when status is set
	events  []string      // the data of each event; event i has id i+1
	ended   bool
	changed chan struct{} // closed and replaced on every change
	buf     []byte        // written but not yet a whole event
	body    bytes.Buffer  // the whole answer, for non-stream answers
}

func newResumeStand(next http.Handler) *resumeStand {
	return &resumeStand{next: next, streams: map[string]*standStream{}}
}

// close cancels every stream and waits for their requests to end.
func (e *resumeStand) close() {
	e.mu.Lock()
	for _, st := range e.streams {
		st.cancel()
	}
	e.mu.Unlock()
	e.running.Wait()
}

func (e *resumeStand) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sid, isStream := strings.CutPrefix(r.URL.Path, "/v1/streams/")
	switch {
	case isStream && r.Method == http.MethodGet:
		e.mu.Lock()
		st := e.streams[sid]
		e.mu.Unlock()
		if st == nil {
			http.Error(w, `{"error":{"message":"no such stream","type":"invalid_request_error","param":null,"code":"stream_not_found"}}`, http.StatusNotFound)
			return
		}
		after := r.Header.Get("Last-Event-ID")
		if after == "" {
			after = r.URL.Query().Get("last_event_id")
		}
		n, _ := strconv.Atoi(after)
		e.mu.Lock()
		e.reads = append(e.reads, fmt.Sprintf("%s after %d", sid, n))
		e.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		st.follow(r.Context(), w, n)
	case isStream && r.Method == http.MethodDelete:
		e.mu.Lock()
		st := e.streams[sid]
		e.mu.Unlock()
		if st == nil {
			http.Error(w, "", http.StatusNotFound)
			return
		}
		st.cancel()
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPost && r.Header.Get("Streamgate-Resumable") == "true":
		e.create(w, r)
	default:
		e.next.ServeHTTP(w, r)
	}
}

// create runs the request detached from its client and follows it.
func (e *resumeStand) create(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := &standStream{cancel: cancel, header: http.Header{}, started: make(chan struct{}), changed: make(chan struct{})}
	e.mu.Lock()
	e.n++
	sid := fmt.Sprintf("s%d", e.n)
	e.streams[sid] = st
	e.mu.Unlock()
	req := r.Clone(ctx)
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.Header.Del("Streamgate-Resumable")
	e.running.Add(1)
	go func() {
		defer e.running.Done()
		defer cancel()
		e.next.ServeHTTP(st, req)
		st.mu.Lock()
		st.setStatus(http.StatusOK)
		st.ended = true
		st.notify()
		st.mu.Unlock()
	}()
	select {
	case <-st.started:
	case <-r.Context().Done():
		return
	}
	st.mu.Lock()
	status, header := st.status, st.header.Clone()
	st.mu.Unlock()
	if status != http.StatusOK || !strings.HasPrefix(header.Get("Content-Type"), "text/event-stream") {
		// Not a stream: the answer as it is, once complete.
		st.follow(r.Context(), io.Discard, 0)
		for k, v := range header {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		st.mu.Lock()
		w.Write(st.body.Bytes())
		st.mu.Unlock()
		return
	}
	for k, v := range header {
		w.Header()[k] = v
	}
	w.Header().Set("Streamgate-Stream-Id", sid)
	st.follow(r.Context(), w, 0)
}

// follow writes the events after the first n as they come, until the
// stream ends or ctx is done.
func (st *standStream) follow(ctx context.Context, w io.Writer, n int) {
	flush := func() {}
	if rw, ok := w.(http.ResponseWriter); ok {
		rw.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(rw)
		flush = func() { _ = rc.Flush() }
		flush()
	}
	for {
		st.mu.Lock()
		events, ended, changed := st.events[min(n, len(st.events)):], st.ended, st.changed
		st.mu.Unlock()
		for _, data := range events {
			n++
			if _, err := fmt.Fprintf(w, "id: %d\ndata: %s\n\n", n, data); err != nil {
				return
			}
		}
		flush()
		if ended {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

func (st *standStream) notify() {
	close(st.changed)
	st.changed = make(chan struct{})
}

// setStatus records the answer's status once; st.mu is held.
func (st *standStream) setStatus(code int) {
	if st.status == 0 {
		st.status = code
		close(st.started)
	}
}

// The gateway's side of the producer: an http.ResponseWriter that logs
// each event.

func (st *standStream) Header() http.Header { return st.header }

func (st *standStream) WriteHeader(code int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.setStatus(code)
}

func (st *standStream) Write(p []byte) (int, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.setStatus(http.StatusOK)
	st.body.Write(p)
	st.buf = append(st.buf, p...)
	for {
		end := bytes.Index(st.buf, []byte("\n\n"))
		if end < 0 {
			break
		}
		var data []string
		for _, line := range strings.Split(string(st.buf[:end]), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				data = append(data, d)
			}
		}
		st.buf = st.buf[end+2:]
		if data != nil {
			st.events = append(st.events, strings.Join(data, "\n"))
		}
	}
	st.notify()
	return len(p), nil
}

func (st *standStream) Flush() {}

var resumeMark = regexp.MustCompile(`connection dropped after event \d+: resuming stream s\d+`)

// TestPlaygroundResume drives the playground's client side of resumable
// streams against resumeStand: the EventSource transport appears once an
// answer carries Streamgate-Stream-Id; "drop connection" over fetch and
// over EventSource resumes after the last event, so the card shows every
// response exactly once; EventSource reads a whole stream; Stop on a
// resumable stream DELETEs it, which ends the engine's work.
func TestPlaygroundResume(t *testing.T) {
	requireTool(t, "chromium", "/usr/bin/chromium")
	var stand *resumeStand
	s := startStack(t, func(h http.Handler) http.Handler {
		stand = newResumeStand(h)
		return stand
	})
	t.Cleanup(stand.close) // before the stack stops (cleanups run last first)
	page := startChromium(t).openPage(t)
	p := &playground{t: t, s: s, page: page, c: httpClient(t)}
	page.load(t, s.url+"/", `document.getElementById("body").value.includes('"model"')`)
	p.js(playgroundHelpers, nil)

	const n = 12
	body := repeatBody(n, 0, 100, 100)
	var want strings.Builder
	for i := range n {
		fmt.Fprintf(&want, "OUT=%d  IDX=%d\n", i, i)
	}
	p.tritonModel("repeat_int32", `"DELAY"`)
	p.set("body", body)

	// runs sends the body and drops its connection after the third
	// response when drop is set; the card must show every response once.
	// The page's EventSource constructions, by URL.
	p.js(`window.eventSources = []; window.EventSource = class extends EventSource {
		constructor(url, init) { super(url, init); window.eventSources.push(url); }
	}; true`, nil)
	run := func(t *testing.T, transport string, drop bool) {
		p.t = t
		p.js(fmt.Sprintf("pgt.pick(%q, %q)", "transport", transport), nil)
		p.js(`window.eventSources = []; true`, nil)
		stand.takeReads()
		id := p.send()[0]
		if drop {
			p.waitCard(id, "three responses", func(c card) bool { return c.Tokens >= 3 || finished(c) })
			p.js(fmt.Sprintf("pgt.click(%q, %q)", id, "drop"), nil)
		}
		c := p.waitCard(id, "done", finished)
		text := c.Text
		if drop {
			// The mark between the halves names the cut.
			marks := resumeMark.FindAllString(text, -1)
			if len(marks) != 1 {
				t.Fatalf("%d resume marks in %q, want 1", len(marks), text)
			}
			text = resumeMark.ReplaceAllString(text, "")
		}
		if c.State != "done" || text != want.String() || c.Tokens != n {
			t.Errorf("%s (drop %v): %+v\nwant the text %q", transport, drop, c, want.String())
		}
		// How the page read the stream: fetch reads the POST's answer and
		// then GETs the rest; EventSource reads it all from
		// /v1/streams/{sid}, after 0 and then after the last event seen.
		reads := stand.takeReads()
		var sources []string
		p.js(`window.eventSources`, &sources)
		after := regexp.MustCompile(`^s\d+ after (\d+)$`)
		wantReads := map[bool]int{false: 0, true: 1}[drop]
		if transport == "eventsource" {
			wantReads++
			if len(sources) != wantReads || !strings.HasSuffix(sources[0], "?last_event_id=0") {
				t.Errorf("EventSource URLs %q", sources)
			}
		} else if len(sources) != 0 {
			t.Errorf("fetch made EventSources %q", sources)
		}
		if len(reads) != wantReads {
			t.Fatalf("stream reads %q, want %d", reads, wantReads)
		}
		for i, r := range reads {
			m := after.FindStringSubmatch(r)
			if m == nil || (i == len(reads)-1 && drop) != (m[1] != "0") {
				t.Errorf("stream read %q (reads %q)", r, reads)
			}
		}
	}
	t.Run("fetch learns of resumable streams and resumes after a drop", func(t *testing.T) {
		var shown bool
		p.js(`!document.getElementById("transport-es").hidden`, &shown)
		if shown {
			t.Fatal("EventSource offered before any answer carried Streamgate-Stream-Id")
		}
		run(t, "fetch", true)
		p.js(`!document.getElementById("transport-es").hidden`, &shown)
		if !shown {
			t.Error("EventSource still hidden after an answer with Streamgate-Stream-Id")
		}
	})
	t.Run("EventSource reads a whole stream", func(t *testing.T) { run(t, "eventsource", false) })
	t.Run("EventSource resumes after a drop", func(t *testing.T) { run(t, "eventsource", true) })

	t.Run("stop deletes a resumable stream", func(t *testing.T) {
		p.t = t
		waitFor(t, "engine idle", func() bool { return s.eng.InFlight() == 0 })
		p.js(`pgt.pick("transport", "fetch")`, nil)
		p.set("body", repeatBody(100, 0, 10, 1000))
		id := p.send()[0]
		p.waitCard(id, "its first response", func(c card) bool { return c.Tokens >= 1 || finished(c) })
		p.js(fmt.Sprintf("pgt.click(%q, %q)", id, "stop"), nil)
		// Leaving a resumable stream does not cancel it: only the DELETE
		// ends the engine's work.
		waitFor(t, "the deleted stream to end in the engine", func() bool { return s.eng.InFlight() == 0 })
		if c := p.card(id); c.State != "cancelled" {
			t.Errorf("after Stop: %+v", c)
		}
	})
	if problems := page.takeProblems(); len(problems) > 0 {
		t.Errorf("the page logged problems:\n%s", strings.Join(problems, "\n"))
	}
}
