// Package rawsock reads and writes sockets with system calls the Go
// scheduler is not told of (syscall.RawSyscall), under the connection's
// poller: the socket is non-blocking, so every call returns at once, with
// data or EAGAIN, and on EAGAIN the poller waits as it does for any
// net.Conn (deadlines and Close included).
//
// Why: a system call the scheduler is told of (entersyscall) wakes the
// runtime's monitor thread (sysmon) whenever every P was idle, and that
// thread then polls every 20 µs for a while before it backs off. A
// process relaying paced streams goes idle between reads and writes
// thousands of times a second, and those wake-ups were a tenth of its
// CPU. A raw call never blocks here, so the scheduler loses nothing by
// not being told.
//
// Conn wraps a whole connection (reads and writes); Writer is the one
// write that never waits, for a goroutine that must not block on one
// client (an upstream reader serving many).
package rawsock

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// op is one read or write on a descriptor, its buffer and its result:
// the state of a function bound once (a method value), so that a call
// allocates nothing.
type op struct {
	p   []byte
	n   int
	err error
}

// call is one read or write system call (nr) of p on fd, again when a
// signal interrupted it.
func call(nr, fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		n, _, errno := syscall.RawSyscall(nr, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
		if errno != syscall.EINTR {
			return int(n), errno
		}
	}
}

// read is one read into o.p; false (EAGAIN) has the poller wait until
// the descriptor is readable.
func (o *op) read(fd uintptr) bool {
	n, errno := call(syscall.SYS_READ, fd, o.p)
	switch errno {
	case 0:
		o.n = n
	case syscall.EAGAIN:
		return false
	default:
		o.err = errno
	}
	return true
}

// writeOnce writes what the socket takes of o.p at once (nothing on
// EAGAIN); it never has the poller wait.
func (o *op) writeOnce(fd uintptr) bool {
	n, errno := call(syscall.SYS_WRITE, fd, o.p)
	switch errno {
	case 0:
		o.n = n
	case syscall.EAGAIN:
	default:
		o.err = errno
	}
	return true
}

// writeAll writes o.p[o.n:] until it is all out; false (EAGAIN) has the
// poller wait until the descriptor is writable, then it goes on.
func (o *op) writeAll(fd uintptr) bool {
	for o.n < len(o.p) {
		n, errno := call(syscall.SYS_WRITE, fd, o.p[o.n:])
		switch errno {
		case 0:
			o.n += n
		case syscall.EAGAIN:
			return false
		default:
			o.err = errno
			return true
		}
	}
	return true
}

// done returns o's result and clears o. err is the poller's (closed,
// past the deadline), which comes first; either is reported as a
// net.Conn reports its op's failure.
func (o *op) done(c net.Conn, name string, err error) (int, error) {
	n := o.n
	if err != nil {
		if oe, ok := err.(*net.OpError); ok { // the poller's "raw-read"
			err = oe.Err
		}
	} else {
		err = o.err
	}
	o.p, o.n, o.err = nil, 0, nil
	if err != nil {
		oe := &net.OpError{Op: name, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
		if oe.Source != nil {
			oe.Net = oe.Source.Network()
		}
		return n, oe
	}
	return n, nil
}

// rawConn is c's socket, nil when c has none of its own (a TLS
// connection, a pipe).
func rawConn(c net.Conn) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// Fronted is a connection whose Read may return bytes of its own before
// its socket's (a connection handed back with its next request's first
// bytes already read), though it exposes its socket (syscall.Conn): Wrap
// leaves it as it is and Fill declines it, so that no raw read of the
// socket skips those bytes.
type Fronted interface {
	net.Conn
	Fronted()
}

// readsSocket says whether a raw read of c's socket misses nothing of
// c's (c is not Fronted).
func readsSocket(c net.Conn) bool {
	_, fronted := c.(Fronted)
	return !fronted
}

// Conn is a net.Conn whose Read and Write are raw system calls. It is
// safe for concurrent use as a net.Conn is: reads are serialised with
// reads, writes with writes.
type Conn struct {
	net.Conn
	rc syscall.RawConn

	rmu sync.Mutex
	r   op
	rf  func(fd uintptr) bool // r.read, bound once

	wmu sync.Mutex
	w   op
	wf  func(fd uintptr) bool // w.writeAll, bound once
}

// Wrap returns c reading and writing through a Conn when it has a socket
// of its own (a TCP connection) that it reads alone (not Fronted), else
// c.
func Wrap(c net.Conn) net.Conn {
	if _, ok := c.(*Conn); ok || !readsSocket(c) {
		return c
	}
	rc := rawConn(c)
	if rc == nil {
		return c
	}
	rw := &Conn{Conn: c, rc: rc}
	rw.rf, rw.wf = rw.r.read, rw.w.writeAll
	return rw
}

// Read reads as net.Conn's Read does: what has arrived, waiting in the
// poller while nothing has, io.EOF once the peer has closed.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	c.r.p = p
	n, err := c.r.done(c, "read", c.rc.Read(c.rf))
	c.rmu.Unlock()
	if err == nil && n == 0 {
		return 0, io.EOF
	}
	return n, err
}

