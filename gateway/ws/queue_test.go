package ws

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"

	"github.com/streamgate/streamgate/upstream/budget"
)

// pipeWriter is an http.ResponseWriter whose Hijack hands over conn.
type pipeWriter struct {
	h    http.Header
	conn net.Conn
}

func (w *pipeWriter) Header() http.Header         { return w.h }
func (w *pipeWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *pipeWriter) WriteHeader(int)             {}
func (w *pipeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return w.conn, bufio.NewReadWriter(bufio.NewReader(w.conn), bufio.NewWriter(w.conn)), nil
}

// discardConn is a socket accepted over a loopback TCP connection whose
// client end reads and drops everything.
func discardConn(t *testing.T) *Conn {
	c, client := acceptedConn(t)
	var wg sync.WaitGroup
	wg.Go(func() { io.Copy(io.Discard, client) })
	t.Cleanup(func() {
		c.CloseNow()
		wg.Wait()
	})
	return c
}

// acceptedConn is a socket accepted over a loopback TCP connection, and
// the connection's client end (past the handshake's request; the 101
// went to the test's ResponseWriter).
func acceptedConn(t *testing.T) (*Conn, net.Conn) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	client, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		server.Close()
		client.Close()
	})
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	for k, v := range map[string]string{"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
		"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol": Subprotocol} {
		r.Header.Set(k, v)
	}
	c, err := Accept(&pipeWriter{h: http.Header{}, conn: server}, r, &websocket.AcceptOptions{Subprotocols: []string{Subprotocol}})
	if err != nil {
		t.Fatal(err)
	}
	return c, client
}

// TestFramesQueuedForWriter: a frame sent is framed into the socket's
// buffer and the writer woken (once, for the first frame waiting); the
// writer's flush writes them all, and they read back as RFC 6455 text
// frames, headers of every size included.
func TestFramesQueuedForWriter(t *testing.T) {
	c, client := acceptedConn(t)
	s := NewSession(c, nil, nil)
	sizes := []int{10, 125, 126, 300, 0xffff, 0x10000, 200 << 10}
	var want [][]byte
	for i, size := range sizes {
		data := []byte(`"` + strings.Repeat("x", size) + `"`)
		if err := s.push(len(data)+64, func(b []byte) []byte { return AppendDataFrame(b, "a1", uint64(i), data) }); err != nil {
			t.Fatal(err)
		}
		if len(c.out.wake) != 1 || len(c.out.buf) == 0 {
			t.Fatalf("frame %d: %d wake-ups pending, %d bytes wait; want 1 and the frames", i, len(c.out.wake), len(c.out.buf))
		}
		want = append(want, DataFrame("a1", uint64(i), data))
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := c.out.flush(); err != nil {
			t.Error(err)
		}
	})
	for i := range sizes {
		if got := readTextFrame(t, client); string(got) != string(want[i]) {
			t.Fatalf("frame %d: read %d bytes, want %d", i, len(got), len(want[i]))
		}
	}
	wg.Wait()
}

// readTextFrame reads one unmasked, final text frame from r and returns
// its payload.
func readTextFrame(t *testing.T, r io.Reader) []byte {
	t.Helper()
	op, p := readFrame(t, r)
	if op != opText {
		t.Fatalf("opcode %d, want a text frame", op)
	}
	return p
}

// TestSendPathAllocatesNothing: sending a data frame and writing what waits allocates nothing once the buffers have
// grown.
func TestSendPathAllocatesNothing(t *testing.T) {
	s := NewSession(discardConn(t), nil, nil)
	data := []byte(`{"model_name":"repeat_int32","model_version":"1","OUT":7,"IDX":3}`)
	var seq uint64
	send := func() {
		for range 3 {
			err := s.push(len(data)+64, func(b []byte) []byte { return AppendDataFrame(b, "a1", seq, data) })
			if err != nil {
				t.Fatal(err)
			}
			seq++
		}
		if err := s.conn.out.flush(); err != nil {
			t.Fatal(err)
		}
	}
	send()
	if n := testing.AllocsPerRun(1000, send); n != 0 {
		t.Fatalf("%v allocations per batch of 3 frames", n)
	}
}

