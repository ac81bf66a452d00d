// Package sse writes Server-Sent Events to one HTTP response.
//
// Start with NewWriter: one Writer per response, used by one goroutine
// at a time, which is then the only one that touches the
// http.ResponseWriter (it runs no goroutine of its own). Start sends the headers; Append
// buffers events and Flush writes every buffered event in one write
// followed by a single flush, under a write deadline (Start sends events
// already appended with the headers, in one write); KeepAlive writes a
// ": keepalive" comment. The caller keeps the cadence: it appends what is
// ready, flushes once, and writes a keepalive whenever the stream has
// been quiet for Options.KeepAlive (Writer.KeepAliveInterval), from the
// moment the headers were sent. FlushNow and StartNow are Flush and Start
// for a goroutine that must not wait for the client (one that serves many
// streams).
//
// Framing, per event: "id: <n>\n" then one "data: " line per line of the
// payload, then a blank line. Ids count from 1 on each stream, one per
// event ([DONE] included), as a resumable stream's ids do.
package sse

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Options configures a Writer. The zero value (or nil) gives the defaults.
type Options struct {
	// KeepAlive is how long the stream may stay quiet before a
	// ": keepalive" comment is due. Default 15s; negative disables.
	KeepAlive time.Duration
	// WriteTimeout bounds writing and flushing one batch, through
	// http.ResponseController.SetWriteDeadline; a client that does not
	// read for this long ends the stream. Default 30s; negative disables.
	WriteTimeout time.Duration
}

func (o *Options) withDefaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = 15 * time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 30 * time.Second
	}
	return c
}

// Timeout is the bound of one write in effect (WriteTimeout or its
// default), 0 when writes have none.
func (o *Options) Timeout() time.Duration {
	return max(o.withDefaults().WriteTimeout, 0)
}

// ErrClosed is returned once a write has failed: the stream is over.
var ErrClosed = errors.New("sse: writer closed")

// KeepAliveComment is what the writer sends on a quiet stream.
const KeepAliveComment = ": keepalive\n\n"

// Writer is one SSE response. One goroutine (the handler) calls all its
// methods, except Abort, which any goroutine may call. After a failed write
// every further Flush or KeepAlive returns ErrClosed.
type Writer struct {
	// What every event and FlushNow touch comes first, in 40 bytes
	// (TestWriterLayout): with the state of a sink that embeds the
	// Writer, one cache line for a stream whose state a paced load
	// leaves out of the cache.
	buf    *[]byte // pending events; from bufPool, nil when none
	nextID uint64
	now    nowWriter // the ResponseWriter's WriteNow, if it has one
	failed bool
	owed   bool // FlushNow left bytes behind for the next Flush

	w    http.ResponseWriter
	rc   *http.ResponseController
	opts Options

	mu      sync.Mutex // orders Abort against the deadline of each write
	aborted bool
}

// bufPool holds batch buffers between flushes, so a quiet stream holds
// none and busy streams reuse them.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// NewWriter returns a writer for w. Headers set on w before Start are kept;
// Start adds the SSE ones.
func NewWriter(w http.ResponseWriter, opts *Options) *Writer {
	sw := new(Writer)
	sw.Init(w, opts)
	return sw
}

// Init makes w, a zero Writer, a writer for rw, as NewWriter does, for a
// Writer that is part of a larger object (one allocation, and one object
// fewer to load per event).
func (w *Writer) Init(rw http.ResponseWriter, opts *Options) {
	w.w, w.rc, w.opts, w.nextID, w.now = rw, http.NewResponseController(rw), opts.withDefaults(), 1, nowOf(rw)
}

// nowWriter is a ResponseWriter that can write without waiting (as
// detach.Response does): it writes what its connection takes at once and
// keeps the rest for its next Write (an empty one will do) or flush.
type nowWriter interface {
	WriteNow(p []byte) (done bool, err error)
}

