package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/gateway"
	"github.com/streamgate/streamgate/gateway/sse"
	"github.com/streamgate/streamgate/upstream"
)

// startStream posts body and returns the open response; the caller reads
// and closes it.
func (s *testStack) startStream(t *testing.T, ctx context.Context, path, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
	}
	return resp
}

// A client that disconnects stops the engine's work for its request at
// once, while another request on the same engine streams on.
func TestClientGoneCancelsUpstream(t *testing.T) {
	s := newStack(t, nil)
	// 50000 words at 20ms each would run for 1000s: only cancellation
	// ends it within the test.
	long := `{"text_input":"` + words(50000) + `","stream":true,"parameters":{"delay_ms":20}}`
	ctx, abort := context.WithCancel(t.Context())
	resp := s.startStream(t, ctx, "/v2/models/echo/generate_stream", long)
	r := sse.NewReader(resp.Body)
	if ev, err := r.Next(); err != nil || !strings.Contains(ev.Data, `"text_output":"w0"`) {
		t.Fatalf("first event %+v %v", ev, err)
	}

	// The other request runs until the test leaves it too (50000 words
	// at 5ms): it is still running whenever the first one stops, however
	// slowly the test gets to look.
	otherCtx, leaveOther := context.WithCancel(t.Context())
	other := s.startStream(t, otherCtx, "/v2/models/echo/generate_stream", `{"text_input":"`+words(50000)+`","stream":true,"parameters":{"delay_ms":5}}`)
	defer other.Body.Close()
	otherReader := sse.NewReader(other.Body)
	if _, err := otherReader.Next(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both requests executing", func() bool { return s.eng.InFlight() == 2 })

	abort() // the client goes away
	resp.Body.Close()
	waitFor(t, "the abandoned request to stop in the engine", func() bool { return s.eng.InFlight() == 1 })

	// The other request streams on, word after word.
	for i := 1; i <= 40; i++ {
		ev, err := otherReader.Next()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(ev.Data, "error") || !strings.Contains(ev.Data, fmt.Sprintf(`w%d"`, i)) {
			t.Fatalf("other request, word %d: %s", i, ev.Data)
		}
	}
	leaveOther()
	other.Body.Close()
	waitFor(t, "engine idle", func() bool { return s.eng.InFlight() == 0 })
	waitFor(t, "client_gone metric", func() bool {
		return s.metricValue(t, `streamgate_gateway_client_gone_total{protocol="sse"}`) == 2
	})
}

// A non-streaming request whose client leaves is cancelled too.
func TestClientGoneCancelsUnary(t *testing.T) {
	s := newStack(t, nil)
	ctx, abort := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/completions",
			strings.NewReader(`{"model":"echo_slow","prompt":"`+words(50000)+`","max_tokens":50000}`))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, "request executing", func() bool { return s.eng.InFlight() == 1 })
	abort()
	<-done
	waitFor(t, "engine idle", func() bool { return s.eng.InFlight() == 0 })
}

