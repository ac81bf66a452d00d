// Package detach answers an HTTP/1.1 request on a connection taken from
// net/http, so that a long response (an event stream) holds neither
// net/http's goroutine nor its buffers: once its handler has returned, a
// held stream costs one small reader goroutine that notices the client
// leaving, and a Response; it needs no goroutine of its own between
// writes.
//
// Take the connection with Hijack from the handler and write the
// response through the Response (an http.ResponseWriter whose
// http.ResponseController supports Flush and SetWriteDeadline), from one
// goroutine at a time, there or later on others; the handler must not
// touch its own writer again. Watch starts the reader; Finish (or
// FinishNow, which never waits for the client) ends the response, in
// the same write as its last part if EndWith kept one, and,
// when the connection may carry another request, leaves it to the
// reader, which waits for that request and hands the connection back to
// the http.Server through the Listener it serves, with the bytes of the
// request already read in front.
//
// The wire form is net/http's: a response flushed before its end is
// chunked, one written whole gets Content-Length; Date is set, and
// "Connection: close" when the connection will not be reused.
package detach

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/streamgate/streamgate/upstream/rawsock"
)

// Response is one HTTP/1.1 response written straight to its connection.
// One goroutine writes it (Header, WriteHeader, Write, FlushError,
// Finish); SetWriteDeadline and Close may be called from any goroutine.
type Response struct {
	conn   net.Conn
	header http.Header
	// reuse: the request allows the connection to carry another one.
	reuse bool

	status  int    // 0 until WriteHeader
	sent    bool   // the status line and headers are out
	chunked bool   // the body goes out in chunks
	pending []byte // written before the headers went out
	err     error  // the first failed write: every later one fails
	closed  atomic.Bool

	// WriteNow's: a write that does not wait (nil when the connection
	// has no socket of its own), and what such a write left behind,
	// which the next write sends first.
	now  *rawsock.Writer
	rest []byte

	// ended: the response's end (its last chunk, or its headers with
	// Content-Length) is written, in rest, or in last.
	ended bool
	// last is EndWith's: the body's last part and the response's end,
	// framed, for Finish or FinishNow to send in one write (from
	// bufPool; nil when none).
	last *[]byte
	// deadline: a write deadline may be set (SetWriteDeadline), to clear
	// before the connection is handed back.
	deadline atomic.Bool

	// The reader (Watch): it reads once, the next request's first bytes
	// (next) or the EOF of a client that left. watch is where it stands (watching,
	// returned, finished), under mu, which also orders the read deadlines
	// Finish sets for the reader before the reader's own; kept holds what
	// it and net/http read of the next request; back is where the reader
	// hands the connection once the response has finished (nil: it closes
	// it).
	mu      sync.Mutex
	watch   int32
	gone    func() // Watch's, until the response finishes
	kept    []byte
	next    []byte // what the reader read: the next request's first bytes
	readErr error
	back    *Listener
	// remote is the connection's peer as keptConn gives it, its text
	// made once per connection (nil until it is first handed back).
	remote *namedAddr
}

// Where the reader stands (Response.watch).
const (
	unwatched int32 = iota // no reader: Watch was not called
	watching               // it waits for the next request's first bytes; the response runs
	returned               // it returned during the response: bytes read (next), or readErr
	finished               // the response finished first: the reader, still waiting, hands the connection on
)

// ErrNotHTTP11 is Hijack's answer for a request that is not HTTP/1.1 on
// a plaintext connection (HTTP/1.0, HTTP/2, TLS): answer it in place.
var ErrNotHTTP11 = errors.New("detach: only plaintext HTTP/1.1 requests are detached")

// Hijack takes r's connection from net/http: w must be (or unwrap to)
// the http.ResponseWriter net/http gave the handler, nothing may have
// been written to it, and r's body must have been read to its end. The
// headers set on w so far are the Response's. The handler must return
// without touching w again; r's context ends when it does.
func Hijack(w http.ResponseWriter, r *http.Request) (*Response, error) {
	if r.ProtoMajor != 1 || r.ProtoMinor != 1 || r.TLS != nil {
		return nil, ErrNotHTTP11
	}
	header := w.Header()
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, err
	}
	d := &Response{conn: c, header: header, reuse: !r.Close}
	var rest []byte
	if kc, ok := c.(*keptConn); ok { // a connection handed back with bytes in front
		d.conn, rest, d.remote = kc.Conn, kc.kept[kc.off:], kc.remote
	}
	if n := brw.Reader.Buffered(); n > 0 { // pipelined: the next request's
		p, _ := brw.Reader.Peek(n)
		d.kept = append(d.kept, p...)
	}
	// What net/http's buffer holds came before the kept bytes it has not
	// read yet.
	d.kept = append(d.kept, rest...)
	d.now = rawsock.NewWriter(d.conn)
	return d, nil
}

