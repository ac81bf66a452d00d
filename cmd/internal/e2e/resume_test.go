package e2e

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// streamReads records each GET /v1/streams/{sid} the gateway serves, as
// "sid after N", to show how a page read its streams.
type streamReads struct {
	next http.Handler

	mu    sync.Mutex
	reads []string
}

func (e *streamReads) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if sid, ok := strings.CutPrefix(r.URL.Path, "/v1/streams/"); ok && r.Method == http.MethodGet {
		after := r.Header.Get("Last-Event-ID")
		if after == "" {
			after = r.URL.Query().Get("last_event_id")
		}
		if after == "" {
			after = "0"
		}
		e.mu.Lock()
		e.reads = append(e.reads, sid+" after "+after)
		e.mu.Unlock()
	}
	e.next.ServeHTTP(w, r)
}

// takeReads returns the stream reads since the last call.
func (e *streamReads) takeReads() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.reads
	e.reads = nil
	return r
}

var resumeMark = regexp.MustCompile(`connection dropped after event \d+: resuming stream [A-Za-z0-9_-]{22}`) // the ids the gateway makes

// TestPlaygroundResume drives the playground's client side of resumable
// streams against the gateway's: the EventSource transport appears once an
// answer carries Streamgate-Stream-Id; "drop connection" over fetch and
// over EventSource resumes after the last event, so the card shows every
// response exactly once; EventSource reads a whole stream; Stop on a
// resumable stream DELETEs it, which ends the engine's work.
func TestPlaygroundResume(t *testing.T) {
	requireTool(t, "chromium", "/usr/bin/chromium")
	var stand *streamReads
	s := startStack(t, func(h http.Handler) http.Handler {
		stand = &streamReads{next: h}
		return stand
	})
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
		after := regexp.MustCompile(`^[A-Za-z0-9_-]+ after (\d+)$`)
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