// nowOf is w's nowWriter, found through the Unwrap methods of its
// wrappers, nil if none.
func nowOf(w http.ResponseWriter) nowWriter {
	for {
		if nw, ok := w.(nowWriter); ok {
			return nw
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
}

// The SSE response headers' values, shared by every response (net/http
// only reads them; Header.Add on one of them copies, the slices being
// full).
var (
	contentType = []string{"text/event-stream; charset=utf-8"}
	noCache     = []string{"no-cache"}
	noBuffering = []string{"no"}
)

// SetHeaders sets the SSE response headers on h.
func SetHeaders(h http.Header) {
	// The keys are canonical already: no Set (which canonicalizes and
	// allocates a value slice per header, on every response).
	h["Content-Type"] = contentType
	h["Cache-Control"] = noCache
	h["X-Accel-Buffering"] = noBuffering
	delete(h, "Content-Length")
	delete(h, "Content-Encoding")
}

// KeepAliveInterval is the quiet time after which KeepAlive is due; 0
// when keepalives are disabled.
func (w *Writer) KeepAliveInterval() time.Duration {
	return max(w.opts.KeepAlive, 0)
}

// Start sends the status and SSE headers at once, with the events
// already appended if there are any (one write: a stream's first batch
// does not cost a write of its own for the headers).
func (w *Writer) Start() error {
	SetHeaders(w.w.Header())
	w.w.WriteHeader(http.StatusOK)
	if w.buf != nil {
		return w.Flush()
	}
	if err := w.setDeadline(); err != nil {
		return err
	}
	return w.flush()
}

// StartNow is Start for a goroutine that must not wait for the client,
// as FlushNow is Flush's: the status and headers go out with the events
// appended so far, as much of them as the connection takes at once, and
// done says that all did (what did not, the next Flush writes first).
// When the ResponseWriter cannot write without waiting (see FlushNow) it
// does nothing and reports started false: the stream starts with Start.
func (w *Writer) StartNow() (started, done bool, err error) {
	if w.now == nil || w.failed {
		return false, false, nil
	}
	SetHeaders(w.w.Header())
	w.w.WriteHeader(http.StatusOK)
	var p []byte
	if w.buf != nil {
		p = *w.buf
	}
	done, err = w.now.WriteNow(p)
	if w.buf != nil {
		putBuf(w.buf)
		w.buf = nil
	}
	if err != nil {
		w.failed = true
		return true, false, err
	}
	w.owed = !done
	return true, done, nil
}

// Abort makes the write in progress, if any, and every later one fail at
// once, whatever the write timeout: the connection's write deadline is
// set in the past. It is the one method any goroutine may call, at any
// time; the server uses it to end streams whose client does not read.
func (w *Writer) Abort() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.aborted = true
	_ = w.rc.SetWriteDeadline(time.Now())
}

// setDeadline gives the next write its deadline, unless Abort came first.
func (w *Writer) setDeadline() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.aborted {
		w.failed = true
		return ErrClosed
	}
	if w.opts.WriteTimeout > 0 {
		// Not every ResponseWriter supports deadlines (httptest's recorder
		// does not); the write then simply has none.
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.opts.WriteTimeout))
	}
	return nil
}

// Append buffers one event whose data is payload (normally one line of
// JSON) until the next Flush. The writer does not keep payload.
func (w *Writer) Append(payload []byte) {
	if w.buf == nil {
		w.buf = bufPool.Get().(*[]byte)
	}
	*w.buf = AppendEvent(*w.buf, w.nextID, payload)
	w.nextID++
}

// AppendNamed is Append for an event with a name (one line): an "event:"
// line before its id and data, for clients that dispatch on it.
func (w *Writer) AppendNamed(name, payload []byte) {
	if w.buf == nil {
		w.buf = bufPool.Get().(*[]byte)
	}
	*w.buf = AppendNamedEvent(*w.buf, w.nextID, name, payload)
	w.nextID++
}

// SetNextID sets the id of the next event Append adds (ids count from 1
// unless set, and go up by one per event).
func (w *Writer) SetNextID(id uint64) { w.nextID = id }

// Buffered is the number of bytes appended and not yet flushed.
func (w *Writer) Buffered() int {
	if w.buf == nil {
		return 0
	}
	return len(*w.buf)
}

// Flush writes the buffered events (after what FlushNow left behind) in
// one write and flushes once.
func (w *Writer) Flush() error {
	if w.buf == nil {
		if !w.owed {
			return nil
		}
		return w.write(nil)
	}
	b := w.buf
	w.buf = nil
	err := w.write(*b)
	putBuf(b)
	return err
}

