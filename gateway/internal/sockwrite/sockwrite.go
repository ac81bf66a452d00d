// Package sockwrite writes to a socket without waiting for it: one write
// of what the socket takes at once, for a goroutine that must not block
// on one client (the upstream reader that serves many) or that would
// rather not set and clear a write deadline when the socket has room.
//
// The write is a raw system call (syscall.RawSyscall) under the
// connection's poller: the socket is non-blocking, so it returns at once,
// with what it took or EAGAIN. A system call the scheduler is told of
// wakes the runtime's monitor thread (sysmon) whenever every P was idle,
// and that thread then polls every 20 µs for a while; a gateway relaying
// paced streams goes idle between writes thousands of times a second.
package sockwrite

import (
	"net"
	"syscall"
	"unsafe"
)

// Writer writes to one connection's socket. One goroutine at a time
// calls Write.
type Writer struct {
	rc  syscall.RawConn
	f   func(fd uintptr) bool // write, bound once
	b   []byte
	n   int
	err error
}

// New returns a Writer for c, nil when c has no socket of its own (a TLS
// connection, a pipe).
func New(c net.Conn) *Writer {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	w := &Writer{rc: rc}
	w.f = w.write
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
	w.b = b
	err = w.rc.Write(w.f)
	n = w.n
	if err == nil {
		err = w.err
	}
	w.b, w.n, w.err = nil, 0, nil
	return n, err
}

// write is the one write attempt on the descriptor.
func (w *Writer) write(fd uintptr) bool {
	for {
		n, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(w.b))), uintptr(len(w.b)))
		switch errno {
		case 0:
			w.n = int(n)
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
		default:
			w.err = errno
		}
		return true
	}
}
