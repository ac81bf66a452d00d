package ws

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/streamgate/streamgate/upstream/rawsock"
)

// Conn is a socket accepted by Accept: a websocket.Conn whose writes a
// Session batches.
type Conn struct {
	*websocket.Conn
	out *batchConn
}

// Accept is websocket.Accept with a connection a Session can batch: the
// frames it writes between two network writes reach the client in one
// (coder/websocket flushes every message on its own). On error Accept
// has answered the client.
func Accept(w http.ResponseWriter, r *http.Request, opts *websocket.AcceptOptions) (*Conn, error) {
	hj := &hijacker{ResponseWriter: w}
	c, err := websocket.Accept(hj, r, opts)
	if err != nil {
		return nil, err
	}
	return &Conn{Conn: c, out: hj.out}, nil
}

// hijacker hands websocket.Accept the hijacked connection wrapped in a
// batchConn.
type hijacker struct {
	http.ResponseWriter
	out *batchConn
}

func (h *hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.out = &batchConn{Conn: c, now: rawsock.NewWriter(c)}
	// net/http's writer is fresh and empty (the 101 went out before the
	// hijack): point it at the batching connection.
	brw.Writer.Reset(h.out)
	return h.out, brw, nil
}

func (h *hijacker) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// batchConn is the socket's network connection. While held it keeps what
// is written (by the session's writer, and by coder/websocket's pongs and
// pings meanwhile) and writes it all at release, with a deadline; at any
// other time writes go straight through.
type batchConn struct {
	net.Conn
	now  *rawsock.Writer // release's first write, nil if none
	mu   sync.Mutex
	held bool
	buf  []byte
}

func (c *batchConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// hold starts keeping writes.
func (c *batchConn) hold() {
	c.mu.Lock()
	c.held = true
	c.mu.Unlock()
}

// release writes what was kept, within timeout, and stops keeping; a zero
// timeout drops it instead (the connection is being abandoned). What the
// socket takes at once goes out with no deadline set and cleared.
func (c *batchConn) release(timeout time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held = false
	b := c.buf
	c.buf = c.buf[:0]
	if cap(c.buf) > keepSendBuf {
		c.buf = nil
	}
	if len(b) == 0 || timeout == 0 {
		return nil
	}
	if c.now != nil { // what the socket takes at once needs no deadline
		n, err := c.now.Write(b)
		if err != nil {
			return err
		}
		if b = b[n:]; len(b) == 0 {
			return nil
		}
	}
	if err := c.Conn.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	_, err := c.Conn.Write(b)
	if err == nil {
		err = c.Conn.SetWriteDeadline(time.Time{})
	}
	return err
}
