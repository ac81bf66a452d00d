// Package sse writes Server-Sent Events to one HTTP response.
//
// Start with NewWriter: the handler creates one Writer per response, runs
// Writer.Run in one goroutine (the only goroutine that touches the
// http.ResponseWriter) and hands it events with Send from another. Run sends
// the headers at once, then writes every event that is ready in one batch
// followed by a single flush, and writes a ": keepalive" comment whenever the
// stream has been quiet for Options.KeepAlive, from the moment the headers
// were sent (so also while waiting for the first event).
//
// Framing, per event: "id: <n>\n" then one "data: " line per line of the
// payload, then a blank line. Ids count from 0 on each stream.
package sse

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Options configures a Writer. The zero value (or nil) gives the defaults.
type Options struct {
	// KeepAlive is how long the stream may stay quiet before a
	// ": keepalive" comment is written. Default 15s; negative disables.
	KeepAlive time.Duration
	// Queue is how many events may wait between Send and the writer; Send
	// blocks while it is full. Default 64.
	Queue int
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
	if c.Queue <= 0 {
		c.Queue = 64
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 30 * time.Second
	}
	return c
}

// ErrClosed is returned by Send once the writer has stopped.
var ErrClosed = errors.New("sse: writer closed")

// KeepAliveComment is what the writer sends on a quiet stream.
const KeepAliveComment = ": keepalive\n\n"

// Writer is one SSE response. Run must be called exactly once, in its own
// goroutine; Send and Close are called from one producer goroutine (they
// are safe to call concurrently with Run, not with each other). Run returns
// after Close once every queued event is written, when ctx is done, or on
// the first write error; Send fails with ErrClosed from then on.
type Writer struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	opts Options

	events    chan []byte
	closing   chan struct{}
	closeOnce sync.Once
	done      chan struct{}

	nextID uint64 // owned by Run
	buf    []byte // owned by Run
}

// NewWriter returns a writer for w. Headers set on w before Run are kept;
// Run adds the SSE ones.
func NewWriter(w http.ResponseWriter, opts *Options) *Writer {
	o := opts.withDefaults()
	return &Writer{
		w:       w,
		rc:      http.NewResponseController(w),
		opts:    o,
		events:  make(chan []byte, o.Queue),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
}

// SetHeaders sets the SSE response headers on h.
func SetHeaders(h http.Header) {
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Del("Content-Length")
	h.Del("Content-Encoding")
}

// Send queues one event whose data is payload (normally one line of JSON).
// It blocks while the queue is full, and fails when ctx is done or the
// writer has stopped. The writer keeps payload; do not modify it after.
func (w *Writer) Send(ctx context.Context, payload []byte) error {
	select {
	case <-w.done:
		return ErrClosed
	default:
	}
	select {
	case w.events <- payload:
		return nil
	case <-w.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close tells Run that no more events will come; Run writes what is queued
// and returns nil. Close is idempotent.
func (w *Writer) Close() {
	w.closeOnce.Do(func() { close(w.closing) })
}

// Done is closed when Run has returned.
func (w *Writer) Done() <-chan struct{} { return w.done }

// Run writes the stream. See Writer for when it returns.
func (w *Writer) Run(ctx context.Context) error {
	defer close(w.done)
	SetHeaders(w.w.Header())
	w.w.WriteHeader(http.StatusOK)
	if err := w.flush(); err != nil {
		return err
	}

	var tick <-chan time.Time
	var timer *time.Timer
	if w.opts.KeepAlive > 0 {
		timer = time.NewTimer(w.opts.KeepAlive)
		defer timer.Stop()
		tick = timer.C
	}
	for {
		select {
		case ev := <-w.events:
			if err := w.writeBatch(ev); err != nil {
				return err
			}
		case <-w.closing:
			// Every Send happened before Close: drain without blocking.
			for {
				select {
				case ev := <-w.events:
					if err := w.writeBatch(ev); err != nil {
						return err
					}
					continue
				default:
				}
				return nil
			}
		case <-tick:
			w.buf = append(w.buf[:0], KeepAliveComment...)
			if err := w.write(); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
		if timer != nil {
			timer.Reset(w.opts.KeepAlive)
		}
	}
}

// writeBatch writes first and every other event already queued, then
// flushes once.
func (w *Writer) writeBatch(first []byte) error {
	w.buf = w.appendEvent(w.buf[:0], first)
	for n := 1; n < cap(w.events); n++ {
		select {
		case ev := <-w.events:
			w.buf = w.appendEvent(w.buf, ev)
			continue
		default:
		}
		break
	}
	return w.write()
}

func (w *Writer) appendEvent(dst, payload []byte) []byte {
	dst = AppendEvent(dst, w.nextID, payload)
	w.nextID++
	return dst
}

func (w *Writer) write() error {
	if w.opts.WriteTimeout > 0 {
		// Not every ResponseWriter supports deadlines (httptest's recorder
		// does not); the write then simply has none.
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.opts.WriteTimeout))
	}
	if _, err := w.w.Write(w.buf); err != nil {
		return err
	}
	return w.flush()
}

func (w *Writer) flush() error {
	err := w.rc.Flush()
	if errors.Is(err, http.ErrNotSupported) {
		return nil
	}
	return err
}

// AppendEvent appends one event with the given id and data to dst. Each
// line of data (split on \n, \r\n or \r) becomes its own "data:" line, so
// any payload round-trips through a conforming parser.
func AppendEvent(dst []byte, id uint64, data []byte) []byte {
	dst = append(dst, "id: "...)
	dst = strconv.AppendUint(dst, id, 10)
	dst = append(dst, '\n')
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