// One client that does not read its stream holds up nobody else: fast
// streams beside it run to their end while it is stalled, and, being only
// behind for a while (well within the stall timeout and the memory
// budget), it gets every event once it reads again.
func TestSlowSSEReaderBesideFastOnes(t *testing.T) {
	// Small socket buffers, so an unread stream stalls its writer soon.
	s := newStack(t, &gateway.Options{MaxBodyBytes: 64 << 20}, smallServerBuffers)
	// 300 events of 16 KiB, one per millisecond: far more than the
	// buffers between the gateway and the client hold.
	big := strings.Repeat("x", 16<<10)
	slowText := strings.TrimSpace(strings.Repeat(big+" ", 300))
	var slowConn *net.TCPConn
	tinyBuffers := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetReadBuffer(16 << 10)
				slowConn = tc
			}
			return c, err
		},
	}}
	defer tinyBuffers.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.url+"/v2/models/echo/generate_stream",
		strings.NewReader(`{"text_input":"`+slowText+`","stream":true,"parameters":{"delay_ms":1}}`))
	slow, err := tinyBuffers.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Body.Close()
	br := bufio.NewReader(slow.Body)
	if _, err := br.Peek(1); err != nil { // the stream has started; now stall
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			resp, body := s.post(t, "/v2/models/echo/generate_stream", `{"text_input":"`+words(50)+`","stream":true}`)
			evs := events(t, body)
			if resp.StatusCode != 200 || len(evs) != 51 || strings.Contains(body, `"error"`) {
				t.Errorf("fast stream: %d, %d events", resp.StatusCode, len(evs))
			}
		})
	}
	wg.Wait()

	// Unread, the slow stream falls behind: the engine finishes it while
	// upstream holds what the client has not read.
	waitFor(t, "the engine to finish the slow stream", func() bool {
		st := s.up.Stats()
		return st.InFlight == 0 && st.MemoryUsed > 0
	})
	// Now read it (faster with a normal buffer): every event, in order.
	slowConn.SetReadBuffer(4 << 20)
	r := sse.NewReader(br)
	n, last := 0, ""
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("slow stream after %d events: %v", n, err)
		}
		if !ev.IsComment {
			n++
			last = ev.Data
		}
	}
	if n != 301 || strings.Contains(last, `"error"`) || s.up.Stats().QueueOverflows != 0 {
		t.Fatalf("slow stream ended after %d events with %.200s", n, last)
	}
	waitFor(t, "engine idle", func() bool { return s.eng.InFlight() == 0 })
	// Behind for a while, never stalled: nothing failed, nothing counted.
	if got := s.metricValue(t, `streamgate_gateway_slow_clients_total{protocol="sse"}`); got != 0 {
		t.Errorf("slow clients counted: %v", got)
	}
	if got := s.metricValue(t, `streamgate_gateway_upstream_errors_total{kind="too_slow"}`); got != 0 {
		t.Errorf("a slow client counted as an upstream error: %v", got)
	}
	noServerFaults(t, s)
}

// A client whose socket takes no more holds up no other stream on the
// same upstream stream: responses are relayed on that stream's reader
// where a client's socket can take them at once, and a client's that
// cannot goes on on a goroutine of its own. Stalled first (the engine
// has sent all of its stream, and its relay is stuck writing), it is
// still stuck when a stream beside it has run to its end.
func TestStalledSSEClientDelaysNoOtherStream(t *testing.T) {
	s := newStack(t, &gateway.Options{MaxBodyBytes: 64 << 20}, smallServerBuffers, func(c *stack.Config) {
		c.UpstreamOptions = &upstream.Options{MaxStreamsPerTarget: 1} // one reader for both
	})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.url+"/v2/models/echo/generate_stream",
		strings.NewReader(`{"text_input":"`+floodText+`","stream":true}`))
	stalled, err := stallingClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Body.Close()
	waitFor(t, "the engine to finish the stalled stream", func() bool { st := s.up.Stats(); return st.Started == 1 && st.InFlight == 0 })
	stillWriting(t, s)

	// A hang guard, not a timing assertion: a relay stuck behind the
	// stalled client would never deliver this stream's responses.
	ctx, cancel := context.WithTimeout(t.Context(), waitHang)
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v2/models/echo/generate_stream",
		strings.NewReader(`{"text_input":"`+words(50)+`","stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("the stream beside the stalled one: %v", err)
	}
	if evs := events(t, string(body)); resp.StatusCode != 200 || len(evs) != 51 || strings.Contains(string(body), `"error"`) {
		t.Fatalf("the stream beside the stalled one: %d, %d events", resp.StatusCode, len(evs))
	}
	if st := s.up.Stats(); st.Started != 2 {
		t.Fatalf("%d upstream calls, want 2", st.Started)
	}
	stillWriting(t, s)
}
