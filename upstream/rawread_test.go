package upstream

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// A connection with raw reads reads as a net.Conn does: what the peer
// wrote, the read deadline (os.ErrDeadlineExceeded, which kaReader
// waits on), and io.EOF once the peer has closed.
func TestRawReads(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	dialed, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := withRawReads(dialed)
	defer c.Close()
	if _, ok := c.(*rawReadConn); !ok {
		t.Fatalf("a TCP connection got %T", c)
	}
	peer := <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}
	if _, err := peer.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 16)
	if n, err := io.ReadAtLeast(c, b, 5); err != nil || string(b[:n]) != "hello" {
		t.Fatalf("read %q, %v", b[:n], err)
	}
	c.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := c.Read(b); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("past the deadline: %v", err)
	}
	c.SetReadDeadline(time.Time{})
	peer.Close()
	if n, err := c.Read(b); n != 0 || err != io.EOF {
		t.Fatalf("after the peer closed: %d, %v", n, err)
	}
}