// Write writes all of p as net.Conn's Write does, waiting in the poller
// while the socket is full.
func (c *Conn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.wmu.Lock()
	c.w.p = p
	n, err := c.w.done(c, "write", c.rc.Write(c.wf))
	c.wmu.Unlock()
	return n, err
}

// ReadFrom copies r to the connection. A file or a socket (alone or
// behind an io.LimitedReader), which the kernel copies from itself
// (sendfile, splice), goes to the wrapped connection's own ReadFrom, as
// net/http's io.Copy of a file would without the wrapping; anything else
// is read here and written raw.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	rf, ok := c.Conn.(io.ReaderFrom)
	if !ok || !kernelCopies(r) {
		return io.Copy(writerOnly{c}, r)
	}
	c.wmu.Lock() // ordered with Write
	defer c.wmu.Unlock()
	return rf.ReadFrom(r)
}

// kernelCopies says whether r is one a TCP connection's ReadFrom hands to
// the kernel (sendfile, splice) rather than copying it through a buffer.
func kernelCopies(r io.Reader) bool {
	if lr, ok := r.(*io.LimitedReader); ok {
		r = lr.R
	}
	switch r.(type) {
	case *os.File, *net.TCPConn, *net.UnixConn:
		return true
	}
	return false
}

// writerOnly hides a writer's ReadFrom from io.Copy.
type writerOnly struct{ io.Writer }

// CloseWrite shuts down the writing side of the connection (net/http
// does before it closes one, so that the client reads the answer first).
func (c *Conn) CloseWrite() error {
	cw, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok {
		return &net.OpError{Op: "close", Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: errors.ErrUnsupported}
	}
	return cw.CloseWrite()
}

// SyscallConn is the connection's socket (a Writer of the same
// connection uses it).
func (c *Conn) SyscallConn() (syscall.RawConn, error) { return c.rc, nil }

// NetConn is the connection c wraps.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// Listener is a net.Listener whose connections are Conns (Wrap).
type Listener struct{ net.Listener }

// Accept returns the next connection, wrapped.
func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(c), nil
}

// Fill reads what has arrived on c, waiting in the poller while nothing
// has, into a buffer that get supplies for each read it tries: one that
// read nothing goes back to put, so a goroutine waiting here holds none.
// It returns the buffer with n > 0 bytes read (the caller puts it back),
// io.EOF once the peer has closed, or the poller's error (closed, past
// the deadline). ok is false when c has no socket of its own, or is
// Fronted: read it as any net.Conn.
func Fill(c net.Conn, get func() *[]byte, put func(*[]byte)) (b *[]byte, n int, ok bool, err error) {
	var rc syscall.RawConn
	if readsSocket(c) {
		rc = rawConn(c)
	}
	if rc == nil {
		return nil, 0, false, nil
	}
	var errno syscall.Errno
	perr := rc.Read(func(fd uintptr) bool {
		b = get()
		n, errno = call(syscall.SYS_READ, fd, (*b)[:cap(*b)])
		if errno != 0 || n == 0 {
			put(b)
			b, n = nil, 0
		}
		return errno != syscall.EAGAIN
	})
	var o op
	o.n = n
	if errno != 0 {
		o.err = errno
	}
	n, err = o.done(c, "read", perr)
	if err == nil && n == 0 {
		err = io.EOF
	}
	return b, n, true, err
}

// Writer writes to one connection's socket without waiting. One
// goroutine at a time calls Write.
type Writer struct {
	c  net.Conn
	rc syscall.RawConn
	w  op
	f  func(fd uintptr) bool // w.writeOnce, bound once
}

// NewWriter returns a Writer for c, nil when c has no socket of its own
// (a TLS connection, a pipe).
func NewWriter(c net.Conn) *Writer {
	rc := rawConn(c)
	if rc == nil {
		return nil
	}
	w := &Writer{c: c, rc: rc}
	w.f = w.w.writeOnce
	return w
}

// Write writes what the socket takes of b at once: n is less than
// len(b) (0 included) when it is full. err is the write's failure: the
// connection is closed, its write deadline has passed, or the peer has
// gone.
func (w *Writer) Write(b []byte) (n int, err error) {
	if len(b) == 0 {
		return 0, nil
	}
	w.w.p = b
	return w.w.done(w.c, "write", w.rc.Write(w.f))
}
