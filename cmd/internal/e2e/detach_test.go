package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/gateway/sse"
	"github.com/streamgate/streamgate/gateway/ws"
)

// Event streams over plaintext HTTP/1.1 leave net/http once validated
// (gateway.Options.Detach, set by the stack) and give their connection
// back when they end. These tests check that a client sees no difference.

// connStates records the states the gateway's http.Server saw its
// connections in.
type connStates struct {
	mu sync.Mutex
	n  map[http.ConnState]int
}

func (cs *connStates) record(c *stack.Config) {
	cs.n = map[http.ConnState]int{}
	c.Server = func(srv *http.Server) {
		srv.ConnState = func(_ net.Conn, st http.ConnState) {
			cs.mu.Lock()
			defer cs.mu.Unlock()
			cs.n[st]++
		}
	}
}

func (cs *connStates) count(st http.ConnState) int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.n[st]
}

// streamRequest is a raw HTTP/1.1 generate_stream request for the echo
// model (one event per word, then the final one).
func streamRequest(model, text string) string {
	body := `{"text_input":"` + text + `","stream":true}`
	return fmt.Sprintf("POST /v2/models/%s/generate_stream HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", model, len(body), body)
}

// readStream reads one event-stream response from br and returns its
// events' data.
func readStream(t *testing.T, br *bufio.Reader) []string {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
		t.Fatalf("status %d, transfer encoding %v", resp.StatusCode, resp.TransferEncoding)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return events(t, string(body))
}

