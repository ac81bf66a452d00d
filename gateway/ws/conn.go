package ws

import (
	"bufio"
	"context"
	encbin "encoding/binary"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/streamgate/streamgate/upstream/budget"
	"github.com/streamgate/streamgate/upstream/rawsock"
)

// Conn is a socket accepted by Accept. coder/websocket reads it and
// writes its control frames (ping, pong, close); text messages go out
// through the socket's one ordered line (output), framed by a Session
// or WriteText. coder's own Write and Writer are not offered: a message
// written past the line could land inside another frame.
type Conn struct {
	ws  *websocket.Conn
	out *output
}

// Subprotocol is the subprotocol the client and Accept agreed on.
func (c *Conn) Subprotocol() string { return c.ws.Subprotocol() }

// Close closes the socket with a close frame (code, reason), as
// websocket.Conn's Close.
func (c *Conn) Close(code websocket.StatusCode, reason string) error {
	return c.ws.Close(code, reason)
}

// CloseNow closes the connection with no close frame.
func (c *Conn) CloseNow() error { return c.ws.CloseNow() }

// WriteText writes msg as one text message, for a socket no Session
// serves (a Session sends its frames itself): within ctx's deadline when
// the socket has no WriteTimeout, else within that.
func (c *Conn) WriteText(ctx context.Context, msg []byte) error {
	o := c.out
	o.mu.Lock()
	if o.shut {
		o.mu.Unlock()
		return errClosing
	}
	o.buf = appendTextFrame(o.buf, func(b []byte) []byte { return append(b, msg...) })
	o.mu.Unlock()
	if d, ok := ctx.Deadline(); ok && o.timeout == 0 {
		if err := o.Conn.SetWriteDeadline(d); err != nil {
			return err
		}
		defer o.Conn.SetWriteDeadline(time.Time{})
	}
	return o.flush()
}

// Accept is websocket.Accept with a connection a Session writes to
// itself: the frames sent between two network writes reach the client
// in one (coder/websocket flushes every message on its own).
// Compression is off: the Session frames its messages itself. On error
// Accept has answered the client.
func Accept(w http.ResponseWriter, r *http.Request, opts *websocket.AcceptOptions) (*Conn, error) {
	var o websocket.AcceptOptions
	if opts != nil {
		o = *opts
	}
	o.CompressionMode = websocket.CompressionDisabled
	hj := &hijacker{ResponseWriter: w}
	c, err := websocket.Accept(hj, r, &o)
	if err != nil {
		return nil, err
	}
	return &Conn{ws: c, out: hj.out}, nil
}

// hijacker hands websocket.Accept the hijacked connection wrapped in an
// output.
type hijacker struct {
	http.ResponseWriter
	out *output
}

func (h *hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.out = &output{Conn: c, now: rawsock.NewWriter(c), wake: make(chan struct{}, 1)}
	h.out.idle.L = &h.out.mu
	// net/http's writer is fresh and empty (the 101 went out before the
	// hijack): point it at the output.
	brw.Writer.Reset(h.out)
	return h.out, brw, nil
}

func (h *hijacker) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// output is the socket's writing side, and the one order its bytes
// reach the network in.
//
// Senders frame their messages into buf (send) and wake the session's
// writer, which writes everything waiting in one network write (flush).
// Whoever writes outside mu (writing) writes until buf is empty, so
// bytes go out in the order they came. coder/websocket's control frames
// (Write) join the same line.
type output struct {
	net.Conn
	now  *rawsock.Writer // the write that never waits; nil: none
	wake chan struct{}   // capacity 1: buf has bytes and nobody writes them

	// Set by NewSession before the socket is read or written.
	limit   int64          // QueueBytes
	mem     *budget.Budget // Memory
	timeout time.Duration  // WriteTimeout; 0: none

	mu       sync.Mutex
	buf      []byte    // bytes waiting, framed
	spare    []byte    // the buffer of the last batch written
	inFlight int       // bytes a writer took from buf and has not finished writing
	charged  int64     // bytes borrowed from mem
	writing  bool      // a goroutine writes outside mu; it writes buf too before it stops
	idle     sync.Cond // on mu: broadcast when writing stops
	err      error     // the write that failed the socket
	shut     bool      // the session is closing, or a write failed: no more data frames
	closed   bool      // a close frame has gone or waits, or a write failed: nothing more
	closeLen int       // the close frame's length when it waits at buf's end; 0: none waits
}

// keepSendBuf is the largest send buffer kept once written.
const keepSendBuf = 64 << 10

// send frames the text message build appends (about size bytes) and
// queues it for the writer: errSlow or errNoMemory when the socket's
// budget or the shared one cannot take it, errClosing once the socket is
// closing. It never waits for the client.
func (o *output) send(size int, build func([]byte) []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.shut {
		return errClosing
	}
	if o.buf == nil {
		o.buf = make([]byte, 0, max(maxHeader+size, 512))
	}
	at := len(o.buf)
	o.buf = appendTextFrame(o.buf, build)
	if int64(len(o.buf)+o.inFlight) > o.limit {
		o.buf = o.buf[:at]
		return errSlow
	}
	if !o.charge() {
		o.buf = o.buf[:at]
		return errNoMemory
	}
	if at == 0 && !o.writing {
		o.wakeWriter()
	}
	return nil
}

