package rawsock

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// pair is a loopback TCP connection's two ends: the dialled end wrapped
// (Wrap), the accepted one plain.
func pair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialed, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c, ok := Wrap(dialed).(*Conn)
	if !ok {
		t.Fatalf("a TCP connection was not wrapped")
	}
	t.Cleanup(func() { c.Close(); peer.Close() })
	return c, peer
}

// A Conn reads as a net.Conn does: what the peer wrote, the read
// deadline (os.ErrDeadlineExceeded), and io.EOF once the peer has
// closed.
func TestRead(t *testing.T) {
	c, peer := pair(t)
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
	var ne net.Error
	if _, err := c.Read(b); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("past the deadline, not a net.Error timeout: %v", err)
	}
	c.SetReadDeadline(time.Time{})
	peer.Close()
	if n, err := c.Read(b); n != 0 || err != io.EOF {
		t.Fatalf("after the peer closed: %d, %v", n, err)
	}
}

// CloseWrite half-closes: the peer reads the end, and the connection
// still reads what the peer sends.
func TestCloseWrite(t *testing.T) {
	c, peer := pair(t)
	if _, err := c.Write([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(peer); err != nil || string(got) != "bye" {
		t.Fatalf("the peer read %q, %v", got, err)
	}
	peer.Write([]byte("ok"))
	peer.Close()
	if got, err := io.ReadAll(c); err != nil || string(got) != "ok" {
		t.Fatalf("read %q, %v after CloseWrite", got, err)
	}
}

// Close ends a read waiting in the poller with net.ErrClosed, as it ends
// a net.Conn's.
func TestCloseEndsRead(t *testing.T) {
	c, _ := pair(t)
	got := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		got <- err
	}()
	c.Close()
	if err := <-got; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read on a closed connection: %v", err)
	}
}