// Two streams and a plain request, one after the other, on one client
// connection: the connection the first stream took from net/http comes
// back for the next request (keep-alive works).
func TestDetachedStreamKeepAlive(t *testing.T) {
	var cs connStates
	s := newStack(t, noKeepAlive(), cs.record)
	dials := 0
	tr := &http.Transport{MaxConnsPerHost: 1, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials++
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for i := range 2 {
		resp, err := client.Post(s.url+"/v2/models/echo/generate_stream", "application/json",
			strings.NewReader(`{"text_input":"`+words(5)+`","stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || len(events(t, string(body))) != 6 {
			t.Fatalf("stream %d: %d %v %q", i, resp.StatusCode, err, body)
		}
	}
	resp, err := client.Get(s.url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("healthz after the streams: %d", resp.StatusCode)
	}
	if dials != 1 {
		t.Errorf("%d connections dialled, want 1 (kept alive)", dials)
	}
	if got := cs.count(http.StateHijacked); got != 2 {
		t.Errorf("%d connections left net/http, want 2 (both streams detached)", got)
	}
}

// Requests pipelined behind a stream, sent before it started or while it
// runs, are answered after it on the same connection.
func TestDetachedStreamPipelined(t *testing.T) {
	s := newStack(t, noKeepAlive())
	c := dialRaw(t, s)
	br := bufio.NewReader(c)
	// The second request arrives with the first: net/http has read it.
	if _, err := io.WriteString(c, streamRequest("echo", words(3))+"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if evs := readStream(t, br); len(evs) != 4 {
		t.Fatalf("first stream: %d events", len(evs))
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != `{"status":"ok"}` {
		t.Fatalf("pipelined healthz: %d %s", resp.StatusCode, body)
	}

	// The next one arrives while a stream runs (echo_slow: 20 ms a word).
	if _, err := io.WriteString(c, streamRequest("echo_slow", words(20))); err != nil {
		t.Fatal(err)
	}
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := sse.NewReader(resp.Body)
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, streamRequest("echo", words(2))); err != nil {
		t.Fatal(err)
	}
	n := 1
	for {
		if _, err := r.Next(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n++
	}
	resp.Body.Close()
	if n != 21 {
		t.Fatalf("running stream: %d events, want 21", n)
	}
	if evs := readStream(t, br); len(evs) != 3 {
		t.Fatalf("stream pipelined while one ran: %d events", len(evs))
	}
}

// A client that closes its connection in the middle of a detached stream
// cancels its request upstream, and it is counted as gone.
func TestDetachedStreamClientLeaves(t *testing.T) {
	s := newStack(t, nil)
	c := dialRaw(t, s)
	if _, err := io.WriteString(c, streamRequest("echo_slow", words(50000))); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sse.NewReader(resp.Body).Next(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the request to run", func() bool { return s.eng.InFlight() == 1 })
	c.Close()
	waitFor(t, "the engine to stop the abandoned request", func() bool { return s.eng.InFlight() == 0 })
	waitFor(t, "client_gone metric", func() bool {
		return s.metricValue(t, `streamgate_gateway_client_gone_total{protocol="sse"}`) == 1
	})
	noServerFaults(t, s)
}

// Drain ends a detached stream with its error event and closes its
// connection: nothing is handed back to a server that is stopping.
func TestDrainEndsDetachedStream(t *testing.T) {
	s := newStack(t, nil)
	c := dialRaw(t, s)
	if _, err := io.WriteString(c, streamRequest("echo_slow", words(50000))); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := sse.NewReader(resp.Body)
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	drainNow(t, s)
	if last := lastData(t, r); last != `{"error":"server is shutting down"}` {
		t.Errorf("last event %q, want the drain's error", last)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after the stream: %v, want the connection closed", err)
	}
}

// A detached stream is accounted as a stream in net/http is: the access
// log and the request metrics show 200, with the stream's whole duration.
func TestDetachedStreamAccounting(t *testing.T) {
	s := newStack(t, nil)
	c := dialRaw(t, s)
	// echo_slow sleeps 20 ms before each of its 10 words: the stream lasts
	// at least 200 ms.
	if _, err := io.WriteString(c, streamRequest("echo_slow", words(10))); err != nil {
		t.Fatal(err)
	}
	if evs := readStream(t, bufio.NewReader(c)); len(evs) != 11 {
		t.Fatalf("%d events", len(evs))
	}
	series := `streamgate_gateway_http_requests_total{code="200",route="/v2/models/{model}/generate_stream"}`
	waitFor(t, "the stream counted as 200", func() bool { return s.metricValue(t, series) == 1 })
	line := regexp.MustCompile(`msg=request method=POST path=\S+ route=/v2/models/\{model\}/generate_stream status=(\d+) model=echo_slow (?:tokens=\d+ )?duration=(\S+)`).FindStringSubmatch(s.logs.String())
	if line == nil {
		t.Fatalf("no access log line for the stream in:\n%s", tail(s.logs.String(), 4<<10))
	}
	d, err := time.ParseDuration(line[2])
	if line[1] != "200" || err != nil || d < 200*time.Millisecond {
		t.Errorf("access log: status %s, duration %s (%v), want 200 and at least the model's 200ms", line[1], line[2], err)
	}
}

// A connection a detached stream handed back carries a WebSocket upgrade
// next: the socket serves requests over it (writing raw: the connection
// handed back keeps its socket, SyscallConn).
func TestDetachedStreamThenWebSocket(t *testing.T) {
	s := newStack(t, nil)
	c := dialRaw(t, s)
	if _, err := io.WriteString(c, streamRequest("echo", words(3))); err != nil {
		t.Fatal(err)
	}
	if evs := readStream(t, bufio.NewReader(c)); len(evs) != 4 {
		t.Fatalf("stream: %d events", len(evs))
	}
	dials := 0
	hc := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
		dials++
		if dials > 1 {
			return nil, errors.New("dialled again")
		}
		return c, nil
	}}}
	sock, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(s.url, "http")+"/v1/ws",
		&websocket.DialOptions{Subprotocols: []string{ws.Subprotocol}, HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.CloseNow()
	wsSend(t, sock, `{"type":"generate","id":"a","model":"echo","body":{"text_input":"`+words(4)+`"}}`)
	frames := wsReadToEnd(t, sock)
	if len(frames) != 2 || !strings.Contains(frames[0], `"text_output":"w0 w1 w2 w3"`) || !strings.Contains(frames[1], `"reason":"final"`) {
		t.Fatalf("frames %q", frames)
	}
}

// Stopping the stack closes the connections detached streams handed
// back: one waiting in the hand-back listener for its next request, and
// one that came back with a pipelined request, answered and now idle in
// net/http.
func TestStopClosesHandedBack(t *testing.T) {
	s := newStack(t, nil)
	idle := dialRaw(t, s)
	idleR := bufio.NewReader(idle)
	if _, err := io.WriteString(idle, streamRequest("echo", words(3))); err != nil {
		t.Fatal(err)
	}
	readStream(t, idleR)
	piped := dialRaw(t, s)
	pipedR := bufio.NewReader(piped)
	if _, err := io.WriteString(piped, streamRequest("echo", words(3))+"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	readStream(t, pipedR)
	resp, err := http.ReadResponse(pipedR, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	s.StopNow()
	for name, br := range map[string]*bufio.Reader{"idle": idleR, "pipelined": pipedR} {
		if _, err := br.ReadByte(); err == nil {
			t.Errorf("%s connection: still open after Stop", name)
		}
	}
}