// TestStalledSocketsStayWithinBudget: sockets whose clients read nothing
// while their requests produce without end are each closed with 1008 once
// their queue is over its bound, and together never borrow more than the
// shared budget, which gets everything back.
func TestStalledSocketsStayWithinBudget(t *testing.T) {
	mem := budget.New(3 << 20)
	payload := []byte(`"` + strings.Repeat("x", 16<<10) + `"`)
	h := func(ctx context.Context, req *Request, emit func([]byte) error) error {
		for {
			if err := emit(payload); err != nil {
				return err
			}
		}
	}
	srv := newServer(t, h, &Options{QueueBytes: 1 << 20, Memory: mem})
	const sockets = 8
	var wg sync.WaitGroup
	for range sockets {
		c := dial(t, srv.url)
		send(t, c, `{"type":"generate","id":"a","model":"m"}`)
		send(t, c, `{"type":"generate","id":"b","model":"m"}`)
		wg.Go(func() {
			// Read nothing until the server gives up, then see why.
			<-(<-srv.sessions).closed
			for {
				if _, _, err := c.Read(context.Background()); err != nil {
					if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
						t.Errorf("closed with %v, want 1008", err)
					}
					return
				}
			}
		})
	}
	wg.Wait()
	srv.wg.Wait() // every session has ended
	if mem.Peak() > mem.Limit() || mem.Used() != 0 {
		t.Fatalf("borrowed %d at the peak of %d, %d still", mem.Peak(), mem.Limit(), mem.Used())
	}
}

// TestWriterBuffersNeverShared: the writer's two buffers (the batch it
// writes and the one senders fill meanwhile) never become one, also
// after a batch too large to keep.
func TestWriterBuffersNeverShared(t *testing.T) {
	s := NewSession(discardConn(t), nil, &Options{QueueBytes: 1 << 20})
	out := s.conn.out
	out.now = nil // every frame waits for the writer
	for i, size := range []int{10, 10, 200 << 10, 10, 10} {
		data := []byte(`"` + strings.Repeat("x", size) + `"`)
		if err := s.push(len(data)+64, func(b []byte) []byte { return AppendDataFrame(b, "a1", uint64(i), data) }); err != nil {
			t.Fatal(err)
		}
		if err := out.flush(); err != nil {
			t.Fatal(err)
		}
		if cap(out.buf) > 0 && cap(out.spare) > 0 && &out.buf[:1][0] == &out.spare[:1][0] {
			t.Fatalf("after batch %d the senders' buffer is the writer's", i)
		}
	}
}

// TestPingBehindDataLeftToWriter: a control frame coder/websocket writes
// (a ping or pong) behind data frames waiting for the writer is queued
// behind them and the writer woken, not written by coder's goroutine
// under coder's own 5 s limit; the writer then writes both, in order.
func TestPingBehindDataLeftToWriter(t *testing.T) {
	c, client := acceptedConn(t)
	data := DataFrame("a1", 0, []byte(`"x"`))
	c.out.mu.Lock()
	c.out.buf = appendTextFrame(c.out.buf, func(b []byte) []byte { return append(b, data...) })
	waiting := len(c.out.buf)
	c.out.mu.Unlock()
	ping := []byte{finBit | 0x9, 2, 'h', 'i'}
	if n, err := c.out.Write(ping); err != nil || n != len(ping) {
		t.Fatalf("Write = %d, %v", n, err)
	}
	c.out.mu.Lock()
	left, woken := len(c.out.buf), len(c.out.wake)
	c.out.mu.Unlock()
	if left != waiting+len(ping) || woken != 1 {
		t.Fatalf("after the ping: %d bytes wait (want %d), %d wake-ups pending (want 1)", left, waiting+len(ping), woken)
	}
	if err := c.out.flush(); err != nil {
		t.Fatal(err)
	}
	if got := readTextFrame(t, client); string(got) != string(data) {
		t.Fatalf("first frame %q, want the data frame", got)
	}
	got := make([]byte, len(ping))
	if _, err := io.ReadFull(client, got); err != nil || string(got) != string(ping) {
		t.Fatalf("then %q, %v; want the ping", got, err)
	}
}
