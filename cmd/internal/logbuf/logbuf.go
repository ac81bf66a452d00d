// Package logbuf buffers a process's log lines and writes them out
// together: when the buffer fills, when a short interval has passed since
// the first line it holds, before any line at level WARN or above, and
// at Close. nginx's "access_log ... buffer= flush=" is the precedent.
//
// Why: a gateway writes one access-log line per request, and each line
// was its own write system call. A blocking system call is one the Go
// scheduler is told of, and when every P was idle it wakes the runtime's
// monitor thread (sysmon), which then polls every 20 µs for a while; at a
// paced load of a thousand requests a second that monitor was 5 % of the
// process's CPU. Written together, the lines cost a few writes a second.
//
// What a buffer costs: a line below WARN reaches the output up to the
// interval late, and a process that dies without Close (a crash, a
// SIGKILL) loses the lines of its last interval. Lines at WARN and above
// go out at once, with every line before them, in order.
package logbuf

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Size is how many bytes the buffer holds before it is written out
// whatever the interval (nginx's default access_log buffer).
const Size = 64 << 10

// Backlog is how many bytes may wait while the output is slow (a log
// collector that does not keep up): past it a Write waits for the
// output, as an unbuffered one would.
const Backlog = 4 * Size

// Writer buffers what is written to it for w. It is safe for concurrent
// use; each Write's bytes stay together and in order. A Write never
// writes to w itself while the backlog is under Backlog: a full buffer
// goes out on the timer's goroutine, so that a goroutine that logs on a
// hot path (an upstream stream's reader ending a request) never waits
// for the log's output.
type Writer struct {
	w     io.Writer
	every time.Duration
	file  bool // w is a regular file: the buffer goes out in one write

	// out is held while writing to w: flushes go out one at a time, in
	// the order they took the buffer. mu is never held while writing.
	out sync.Mutex

	mu     sync.Mutex
	buf    []byte
	spare  []byte      // the buffer last written out, for the next swap
	timer  *time.Timer // flushes every after the first buffered line
	armed  bool        // timer is running for the lines in buf
	closed bool
}

// New returns a Writer writing to w at most every after a line is
// buffered; every <= 0 writes each Write through at once.
func New(w io.Writer, every time.Duration) *Writer {
	b := &Writer{w: w, every: every, file: isFile(w)}
	if every > 0 {
		b.timer = time.AfterFunc(time.Hour, b.tick)
		b.timer.Stop()
	}
	return b
}

// Write buffers p (one log line); it writes p through, after what is
// buffered, when the Writer does not buffer or is closed, or when p
// alone fills the buffer. A full buffer has the timer write it out at
// once.
func (b *Writer) Write(p []byte) (int, error) {
	b.mu.Lock()
	if b.every <= 0 || b.closed || len(p) >= Size {
		b.mu.Unlock()
		return len(p), b.flush(p)
	}
	b.buf = append(b.buf, p...)
	switch {
	case len(b.buf) >= Backlog: // the output does not keep up: wait for it
		b.mu.Unlock()
		return len(p), b.flush(nil)
	case len(b.buf) >= Size:
		b.armed = true
		b.timer.Reset(0)
	case !b.armed:
		b.armed = true
		b.timer.Reset(b.every)
	}
	b.mu.Unlock()
	return len(p), nil
}

// Flush writes out what is buffered.
func (b *Writer) Flush() error { return b.flush(nil) }

// Close writes out what is buffered; later Writes go through at once.
func (b *Writer) Close() error {
	b.mu.Lock()
	b.closed = true
	if b.timer != nil {
		b.timer.Stop()
		b.armed = false
	}
	b.mu.Unlock()
	return b.flush(nil)
}

// tick is the timer's: the interval since the first buffered line has
// passed, or the buffer is full.
func (b *Writer) tick() {
	b.mu.Lock()
	b.armed = false
	b.mu.Unlock()
	_ = b.flush(nil) // nobody to tell; the next line's write will fail too
}

// flush writes out what is buffered, then p. It takes the buffer (and
// leaves the spare one for the lines that come meanwhile) under out, so
// that buffers go out in the order they were taken.
func (b *Writer) flush(p []byte) error {
	b.out.Lock()
	defer b.out.Unlock()
	b.mu.Lock()
	q := b.buf
	b.buf, b.spare = b.spare[:0], nil
	b.mu.Unlock()
	err := b.writeLines(q)
	if err == nil && len(p) > 0 {
		_, err = b.w.Write(p)
	}
	if cap(q) <= Backlog {
		b.mu.Lock()
		b.spare = q[:0]
		b.mu.Unlock()
	}
	return err
}

// writeLines writes p, whole lines. To anything but a regular file (a
// pipe, a socket: a container's log collector) it writes whole lines at
// most PipeBuf bytes at a time, which the kernel never interleaves with
// another writer's (the Go runtime's own GC trace lines, say), as the
// one-line writes were not.
func (b *Writer) writeLines(p []byte) error {
	for len(p) > 0 {
		n := len(p)
		if !b.file && n > PipeBuf {
			n = bytes.LastIndexByte(p[:PipeBuf], '\n') + 1
			if n == 0 { // a line longer than that goes alone
				if n = bytes.IndexByte(p, '\n') + 1; n == 0 {
					n = len(p)
				}
			}
		}
		if _, err := b.w.Write(p[:n]); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// PipeBuf is the largest write a pipe takes whole (POSIX's PIPE_BUF on
// Linux).
const PipeBuf = 4096

// isFile reports whether w is a regular file, whose writes are never
// interleaved with another's.
func isFile(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode().IsRegular()
}

// Handler returns h, which writes to b, flushing b after every record at
// level WARN or above: errors and warnings go out at once.
func Handler(h slog.Handler, b *Writer) slog.Handler {
	return urgent{h, b}
}

type urgent struct {
	slog.Handler
	b *Writer
}

func (h urgent) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Level >= slog.LevelWarn {
		if ferr := h.b.Flush(); err == nil {
			err = ferr
		}
	}
	return err
}

func (h urgent) WithAttrs(as []slog.Attr) slog.Handler {
	return urgent{h.Handler.WithAttrs(as), h.b}
}

func (h urgent) WithGroup(name string) slog.Handler {
	return urgent{h.Handler.WithGroup(name), h.b}
}