func (o *output) wakeWriter() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// charge borrows from mem what the waiting bytes need beyond the socket's
// own share, or gives back what they no longer need; false, changing
// nothing, when mem cannot lend it.
func (o *output) charge() bool {
	need := max(int64(len(o.buf)+o.inFlight)-ownQueue, 0)
	if more := need - o.charged; more > 0 && !o.mem.Take(more) {
		return false
	}
	o.mem.Give(o.charged - need)
	o.charged = need
	return true
}

// Write is coder/websocket's: one whole control frame (its buffered
// writer flushes every frame, and a control frame fits its buffer). It
// goes out after the bytes waiting. This goroutine writes it when nothing
// waits before it; a ping or pong behind waiting data frames is left to
// the session's writer, which writes them under WriteTimeout: coder
// writes its control frames under a 5 s limit of its own that closes the
// connection, and a pong would keep coder's reader from reading the
// client's frames meanwhile. A close frame is written here all the same,
// or, when another goroutine writes, Write waits until that one has
// written it: coder closes the connection once Write returns (its echo
// of a client's close frame too).
func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return 0, net.ErrClosed
	}
	closing := len(p) > 0 && p[0]&0x0f == opClose
	if closing {
		o.shut, o.closed = true, true // nothing may follow it
	}
	behind := len(o.buf) > 0
	o.buf = append(o.buf, p...)
	if closing {
		o.closeLen = len(p)
	}
	if behind && !closing {
		if !o.writing {
			o.wakeWriter()
		}
		o.mu.Unlock()
		return len(p), nil
	}
	o.mu.Unlock()
	if err := o.flush(); err != nil {
		return 0, err
	}
	if closing {
		o.mu.Lock()
		for o.writing {
			o.idle.Wait()
		}
		err := o.err
		o.mu.Unlock()
		if err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// flush writes what waits, and what comes meanwhile, until nothing does,
// each batch in one network write within the timeout. It returns at once
// when another goroutine writes (which then writes it all).
func (o *output) flush() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.writing {
		return nil
	}
	o.writing = true
	defer func() {
		o.writing = false
		o.idle.Broadcast()
	}()
	for len(o.buf) > 0 {
		batch := o.buf
		o.buf, o.spare, o.closeLen = o.spare[:0], nil, 0
		o.inFlight = len(batch)
		o.mu.Unlock()
		err := o.writeBatch(batch)
		o.mu.Lock()
		o.inFlight = 0
		if cap(batch) <= keepSendBuf {
			o.spare = batch[:0]
		}
		o.charge()
		if err != nil {
			o.buf, o.closeLen, o.shut, o.closed, o.err = o.buf[:0], 0, true, true, err
			o.charge()
			return err
		}
	}
	return nil
}

// writeBatch writes b: what the socket takes at once with no deadline set
// and cleared, the rest within the timeout.
func (o *output) writeBatch(b []byte) error {
	if o.now != nil {
		n, err := o.now.Write(b)
		if err != nil {
			return err
		}
		if b = b[n:]; len(b) == 0 {
			return nil
		}
	}
	if o.timeout > 0 {
		if err := o.Conn.SetWriteDeadline(time.Now().Add(o.timeout)); err != nil {
			return err
		}
	}
	_, err := o.Conn.Write(b)
	if err == nil && o.timeout > 0 {
		err = o.Conn.SetWriteDeadline(time.Time{})
	}
	return err
}

// close stops taking frames; those waiting stay for flush, or are dropped
// (drop), all but a close frame that waits: coder's Write waits for it
// to be written. The session is closing.
func (o *output) close(drop bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.shut = true
	if drop {
		o.buf = append(o.buf[:0], o.buf[len(o.buf)-o.closeLen:]...)
		o.charge()
	}
}

// release gives back everything borrowed; the session has ended (no
// writer is left).
func (o *output) release() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.shut, o.closed = true, true
	o.buf, o.spare, o.inFlight, o.closeLen = nil, nil, 0, 0
	o.charge()
}

// WebSocket framing (RFC 6455 section 5.2) of a server's messages: never
// masked, never compressed.
const (
	opText    = 0x1
	opClose   = 0x8
	finBit    = 0x80
	maxHeader = 10
)

// appendTextFrame appends the text message that build appends to b as
// one frame. The payload is built behind room for a 4-byte header, then
// moved when its header is another size.
func appendTextFrame(b []byte, build func([]byte) []byte) []byte {
	at := len(b)
	b = append(b, 0, 0, 0, 0)
	b = build(b)
	n := len(b) - at - 4
	switch {
	case n <= 125:
		copy(b[at+2:], b[at+4:])
		b = b[:len(b)-2]
		b[at+1] = byte(n)
	case n <= 0xffff:
		b[at+1] = 126
		encbin.BigEndian.PutUint16(b[at+2:], uint16(n))
	default:
		b = append(b, 0, 0, 0, 0, 0, 0)
		copy(b[at+10:], b[at+4:at+4+n])
		b[at+1] = 127
		encbin.BigEndian.PutUint64(b[at+2:], uint64(n))
	}
	b[at] = finBit | opText
	return b
}
