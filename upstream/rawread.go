package upstream

import (
	"io"
	"net"
	"syscall"
	"unsafe"
)

// rawReadConn is a connection whose reads do not tell the Go scheduler
// that they are system calls (syscall.RawSyscall): the socket is
// non-blocking, so a read returns at once, with data or EAGAIN (then the
// poller waits, as for any read). A read the scheduler is told of wakes
// its monitor thread (sysmon) whenever every P was idle, and that thread
// then polls every 20 µs for a while: at a paced load of many streams,
// where the process goes idle between reads thousands of times a
// second, that monitor was a tenth of the gateway's CPU.
type rawReadConn struct {
	net.Conn
	rc  syscall.RawConn
	f   func(fd uintptr) bool // readFD, bound once
	p   []byte
	n   int
	err error
}

// withRawReads returns c reading with rawReadConn when it has a file
// descriptor (a TCP connection), else c.
func withRawReads(c net.Conn) net.Conn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	r := &rawReadConn{Conn: c, rc: rc}
	r.f = r.readFD
	return r
}

func (c *rawReadConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.p = p
	err := c.rc.Read(c.f) // closed, or past the read deadline
	n, rerr := c.n, c.err
	c.p, c.n, c.err = nil, 0, nil
	switch {
	case err != nil:
		return 0, err
	case rerr != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: rerr}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// readFD is one read of the descriptor; false (EAGAIN) has the poller
// wait until it is readable.
func (c *rawReadConn) readFD(fd uintptr) bool {
	for {
		n, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.p[0])), uintptr(len(c.p)))
		switch errno {
		case 0:
			c.n = int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.err = errno
		return true
	}
}
