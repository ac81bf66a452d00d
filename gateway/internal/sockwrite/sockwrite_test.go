package sockwrite

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// pair is a loopback TCP connection's two ends.
func pair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); peer.Close() })
	return c, peer
}

// Write never waits: with the peer not reading it writes what the socket
// takes until it takes nothing, and the peer gets exactly what it took,
// in order.
func TestWriteNeverWaits(t *testing.T) {
	c, peer := pair(t)
	c.(*net.TCPConn).SetWriteBuffer(16 << 10)
	w := New(c)
	if w == nil {
		t.Fatal("a TCP connection has no Writer")
	}
	var sent bytes.Buffer
	chunk := bytes.Repeat([]byte("x"), 4<<10)
	for i := 0; ; i++ {
		chunk[0] = byte('a' + i%26)
		n, err := w.Write(chunk)
		if err != nil {
			t.Fatal(err)
		}
		sent.Write(chunk[:n])
		if n < len(chunk) {
			break // full
		}
	}
	c.Close()
	got, err := io.ReadAll(peer)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, sent.Bytes()) {
		t.Fatalf("the peer got %d bytes, want the %d written, in order", len(got), sent.Len())
	}
}

// A write past the deadline fails, as the connection's own would; a
// connection with no socket of its own has no Writer.
func TestWriteFails(t *testing.T) {
	c, _ := pair(t)
	w := New(c)
	c.SetWriteDeadline(time.Now().Add(-time.Second))
	if _, err := w.Write([]byte("late")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("past the deadline: %v", err)
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if New(p1) != nil {
		t.Fatal("a pipe got a Writer")
	}
}
