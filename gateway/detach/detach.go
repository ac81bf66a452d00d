// Package detach answers an HTTP/1.1 request on a connection taken from
// net/http, so that a long response (an event stream) holds neither
// net/http's goroutine nor its buffers: once its handler has returned, a
// held stream costs the goroutine that writes it (any, with a shallow
// stack), one small reader goroutine that notices the client leaving,
// and a Response.
//
// Take the connection with Hijack from the handler, return from the
// handler, and write the response on another goroutine through the
// Response (an http.ResponseWriter whose http.ResponseController
// supports Flush and SetWriteDeadline). Watch starts the reader; Finish
// ends the response and, when the connection may carry another request,
// hands it back to the http.Server through the Listener it serves, with
// the bytes of the next request already read in front.
//
// The wire form is net/http's: a response flushed before its end is
// chunked, one written whole gets Content-Length; Date is set, and
// "Connection: close" when the connection will not be reused.
package detach

import (
	"errors"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
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

	// The reader: it reads one byte (the next request's, or the EOF of a
	// client that left) and stops; kept holds what it and net/http read
	// of the next request.
	kept     []byte
	one      [1]byte
	readDone chan struct{}
	stopping atomic.Bool
	readErr  error
}

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
	if kc, ok := c.(*keptConn); ok { // a connection handed back with bytes in front
		d.conn, d.kept = kc.Conn, kc.kept[kc.off:]
	}
	if n := brw.Reader.Buffered(); n > 0 { // pipelined: the next request's
		p, _ := brw.Reader.Peek(n)
		d.kept = append(d.kept, p...)
	}
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
	if len(d.rest) > 0 || d.now == nil {
		d.rest = append(d.rest, *b...)
		return false, nil
	}
	n, err := d.now.Write(*b)
	if err != nil {
		d.err = err
		return false, err
	}
	if n < len(*b) {
		d.rest = append(d.rest, (*b)[n:]...)
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
func (d *Response) SetWriteDeadline(t time.Time) error { return d.conn.SetWriteDeadline(t) }

// Close closes the connection at once: every write in progress and
// later fails, and Finish will not hand it back.
func (d *Response) Close() error {
	d.closed.Store(true)
	return d.conn.Close()
}

// Watch starts the reader: gone is called, from the reader's goroutine,
// when the client closes the connection (or it fails) before Finish.
// Like net/http's background read, it stops at the first byte of the
// next request, which is kept for it.
func (d *Response) Watch(gone func()) {
	d.readDone = make(chan struct{})
	go d.read(gone)
}

func (d *Response) read(gone func()) {
	defer close(d.readDone)
	n, err := d.conn.Read(d.one[:])
	if n > 0 {
		d.kept = append(d.kept, d.one[0])
		return
	}
	d.readErr = err
	if !d.stopping.Load() {
		gone()
	}
}

// Finish ends the response: the headers with Content-Length if they have
// not gone out, else the last chunk. It stops the reader and then hands
// the connection back to l (nil: none) when it may carry another
// request, otherwise closes it. A response that wrote nothing (its client
// left before an answer) just closes the connection.
func (d *Response) Finish(l *Listener) {
	if d.status != 0 && d.err == nil {
		if !d.sent {
			if d.Header().Get("Content-Length") == "" {
				d.header.Set("Content-Length", strconv.Itoa(len(d.pending)))
			}
			_ = d.sendHead()
		} else if d.chunked {
			_ = d.write([]byte("0\r\n\r\n"))
		} else {
			_ = d.write(nil)
		}
	}
	if d.readDone != nil {
		d.stopping.Store(true)
		_ = d.conn.SetReadDeadline(aLongTimeAgo)
		<-d.readDone
		_ = d.conn.SetReadDeadline(time.Time{})
		if d.readErr != nil && !errors.Is(d.readErr, os.ErrDeadlineExceeded) {
			d.reuse = false // the client closed it
		}
	}
	if l == nil || !d.reusable() || d.closed.Load() {
		d.conn.Close()
		return
	}
	_ = d.conn.SetWriteDeadline(time.Time{})
	l.handBack(d.conn, d.kept)
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
	if h.Get("Date") == "" {
		h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	}
	if d.chunked {
		h.Del("Content-Length")
		h.Set("Transfer-Encoding", "chunked")
	}
	if !d.reuse {
		h.Set("Connection", "close")
	}
	_ = h.Write((*appender)(b))
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
// already read: Read returns those first.
type keptConn struct {
	net.Conn
	kept []byte
	off  int
}

func (c *keptConn) Read(p []byte) (int, error) {
	if c.off < len(c.kept) {
		n := copy(p, c.kept[c.off:])
		c.off += n
		return n, nil
	}
	return c.Conn.Read(p)
}