// Header is the response's header map: changes after the headers went
// out have no effect (the map sent is not kept: a held stream does not
// hold it).
func (d *Response) Header() http.Header {
	if d.header == nil {
		d.header = http.Header{}
	}
	return d.header
}

// WriteHeader sets the status; the headers go out with the first flush,
// or at Finish.
func (d *Response) WriteHeader(code int) {
	if d.status == 0 && code >= 200 {
		d.status = code
	}
}

// Write writes p: buffered until the first flush, after that at once (a
// chunk of its own).
func (d *Response) Write(p []byte) (int, error) {
	if d.status == 0 {
		d.WriteHeader(http.StatusOK)
	}
	if d.err != nil {
		return 0, d.err
	}
	if !d.sent {
		d.pending = append(d.pending, p...)
		return len(p), nil
	}
	if len(p) == 0 {
		return 0, d.write(nil) // what WriteNow left behind
	}
	b := getBuf()
	*b = d.frame(*b, p)
	err := d.write(*b)
	putBuf(b)
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// frame appends p to b as the body's next part: a chunk of its own when
// the body is chunked.
func (d *Response) frame(b, p []byte) []byte {
	if !d.chunked {
		return append(b, p...)
	}
	b = strconv.AppendInt(b, int64(len(p)), 16)
	b = append(b, "\r\n"...)
	b = append(b, p...)
	return append(b, "\r\n"...)
}

// WriteNow is Write for a goroutine that must not wait for the client:
// it writes what the connection takes at once, with no deadline (one
// that has passed still fails it), and keeps the rest, which the next
// Write (an empty one will do), FlushError or Finish sends first, under
// that call's deadline. It takes all of p either way; done says that p
// and everything before it went out. Before the headers have gone out
// it sends them first, in the same write, as FlushError would (an empty
// p then sends the headers alone).
func (d *Response) WriteNow(p []byte) (done bool, err error) {
	if d.err != nil {
		return false, d.err
	}
	b := getBuf()
	defer putBuf(b)
	if !d.sent {
		d.appendHead(b)
	}
	if len(p) > 0 {
		*b = d.frame(*b, p)
	}
	return d.tryWrite(*b)
}

// tryWrite writes b, behind what an earlier one left, as far as the
// socket takes it at once, and keeps the rest (done false).
func (d *Response) tryWrite(b []byte) (done bool, err error) {
	if len(d.rest) > 0 || d.now == nil {
		d.rest = append(d.rest, b...)
		return false, nil
	}
	n, err := d.now.Write(b)
	if err != nil {
		d.err = err
		return false, err
	}
	if n < len(b) {
		d.rest = append(d.rest, b[n:]...)
		return false, nil
	}
	return true, nil
}

// FlushError sends the headers, if they have not gone out, and what was
// written before them. A response without Content-Length is chunked from
// then on.
func (d *Response) FlushError() error {
	if d.err != nil {
		return d.err
	}
	if d.sent {
		return d.write(nil) // what WriteNow left behind
	}
	return d.sendHead()
}

// SetWriteDeadline sets the connection's write deadline (see
// http.ResponseController).
func (d *Response) SetWriteDeadline(t time.Time) error {
	d.deadline.Store(true)
	return d.conn.SetWriteDeadline(t)
}

// Close closes the connection at once: every write in progress and
// later fails, and Finish will not hand it back.
func (d *Response) Close() error {
	d.closed.Store(true)
	return d.conn.Close()
}

// Watch starts the reader: gone is called, from the reader's goroutine,
// when the client closes the connection (or it fails) before Finish.
// Like net/http's background read, it stops at the first bytes of the
// next request (what one read brings), which are kept for it. When the
// response finishes first, the same goroutine goes on waiting for the
// next request and hands the connection back (Finish).
func (d *Response) Watch(gone func()) {
	d.watch, d.gone = watching, gone
	go d.read()
}

// read is the reader's goroutine. It holds nothing but d while it waits,
// and d lets go of gone (which may hold the request's state) once the
// response has finished: an idle connection holds no more than that.
func (d *Response) read() {
	d.readNext()
	d.mu.Lock()
	st, gone := d.watch, d.gone
	if st == watching {
		d.watch = returned
	}
	d.mu.Unlock()
	if st == watching { // the response runs: Finish takes it from here
		if d.readErr != nil && gone != nil {
			gone()
		}
		return
	}
	d.handOn()
}

// readNext reads into next what the socket holds of the next request
// (net/http then parses it with no read of its own), or into readErr why
// there is none. A buffer is taken only while the socket has data, so a
// reader waiting holds none. A connection with no socket of its own is
// read one byte at a time.
func (d *Response) readNext() {
	b, n, ok, err := rawsock.Fill(d.conn, getBuf, putBuf)
	if ok && n > 0 {
		d.next = append([]byte(nil), (*b)[:n]...)
		putBuf(b)
		return
	}
	if !ok {
		var one [1]byte
		if n, err = d.conn.Read(one[:]); n > 0 {
			d.next = append([]byte(nil), one[0])
			return
		}
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	d.readErr = err
}

// handOn is the reader's once the response has finished: the connection,
// which it waited on for the next request, goes back to d.back if that
// request has begun, and is closed otherwise (the client left, the idle
// timeout passed, the listener closed).
func (d *Response) handOn() {
	l := d.back
	if l == nil {
		d.conn.Close()
		return
	}
	closed := l.unwait(d.conn)
	switch {
	case d.readErr == nil:
		d.keepNext()
	case !errors.Is(d.readErr, os.ErrDeadlineExceeded) || len(d.kept) == 0:
		closed = true // the client left, or stayed quiet past the idle timeout
	}
	if closed {
		d.conn.Close()
		return
	}
	_ = d.conn.SetReadDeadline(time.Time{})
	l.deliver(d.keptConn())
}

// EndWith makes p the body's last part: it is framed (behind the
// headers, if they have not gone out) with the response's end and kept,
// unwritten, for Finish or FinishNow, which send them in one write. So a
// stream's last events and its last chunk cost one write and reach the
// client together, after whatever the caller does between (its request's
// accounting). Nothing may be written after it.
func (d *Response) EndWith(p []byte) {
	if d.err != nil || d.ended {
		return
	}
	b := getBuf()
	if !d.sent {
		d.appendHead(b)
	}
	if len(p) > 0 {
		*b = d.frame(*b, p)
	}
	d.appendEnd(b)
	d.last = b
}

// end is the response's end as Finish and FinishNow write it: EndWith's
// if it was called, else appendEnd's.
func (d *Response) end() *[]byte {
	if b := d.last; b != nil {
		d.last = nil
		return b
	}
	b := getBuf()
	d.appendEnd(b)
	return b
}

// Finish ends the response: the headers with Content-Length if they have
// not gone out, else the last chunk (after EndWith's part, if any), waiting for the client as long as
// the write deadline allows. Then the connection goes back to l (nil:
// none) when it may carry another request, otherwise it is closed. A
// response that wrote nothing (its client left before an answer) just
// closes the connection. Finish does not wait for the reader: once the
// response has ended, the reader's goroutine waits for the next request
// (up to l.IdleTimeout) and hands the connection to l's Accept.
func (d *Response) Finish(l *Listener) {
	if d.status != 0 && d.err == nil {
		b := d.end()
		_ = d.write(*b)
		putBuf(b)
	}
	d.release(l)
}

// FinishNow is Finish for a goroutine that must not wait for the client:
// it writes the response's end (with EndWith's part, if any) as far as
// the socket takes it at once.
// When it all went out (or the connection failed) the response is
// finished and done is true; otherwise the rest is kept and Finish, on a
// goroutine that may wait, must finish it.
func (d *Response) FinishNow(l *Listener) (done bool) {
	if d.status != 0 && d.err == nil {
		b := d.end()
		done, _ := d.tryWrite(*b)
		putBuf(b)
		if !done && d.err == nil {
			return false
		}
	}
	d.release(l)
	return true
}

// appendEnd appends the response's end to b, once: the headers with
// Content-Length if they have not gone out, else the last chunk.
func (d *Response) appendEnd(b *[]byte) {
	if d.ended {
		return
	}
	d.ended = true
	if !d.sent {
		if d.Header().Get("Content-Length") == "" {
			d.header.Set("Content-Length", strconv.Itoa(len(d.pending)))
		}
		d.appendHead(b)
	} else if d.chunked {
		*b = append(*b, "0\r\n\r\n"...)
	}
}

// release hands the connection of a finished response on: back to l when
// it may carry another request, through the reader (Watch) or a new one,
// otherwise closed. It does not wait.
func (d *Response) release(l *Listener) {
	if l == nil || !d.reusable() || d.closed.Load() {
		l = nil
	}
	if l != nil && d.deadline.Load() {
		_ = d.conn.SetWriteDeadline(time.Time{})
	}
	d.now = nil        // no more writes
	if d.last != nil { // EndWith's, on a connection that failed first
		putBuf(d.last)
		d.last = nil
	}
	d.mu.Lock()
	st := d.watch
	d.gone = nil
	if st != returned { // a reader, waiting (or to start), hands it on
		d.watch = finished
		d.await(l)
	}
	d.mu.Unlock()
	switch {
	case st == watching:
		return
	case st == unwatched:
		if d.back != nil {
			go d.read()
		}
		return
	}
	// The reader returned during the response: with the first bytes of
	// the next request, or because the client left.
	if l == nil || d.readErr != nil {
		d.conn.Close()
		return
	}
	d.keepNext()
	go l.deliver(d.keptConn())
}

// keepNext adds what the reader read (next) to the bytes kept for the
// next request.
func (d *Response) keepNext() {
	if len(d.kept) == 0 {
		d.kept = d.next
	} else {
		d.kept = append(d.kept, d.next...)
	}
	d.next = nil
}

// keptConn is the connection to hand back, with the bytes of its next
// request in front.
func (d *Response) keptConn() *keptConn {
	if d.remote == nil {
		if a := d.conn.RemoteAddr(); a != nil {
			d.remote = &namedAddr{Addr: a, text: a.String()}
		}
	}
	return &keptConn{Conn: d.conn, kept: d.kept, remote: d.remote}
}

// await sets the reader of a finished response to wait for the next
// request on l (nil: none, the connection is closed), up to l's idle
// timeout, or not at all when it has begun (kept). The caller holds mu,
// so the reader, once back from its read, sees these deadlines set.
func (d *Response) await(l *Listener) {
	if l != nil && !l.wait(d.conn) {
		l = nil // the listener is closed
	}
	d.back = l
	switch {
	case l == nil:
		d.conn.Close() // it stops the reader, which closes it again
	case len(d.kept) > 0: // the next request has begun: the reader need not wait for it
		_ = d.conn.SetReadDeadline(aLongTimeAgo)
	case l.IdleTimeout > 0:
		_ = d.conn.SetReadDeadline(time.Now().Add(l.IdleTimeout))
	}
}

// reusable is whether the connection may carry another request: the
// request did not say close, the response did not either (sendHead), and
// it went out whole.
func (d *Response) reusable() bool {
	return d.reuse && d.status != 0 && d.err == nil
}

// sendHead writes the status line, the headers and what was written
// before them, in one write.
func (d *Response) sendHead() error {
	b := getBuf()
	defer putBuf(b)
	d.appendHead(b)
	return d.write(*b)
}

// appendHead appends to b the status line, the headers and what was
// written before them, and notes that they went out (they are the next
// write's). A response without Content-Length is chunked from then on.
func (d *Response) appendHead(b *[]byte) {
	if d.status == 0 {
		d.WriteHeader(http.StatusOK)
	}
	d.sent = true
	h := d.Header()
	d.header = nil // Header gives a new map from now on
	d.chunked = h.Get("Content-Length") == ""
	*b = append(*b, "HTTP/1.1 "...)
	*b = strconv.AppendInt(*b, int64(d.status), 10)
	*b = append(*b, ' ')
	if text := http.StatusText(d.status); text != "" {
		*b = append(*b, text...)
	} else {
		*b = append(*b, "status code "...)
		*b = strconv.AppendInt(*b, int64(d.status), 10)
	}
	*b = append(*b, "\r\n"...)
	if h.Get("Connection") == "close" {
		d.reuse = false
	}
	if h.Get("Content-Type") == "" && len(d.pending) > 0 {
		h.Set("Content-Type", http.DetectContentType(d.pending))
	}
	date := h.Get("Date") == "" // written below, not set in h: no string to make
	if d.chunked {
		h.Del("Content-Length")
		h.Set("Transfer-Encoding", "chunked")
	}
	if !d.reuse {
		h.Set("Connection", "close")
	}
	_ = h.Write((*appender)(b))
	if date {
		*b = append(*b, "Date: "...)
		*b = time.Now().UTC().AppendFormat(*b, http.TimeFormat)
		*b = append(*b, "\r\n"...)
	}
	*b = append(*b, "\r\n"...)
	if len(d.pending) > 0 {
		*b = d.frame(*b, d.pending)
	}
	d.pending = nil
}

func (d *Response) write(b []byte) error {
	if d.err != nil {
		return d.err
	}
	if len(d.rest) > 0 {
		b = append(d.rest, b...)
		d.rest = nil
	}
	if len(b) == 0 {
		return nil
	}
	if d.now != nil { // what the socket takes at once, as WriteNow writes
		n, err := d.now.Write(b)
		if err != nil {
			d.err = err
			return err
		}
		if b = b[n:]; len(b) == 0 {
			return nil
		}
	}
	if _, err := d.conn.Write(b); err != nil { // the rest waits, under the deadline
		d.err = err
		return err
	}
	return nil
}

// aLongTimeAgo is a deadline that has passed: a read waiting under it
// returns at once.
var aLongTimeAgo = time.Unix(1, 0)

// appender writes into a byte slice (for http.Header.Write).
type appender []byte

func (a *appender) Write(p []byte) (int, error) {
	*a = append(*a, p...)
	return len(p), nil
}

// WriteString is Write for a string: Header.Write writes through it,
// with no copy of each string into a []byte of its own.
func (a *appender) WriteString(s string) (int, error) {
	*a = append(*a, s...)
	return len(s), nil
}

// bufPool holds the buffers writes are framed in, between writes: a quiet
// stream holds none.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) <= 64<<10 {
		*b = (*b)[:0]
		bufPool.Put(b)
	}
}

