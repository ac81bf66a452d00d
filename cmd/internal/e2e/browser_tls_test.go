package e2e

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/streamgate/streamgate/cmd/internal/stack"
)

// streamLog records the protocol and connection of every event stream
// request a gateway receives.
type streamLog struct {
	mu     sync.Mutex
	protos []string
	conns  map[string]bool // remote addresses: one per connection
}

func (l *streamLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/generate_stream") {
			l.mu.Lock()
			l.protos = append(l.protos, r.Proto)
			if l.conns == nil {
				l.conns = map[string]bool{}
			}
			l.conns[r.RemoteAddr] = true
			l.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

// seen is how many streams arrived, over which protocols, on how many
// connections.
func (l *streamLog) seen() (n int, protos []string, conns int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := slices.Clone(l.protos)
	slices.Sort(p)
	return len(l.protos), slices.Compact(p), len(l.conns)
}

// manyState is what the page's e2e.many streams did.
type manyState struct {
	First, Ended int
	Log          []string
}

func (st manyState) count(prefix string) int {
	n := 0
	for _, e := range st.Log {
		if strings.HasPrefix(e, prefix) {
			n++
		}
	}
	return n
}

// TestBrowserTLS runs headless Chromium against the gateway over HTTPS,
// trusting the test's certificate by its public key
// (--ignore-certificate-errors-spki-list, which works headless with a
// profile directory of its own): a page opens 12 event streams at once
// and, over HTTP/2, all 12 deliver their first event before any ends;
// over HTTP/1.1 the same page stalls at six, the browser's connection
// limit per origin, until one ends. Then the page's other steps run over
// HTTPS: fetch streams, a chat, a WebSocket over wss:// and an abort.
func TestBrowserTLS(t *testing.T) {
	requireTool(t, "chromium", "/usr/bin/chromium")
	certs := newTestCerts(t)
	var h2log, h1log streamLog
	h2 := startPageStack(t, certs.withTLS(t, false), h2log.wrap)
	h2.roots = certs.ca.Pool()
	h1 := startPageStack(t, func(c *stack.Config) {
		certs.withTLS(t, false)(c)
		c.Server = func(srv *http.Server) {
			srv.Protocols = new(http.Protocols)
			srv.Protocols.SetHTTP1(true) // ALPN offers http/1.1 only
		}
	}, h1log.wrap)
	h1.roots = certs.ca.Pool()
	page := startChromium(t, "--ignore-certificate-errors-spki-list="+certs.serverCert.SPKIHash()).openPage(t)
	state := func(t *testing.T) manyState {
		var st manyState
		page.eval(t, "e2e.manyState", &st)
		return st
	}

	t.Run("12 streams over HTTP/2", func(t *testing.T) {
		page.navigate(t, h2.url+pagePath)
		page.eval(t, "e2e.many(12)", nil)
		var st manyState
		waitFor(t, "12 first events (or an end)", func() bool {
			st = state(t)
			return st.First == 12 || st.Ended > 0
		})
		if st.First != 12 || st.Ended != 0 || st.count("first ") != 12 {
			t.Fatalf("first events %d, ended %d, want 12 and 0: %v", st.First, st.Ended, st.Log)
		}
		n, protos, conns := h2log.seen()
		if n != 12 || !slices.Equal(protos, []string{"HTTP/2.0"}) || conns != 1 {
			t.Errorf("the gateway got %d streams over %v on %d connections, want 12 over HTTP/2.0 on 1", n, protos, conns)
		}
		page.eval(t, "e2e.abortAll()", nil)
		waitFor(t, "the aborted streams to stop in the engine", func() bool { return h2.eng.InFlight() == 0 })
	})

	t.Run("HTTP/1.1 stalls at six", func(t *testing.T) {
		page.navigate(t, h1.url+pagePath)
		page.eval(t, "e2e.many(12)", nil)
		var st manyState
		waitFor(t, "six first events", func() bool {
			st = state(t)
			return st.First >= 6 || st.Ended > 0
		})
		waitFor(t, "six streams in the engine", func() bool { return h1.eng.InFlight() >= 6 })
		// Twelve fetches are pending; six connections carry six of them.
		st = state(t)
		n, protos, conns := h1log.seen()
		if st.First != 6 || st.Ended != 0 || n != 6 || !slices.Equal(protos, []string{"HTTP/1.1"}) || conns != 6 {
			t.Fatalf("page: %d first events, %d ended; gateway: %d streams over %v on %d connections; want 6, 0, 6 over HTTP/1.1 on 6: %v",
				st.First, st.Ended, n, protos, conns, st.Log)
		}
		// Ending one lets the seventh through: it was waiting for a
		// connection, not slow.
		page.eval(t, "e2e.abortOne()", nil)
		waitFor(t, "a seventh first event", func() bool {
			st = state(t)
			return st.First >= 7
		})
		abort := slices.IndexFunc(st.Log, func(e string) bool { return strings.HasPrefix(e, "abort ") })
		if before := (manyState{Log: st.Log[:max(abort, 0)]}); abort < 0 || before.count("first ") != 6 {
			t.Errorf("the seventh stream started before one ended: %v", st.Log)
		}
		page.eval(t, "e2e.abortAll()", nil)
		// Chromium may drain an aborted HTTP/1.1 response for up to 5s
		// before closing its socket (see runPage's fetch abort).
		waitFor(t, "the aborted streams to stop in the engine", func() bool { return h1.eng.InFlight() == 0 })
	})

	t.Run("page over HTTPS", func(t *testing.T) {
		runPage(t, h2, page, h2.url, true)
	})
}
