package ws

import (
	"bufio"
	"context"
	encbin "encoding/binary"
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

// TestFrameWrittenBySender: a frame sent while nothing waits before it is
// on the network when push returns, written by the sending goroutine: no
// writer runs (the session is not Run) and none was woken (a large one
// may not fit the socket's buffer: its rest is flushed here). The frames
// read back as RFC 6455 text frames, headers of every size included.
func TestFrameWrittenBySender(t *testing.T) {
	c, client := acceptedConn(t)
	s := NewSession(c, nil, nil)
	for i, size := range []int{10, 125, 126, 300, 0xffff, 0x10000, 200 << 10} {
		data := []byte(`"` + strings.Repeat("x", size) + `"`)
		if err := s.push(len(data)+64, func(b []byte) []byte { return AppendDataFrame(b, "a1", uint64(i), data) }); err != nil {
			t.Fatal(err)
		}
		if len(c.out.wake) != 0 || len(c.out.buf) != 0 {
			// A socket buffer too small for the frame leaves the rest to
			// the writer; the small frames always fit.
			if size <= 300 {
				t.Fatalf("frame %d (%d bytes) waits for the writer", i, size)
			}
			go s.conn.out.flush()
		}
		want := DataFrame("a1", uint64(i), data)
		got := readTextFrame(t, client)
		if string(got) != string(want) {
			t.Fatalf("frame %d: read %d bytes, want %d", i, len(got), len(want))
		}
	}
}

// readTextFrame reads one unmasked, final text frame from r and returns
// its payload.
func readTextFrame(t *testing.T, r io.Reader) []byte {
	t.Helper()
	var h [10]byte
	if _, err := io.ReadFull(r, h[:2]); err != nil {
		t.Fatal(err)
	}
	if h[0] != 0x81 || h[1]&0x80 != 0 {
		t.Fatalf("frame header % x: want a final, unmasked text frame", h[:2])
	}
	n := uint64(h[1])
	switch n {
	case 126:
		if _, err := io.ReadFull(r, h[:2]); err != nil {
			t.Fatal(err)
		}
		n = uint64(encbin.BigEndian.Uint16(h[:2]))
	case 127:
		if _, err := io.ReadFull(r, h[:8]); err != nil {
			t.Fatal(err)
		}
		n = encbin.BigEndian.Uint64(h[:8])
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSendPathAllocatesNothing: sending a data frame (written at once or
// queued) and writing what waits allocates nothing once the buffers have
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

// TestSenderWritesWhileBatchesAreSingle: a frame that finds the socket
// idle is written by its sender while the writer's batches hold one
// frame; once a batch holds more (frames arrive faster than single
// writes go out), frames wait for the writer to batch them, until
// singleToDirect batches in a row hold one. One frame in probeEvery
// waits anyway.
func TestSenderWritesWhileBatchesAreSingle(t *testing.T) {
	s := NewSession(discardConn(t), nil, nil)
	out := s.conn.out
	frame := []byte(`{"type":"done","id":"a","reason":"final"}`)
	sent := 0
	push := func() (waits bool) {
		t.Helper()
		if err := s.enqueue(frame); err != nil {
			t.Fatal(err)
		}
		sent++
		return len(out.buf) > 0
	}
	for sent < probeEvery-1 {
		if push() {
			t.Fatalf("frame %d waits for the writer on an idle socket", sent)
		}
	}
	if !push() {
		t.Fatalf("frame %d (the probe) was written by its sender", sent)
	}
	push() // joins the probe: a batch of two
	if err := out.flush(); err != nil {
		t.Fatal(err)
	}
	for i := range singleToDirect {
		if !push() {
			t.Fatalf("a frame was written by its sender after a batch of two and %d of one", i)
		}
		if err := out.flush(); err != nil { // a batch of one
			t.Fatal(err)
		}
	}
	if push() {
		t.Fatalf("a frame waits for the writer after %d batches of one", singleToDirect)
	}
}