// keptConn is a connection handed back with bytes of its next request
// already read: Read returns those first. It keeps what net/http and the
// gateway use of the connection it wraps: CloseWrite (net/http's
// half-close before it closes a connection) and SyscallConn (a write
// that does not wait, rawsock.Writer, as a WebSocket's).
type keptConn struct {
	net.Conn
	kept   []byte
	off    int
	remote *namedAddr
}

// Fronted marks it as a connection whose reads are not its socket's
// alone: rawsock reads it through Read, never its socket raw.
func (c *keptConn) Fronted() {}

// RemoteAddr is the peer's address, whose String net/http reads for
// every connection it serves: made once per connection, not once per
// hand-back.
func (c *keptConn) RemoteAddr() net.Addr {
	if c.remote == nil {
		return c.Conn.RemoteAddr()
	}
	return c.remote
}

// namedAddr is an address with its text made once. A handed-back
// connection's RemoteAddr is one: code that asserts *net.TCPAddr must
// unwrap it (its Addr).
type namedAddr struct {
	net.Addr
	text string
}

func (a *namedAddr) String() string { return a.text }

// CloseWrite shuts down the writing side of the connection, when the
// connection it wraps can.
func (c *keptConn) CloseWrite() error {
	cw, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok {
		return &net.OpError{Op: "close", Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: errors.ErrUnsupported}
	}
	return cw.CloseWrite()
}

// SyscallConn is the socket of the connection it wraps, when that has
// one. It is for writes: a read of the socket itself would miss the
// kept bytes (rawsock does not read it: Fronted).
func (c *keptConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

func (c *keptConn) Read(p []byte) (int, error) {
	if c.off < len(c.kept) {
		n := copy(p, c.kept[c.off:])
		c.off += n
		if c.off == len(c.kept) { // read: an idle connection holds none of it
			c.kept, c.off = nil, 0
		}
		return n, nil
	}
	return c.Conn.Read(p)
}