// FlushNow is Flush without waiting for the client, for a goroutine that
// must never block on one client (the upstream reader of many streams):
// it writes what the connection takes at once, under no deadline, and
// done says that everything went out; what did not, the next Flush (or
// KeepAlive) writes first. When the ResponseWriter cannot write without
// waiting (only one with a WriteNow method can: detach.Response, behind
// any wrappers with Unwrap) or the headers have not gone out (Start),
// FlushNow writes nothing and the events stay buffered for Flush.
func (w *Writer) FlushNow() (done bool, err error) {
	if w.failed {
		return false, ErrClosed
	}
	if w.buf == nil {
		return !w.owed, nil
	}
	if w.now == nil {
		return false, nil
	}
	b := w.buf
	w.buf = nil
	done, err = w.now.WriteNow(*b)
	putBuf(b)
	if err != nil {
		w.failed = true
		return false, err
	}
	w.owed = !done
	return done, nil
}

// FlushLast is FlushNow for the stream's last events, when nothing will
// follow them but the response's end and the ResponseWriter can send
// them with it (detach.Response's EndWith, behind any wrappers with
// Unwrap): the buffered events (and the status and headers, if they have
// not gone out) are handed to it, unwritten, and go out in the same
// write as the response's end. start says that the headers have not
// gone out (as StartNow would send them). held false says it cannot (or
// something is still owed), and nothing was done: flush as usual.
func (w *Writer) FlushLast(start bool) (held bool) {
	e, ok := w.now.(lastWriter)
	if !ok || w.failed || w.owed {
		return false
	}
	if start {
		SetHeaders(w.w.Header())
		w.w.WriteHeader(http.StatusOK)
	}
	var p []byte
	if w.buf != nil {
		p = *w.buf
	}
	e.EndWith(p)
	if w.buf != nil {
		putBuf(w.buf)
		w.buf = nil
	}
	return true
}

// lastWriter is a nowWriter that can keep a response's last part to send
// with its end (detach.Response).
type lastWriter interface {
	EndWith(p []byte)
}

func putBuf(b *[]byte) {
	if cap(*b) <= 64<<10 {
		*b = (*b)[:0]
		bufPool.Put(b)
	}
}

// KeepAlive flushes what is buffered, then writes a keepalive comment.
func (w *Writer) KeepAlive() error {
	if err := w.Flush(); err != nil {
		return err
	}
	return w.write([]byte(KeepAliveComment))
}

func (w *Writer) write(b []byte) error {
	if w.failed {
		return ErrClosed
	}
	if err := w.setDeadline(); err != nil {
		return err
	}
	if _, err := w.w.Write(b); err != nil {
		w.failed = true
		return err
	}
	if err := w.flush(); err != nil {
		w.failed = true
		return err
	}
	w.owed = false
	w.clearDeadline()
	return nil
}

// clearDeadline takes the deadline off once a write is done, unless Abort
// came first: it bounds the write, not the quiet after it. Over HTTP/2 a
// stream's deadline is a timer that resets the stream (INTERNAL_ERROR)
// when it fires, write or no write, so a stream quiet for the write
// timeout (keepalives off or rarer) would be cut.
func (w *Writer) clearDeadline() {
	if w.opts.WriteTimeout <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.aborted {
		_ = w.rc.SetWriteDeadline(time.Time{})
	}
}

func (w *Writer) flush() error {
	err := w.rc.Flush()
	if errors.Is(err, http.ErrNotSupported) {
		return nil
	}
	return err
}

// AppendNamedEvent is AppendEvent with an "event: name" line first; name
// must be one line.
func AppendNamedEvent(dst []byte, id uint64, name, data []byte) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	dst = append(dst, '\n')
	return AppendEvent(dst, id, data)
}

// AppendEvent appends one event with the given id and data to dst. Each
// line of data (split on \n, \r\n or \r) becomes its own "data:" line, so
// any payload round-trips through a conforming parser.
func AppendEvent(dst []byte, id uint64, data []byte) []byte {
	dst = append(dst, "id: "...)
	dst = strconv.AppendUint(dst, id, 10)
	dst = append(dst, '\n')
	// JSON payloads are one line: two vectorized scans find that, where
	// IndexAny would look at every byte.
	if bytes.IndexByte(data, '\n') < 0 && bytes.IndexByte(data, '\r') < 0 {
		dst = append(append(dst, "data: "...), data...)
		return append(dst, "\n\n"...)
	}
	for {
		i := bytes.IndexAny(data, "\r\n")
		if i < 0 {
			break
		}
		dst = append(append(dst, "data: "...), data[:i]...)
		dst = append(dst, '\n')
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
	dst = append(append(dst, "data: "...), data...)
	return append(dst, "\n\n"...)
}
