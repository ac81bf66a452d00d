package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/gateway"
	"github.com/streamgate/streamgate/gateway/sse"
	"github.com/streamgate/streamgate/gateway/ws"
)

// lastData reads r to its end and returns its last event's data.
func lastData(t *testing.T, r *sse.Reader) string {
	t.Helper()
	var last string
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return last
		}
		if err != nil {
			t.Fatal(err)
		}
		last = ev.Data
	}
}

// smallServerBuffers gives the gateway's connections small socket send
// buffers, so that a client that does not read stalls its writer soon.
func smallServerBuffers(c *stack.Config) { serverSendBuffer(c, 16<<10) }

// serverSendBuffer sets the socket send buffer of the gateway's
// connections to size bytes (the kernel keeps its own minimum).
func serverSendBuffer(c *stack.Config, size int) {
	c.Server = func(srv *http.Server) {
		srv.ConnState = func(c net.Conn, st http.ConnState) {
			if rc, ok := c.(interface{ NetConn() net.Conn }); ok { // rawsock.Conn
				c = rc.NetConn()
			}
			// Handed back (detach), a connection is new again: its
			// buffer was set when it was accepted.
			if tc, ok := c.(*net.TCPConn); ok && st == http.StateNew {
				tc.SetWriteBuffer(size)
			}
		}
	}
}

// stallingClient is an HTTP client whose connections have small receive
// buffers; its caller reads nothing.
func stallingClient(t *testing.T) *http.Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetReadBuffer(16 << 10)
		}
		return c, err
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// floodText is an echo prompt of 64 words of 16 KiB (1 MiB): far more
// than the buffers between the gateway and a client hold (16 KiB socket
// buffers each side), and little enough that a saturated machine relays
// it in seconds.
var floodText = strings.TrimSpace(strings.Repeat(strings.Repeat("x", 16<<10)+" ", floodWords))

const floodWords = 64

// stillWriting fails the test unless the gateway still relays its one
// event stream, stuck writing to its client: else Drain would have
// nothing to cut. (A WebSocket request ends once its frames are in the
// socket's queue; the flood is as far over the same buffers there.)
func stillWriting(t *testing.T, s *testStack) {
	t.Helper()
	if n := s.metricValue(t, `streamgate_gateway_active_requests{protocol="sse"}`); n != 1 {
		t.Fatalf("%v event streams active, want the stalled one", n)
	}
}

// drainNow drains s with a context that is already done and fails the
// test if Drain has not returned long after (a hang guard, not a timing
// assertion: Drain should return at once).
func drainNow(t *testing.T, s *testStack) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	done := make(chan error, 1)
	go func() { done <- s.gw.Drain(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Drain = %v", err)
		}
	case <-time.After(waitHang):
		t.Fatalf("Drain still runs %v after its context ended: it waits for a client that does not read", waitHang)
	}
}

// Drain does not outlive its context when an event stream's client does
// not read and writes have no timeout: once the stream has been ended,
// its connection is cut.
func TestDrainCutsStalledSSE(t *testing.T) {
	s := newStack(t, &gateway.Options{MaxBodyBytes: 64 << 20, SSE: &sse.Options{WriteTimeout: -1}}, smallServerBuffers)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.url+"/v2/models/echo/generate_stream",
		strings.NewReader(`{"text_input":"`+floodText+`","stream":true}`))
	resp, err := stallingClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Unread, the stream falls behind: the engine has sent everything
	// (upstream holds it for the client) while the handler is stuck
	// writing.
	waitFor(t, "the engine to finish the stalled stream", func() bool { st := s.up.Stats(); return st.Started == 1 && st.InFlight == 0 })
	stillWriting(t, s)
	drainNow(t, s)
}

// A detached event stream whose end the socket did not take at once is
// finished on a goroutine of its own, which waits for the client (here
// with no write timeout): Drain cuts its connection, and the goroutine
// ends. The stream is one response (echo, not streaming) of one batch,
// ended on the upstream reader with its headers, its event and its last
// chunk in one write (detach's EndWith, FinishNow), which socket buffers
// as small as the kernel allows (a few KB) cannot take.
func TestDrainCutsStalledSSEFinish(t *testing.T) {
	s := newStack(t, &gateway.Options{SSE: &sse.Options{WriteTimeout: -1}}, func(c *stack.Config) { serverSendBuffer(c, 1) })
	tr := &http.Transport{DialContext: (&net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1) })
	}}).DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	word := strings.Repeat("x", 20<<10) // a batch (under 32 KiB) that the buffers cannot take
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.url+"/v2/models/echo/generate_stream",
		strings.NewReader(`{"text_input":"`+word+`","stream":false}`))
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	const finishing = "core.(*detached).finish("
	waitFor(t, "the stream to wait in its finishing goroutine", func() bool { return strings.Contains(allStacks(), finishing) })
	drainNow(t, s)
	waitFor(t, "the finishing goroutine to end", func() bool { return !strings.Contains(allStacks(), finishing) })
	if n, err := io.Copy(io.Discard, resp.Body); err == nil {
		t.Fatalf("the client read the whole stream (%d bytes), want it cut", n)
	}
}

// allStacks is every goroutine's stack.
func allStacks() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

// Drain does not outlive its context when a WebSocket client does not
// read, however long the socket's write timeout: the socket is cut.
func TestDrainCutsStalledWebSocket(t *testing.T) {
	s := newStack(t, &gateway.Options{
		MaxBodyBytes: 64 << 20,
		WebSocket:    &ws.Options{WriteTimeout: time.Hour, QueueBytes: 1 << 30, ReadLimit: 64 << 20},
	}, smallServerBuffers)
	c, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(s.url, "http")+"/v1/ws",
		&websocket.DialOptions{Subprotocols: []string{ws.Subprotocol}, HTTPClient: stallingClient(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	wsSend(t, c, `{"type":"completions","id":"flood","body":{"model":"echo","prompt":"`+floodText+`","max_tokens":`+strconv.Itoa(floodWords)+`}}`)
	// The socket's queue takes every frame while its writer is stuck.
	waitFor(t, "the engine to finish the stalled request", func() bool { st := s.up.Stats(); return st.Started == 1 && st.InFlight == 0 })
	drainNow(t, s)
}
