package ws

import (
	"context"
	encbin "encoding/binary"
	"io"
	"net"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"
)

// readFrame reads one unmasked, final frame from r: its opcode and
// payload.
func readFrame(t *testing.T, r io.Reader) (byte, []byte) {
	t.Helper()
	var h [8]byte
	if _, err := io.ReadFull(r, h[:2]); err != nil {
		t.Fatal(err)
	}
	if h[0]&finBit == 0 || h[1]&0x80 != 0 {
		t.Fatalf("frame header % x: want a final, unmasked frame", h[:2])
	}
	op, n := h[0]&0x0f, uint64(h[1]&0x7f)
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
		t.Fatalf("frame of %d bytes: %v", n, err)
	}
	return op, p
}

// bigBatch is a socket whose session runs with one data frame far
// larger than the loopback connection's buffers taken by its writer
// (still being written: the client has read nothing), and the client's
// end. The session ends at the test's cleanup.
func bigBatch(t *testing.T) (s *Session, client net.Conn, data []byte) {
	c, client := acceptedConn(t)
	s = NewSession(c, nil, &Options{QueueBytes: 256 << 20, PingInterval: -1})
	data = DataFrame("a1", 0, []byte(`"`+strings.Repeat("x", 64<<20)+`"`))
	if err := s.enqueue(data); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		client.Close()
		wg.Wait()
	})
	for { // until the writer has taken the frame
		c.out.mu.Lock()
		taken := c.out.inFlight > 0
		c.out.mu.Unlock()
		if taken {
			return s, client, data
		}
		runtime.Gosched()
	}
}

// TestStopDropsFramesBehindBatch: Stop (like a 1008 close) drops the
// frames that wait behind the batch being written there and then: the
// batch ends, and the close frame follows it at once.
func TestStopDropsFramesBehindBatch(t *testing.T) {
	s, client, data := bigBatch(t)
	if err := s.enqueue(DataFrame("a1", 1, []byte(`"late"`))); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	readThenClose(t, client, data, websocket.StatusGoingAway)
}

// readThenClose reads the text frame data from client, then a close
// frame with code.
func readThenClose(t *testing.T, client io.Reader, data []byte, code websocket.StatusCode) {
	t.Helper()
	if p := readTextFrame(t, client); string(p) != string(data) {
		t.Fatalf("first frame: %d bytes; want the data frame", len(p))
	}
	op, p := readFrame(t, client)
	if op != opClose || len(p) < 2 || websocket.StatusCode(encbin.BigEndian.Uint16(p)) != code {
		t.Fatalf("then opcode %d %q; want the close frame, %d", op, p, code)
	}
}

// TestClientCloseEchoedBehindBatch: a client's close frame that comes
// while the writer writes a batch is echoed after the batch, whole:
// coder/websocket closes the connection once its echo is written.
func TestClientCloseEchoedBehindBatch(t *testing.T) {
	_, client, data := bigBatch(t)
	// A masked close frame, 1000, mask 0.
	if _, err := client.Write([]byte{finBit | opClose, 0x80 | 2, 0, 0, 0, 0, 0x03, 0xe8}); err != nil {
		t.Fatal(err)
	}
	readThenClose(t, client, data, websocket.StatusNormalClosure)
}

// TestStopKeepsClientCloseEcho: Stop while the echo of a client's close
// frame waits behind a batch drops the data behind the batch but not the
// echo, which coder's Write waits for.
func TestStopKeepsClientCloseEcho(t *testing.T) {
	s, client, data := bigBatch(t)
	if err := s.enqueue(DataFrame("a1", 1, []byte(`"late"`))); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write([]byte{finBit | opClose, 0x80 | 2, 0, 0, 0, 0, 0x03, 0xe8}); err != nil {
		t.Fatal(err)
	}
	out := s.conn.out
	for { // until coder's echo waits in the line
		out.mu.Lock()
		queued := out.closeLen > 0
		out.mu.Unlock()
		if queued {
			break
		}
		runtime.Gosched()
	}
	s.Stop()
	readThenClose(t, client, data, websocket.StatusNormalClosure)
}

// TestConnOffersNoMessageWriter: a Conn has no method that writes a
// message past its ordered line (coder's Write and Writer), and
// WriteText's message reads back whole.
func TestConnOffersNoMessageWriter(t *testing.T) {
	for _, m := range []string{"Write", "Writer"} {
		if _, ok := reflect.TypeFor[*Conn]().MethodByName(m); ok {
			t.Errorf("Conn offers %s", m)
		}
	}
	c, client := acceptedConn(t)
	msg := []byte(`{"type":"error"}`)
	if err := c.WriteText(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	if p := readTextFrame(t, client); string(p) != string(msg) {
		t.Fatalf("read %q, want %q", p, msg)
	}
}