// Write writes everything, in order, waiting while the socket is full
// (a small send buffer and a peer that reads slowly make it wait many
// times), while another goroutine reads the same connection.
func TestWriteAll(t *testing.T) {
	c, peer := pair(t)
	c.Conn.(*net.TCPConn).SetWriteBuffer(4 << 10)
	want := make([]byte, 2<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	var got []byte
	var readErr error
	go func() { // the peer: reads everything, then echoes "bye"
		defer wg.Done()
		buf := make([]byte, 1000)
		for len(got) < len(want) {
			n, err := peer.Read(buf)
			if err != nil {
				readErr = err
				return
			}
			got = append(got, buf[:n]...)
		}
		_, readErr = peer.Write([]byte("bye"))
	}()
	var echo []byte
	var echoErr error
	go func() { // a reader of c beside the writer
		defer wg.Done()
		echo = make([]byte, 3)
		_, echoErr = io.ReadFull(c, echo)
	}()
	n, err := c.Write(want)
	if err != nil || n != len(want) {
		t.Fatalf("wrote %d of %d: %v", n, len(want), err)
	}
	wg.Wait()
	if readErr != nil || echoErr != nil {
		t.Fatalf("peer: %v; reader: %v", readErr, echoErr)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the peer got %d bytes, not the %d written in order", len(got), len(want))
	}
	if string(echo) != "bye" {
		t.Fatalf("read %q", echo)
	}
}

// A write waiting on a full socket ends at its deadline with what it
// wrote and os.ErrDeadlineExceeded.
func TestWriteDeadline(t *testing.T) {
	c, _ := pair(t)
	c.Conn.(*net.TCPConn).SetWriteBuffer(4 << 10)
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	big := make([]byte, 64<<20) // more than any socket buffer takes
	n, err := c.Write(big)
	if !errors.Is(err, os.ErrDeadlineExceeded) || n >= len(big) {
		t.Fatalf("wrote %d of %d to a peer that reads nothing: %v", n, len(big), err)
	}
}

// Writer never waits: with the peer not reading it writes what the
// socket takes until it takes nothing, and the peer gets exactly what it
// took, in order.
func TestWriterNeverWaits(t *testing.T) {
	c, peer := pair(t)
	c.Conn.(*net.TCPConn).SetWriteBuffer(16 << 10)
	w := NewWriter(c)
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

// A Writer's write past the deadline fails, as the connection's own
// would; a connection with no socket of its own has no Writer and is not
// wrapped.
func TestWriterFails(t *testing.T) {
	c, _ := pair(t)
	w := NewWriter(c)
	c.SetWriteDeadline(time.Now().Add(-time.Second))
	if _, err := w.Write([]byte("late")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("past the deadline: %v", err)
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if NewWriter(p1) != nil {
		t.Fatal("a pipe got a Writer")
	}
	if Wrap(p1) != p1 {
		t.Fatal("a pipe was wrapped")
	}
}

// Listener's connections are Conns.
func TestListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Listener{ln}
	defer l.Close()
	dialed, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer dialed.Close()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*Conn); !ok {
		t.Fatalf("accepted %T", c)
	}
}

// TestMain fails the run if any goroutine outlived its test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// readFromSpy is a TCP connection that notes what its ReadFrom was given.
type readFromSpy struct {
	*net.TCPConn
	got []string
}

func (c *readFromSpy) ReadFrom(r io.Reader) (int64, error) {
	c.got = append(c.got, fmt.Sprintf("%T", r))
	return c.TCPConn.ReadFrom(r)
}

// ReadFrom hands a file, alone or limited, to the wrapped connection's
// ReadFrom (sendfile), and copies any other reader itself; the peer reads
// the same bytes either way.
func TestReadFrom(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tc, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	spy := &readFromSpy{TCPConn: tc}
	c, ok := Wrap(spy).(*Conn)
	if !ok {
		t.Fatal("the connection was not wrapped")
	}
	defer c.Close()

	data := bytes.Repeat([]byte("0123456789abcdef"), 16<<10) // 256 KiB, more than the buffers hold
	f, err := os.CreateTemp(t.TempDir(), "body")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		r    func() io.Reader
		want []byte
		via  []string // what the wrapped connection's ReadFrom got
	}{
		{"file", func() io.Reader { f.Seek(0, io.SeekStart); return f }, data, []string{"*os.File"}},
		{"limited file", func() io.Reader { f.Seek(0, io.SeekStart); return io.LimitReader(f, 1000) }, data[:1000], []string{"*io.LimitedReader"}},
		{"other reader", func() io.Reader { return struct{ io.Reader }{bytes.NewReader(data)} }, data, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spy.got = nil
			read := make(chan []byte, 1)
			go func() {
				b := make([]byte, len(tc.want))
				n, _ := io.ReadFull(peer, b)
				read <- b[:n]
			}()
			n, err := c.ReadFrom(tc.r())
			if err != nil || n != int64(len(tc.want)) {
				t.Fatalf("ReadFrom: %d, %v", n, err)
			}
			if got := <-read; !bytes.Equal(got, tc.want) {
				t.Fatalf("the peer read %d bytes, not the %d sent", len(got), len(tc.want))
			}
			if !slices.Equal(spy.got, tc.via) {
				t.Fatalf("the wrapped connection's ReadFrom got %v, want %v", spy.got, tc.via)
			}
		})
	}
}

// fronted is a connection with bytes of its own in front of its socket,
// which it exposes (as a connection handed back after a detached
// response does).
type fronted struct {
	*net.TCPConn
	front []byte
}

func (f *fronted) Read(p []byte) (int, error) {
	if len(f.front) > 0 {
		n := copy(p, f.front)
		f.front = f.front[n:]
		return n, nil
	}
	return f.TCPConn.Read(p)
}

func (f *fronted) Fronted() {}

// A connection that holds bytes in front of its socket is read through
// its own Read: Wrap leaves it as it is and Fill declines it, so that no
// raw read skips those bytes.
func TestFrontedNotReadRaw(t *testing.T) {
	c, peer := pair(t)
	tc := c.Conn.(*net.TCPConn)
	f := &fronted{TCPConn: tc, front: []byte("first ")}
	if w := Wrap(f); w != net.Conn(f) {
		t.Fatalf("Wrap gave a %T for a connection with bytes in front", w)
	}
	get := func() *[]byte { b := make([]byte, 0, 64); return &b }
	if _, _, ok, _ := Fill(f, get, func(*[]byte) {}); ok {
		t.Fatal("Fill read the socket of a connection with bytes in front")
	}
	if _, err := peer.Write([]byte("second")); err != nil {
		t.Fatal(err)
	}
	b, n, ok, err := Fill(c, get, func(*[]byte) {})
	if !ok || err != nil {
		t.Fatalf("Fill of the socket: ok %v, %d bytes, %v", ok, n, err)
	}
	if string((*b)[:n]) != "second" {
		t.Fatalf("Fill of the socket read %q", (*b)[:n])
	}
}
