package detach

import (
	"net"
	"sync"
	"time"
)

// Listener hands the connections of detached responses back to the
// http.Server: serve it with the same server, beside the listener the
// server accepts new connections on (http.Server.Serve may run on several
// listeners). A connection handed back waits here for its next request,
// up to IdleTimeout, in one small goroutine (an idle keep-alive
// connection then holds none of net/http's buffers), and comes out of
// Accept with that request's first bytes in front. Close (the server's
// Shutdown or Close calls it) closes the connections waiting here; later
// hand-backs are closed.
type Listener struct {
	// IdleTimeout is how long a connection handed back may wait for its
	// next request (as http.Server.IdleTimeout). Zero: no limit. Set it
	// before serving.
	IdleTimeout time.Duration

	addr net.Addr
	back chan net.Conn
	done chan struct{}
	stop sync.Once

	mu      sync.Mutex
	closed  bool
	waiting map[net.Conn]struct{}
}

// NewListener returns a Listener whose Addr is addr (the server's).
func NewListener(addr net.Addr) *Listener {
	return &Listener{
		addr:    addr,
		back:    make(chan net.Conn),
		done:    make(chan struct{}),
		waiting: map[net.Conn]struct{}{},
	}
}

// Addr is the address the server accepts new connections on.
func (l *Listener) Addr() net.Addr { return l.addr }

// Accept returns the next connection handed back whose next request has
// begun.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.back:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close closes the connections waiting for their next request and
// refuses later ones.
func (l *Listener) Close() error {
	err := net.ErrClosed
	l.stop.Do(func() {
		err = nil
		close(l.done)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.closed = true
		for c := range l.waiting {
			c.Close()
		}
	})
	return err
}

// handBack gives c, whose detached response has ended, back to the
// server: at once when kept (bytes of its next request) is not empty,
// otherwise once its next request begins.
func (l *Listener) handBack(c net.Conn, kept []byte) {
	if len(kept) > 0 {
		l.deliver(&keptConn{Conn: c, kept: kept})
		return
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		c.Close()
		return
	}
	l.waiting[c] = struct{}{}
	l.mu.Unlock()
	go l.await(c)
}

// await waits for the first byte of c's next request.
func (l *Listener) await(c net.Conn) {
	if l.IdleTimeout > 0 {
		_ = c.SetReadDeadline(time.Now().Add(l.IdleTimeout))
	}
	one := make([]byte, 1)
	n, err := c.Read(one)
	l.mu.Lock()
	delete(l.waiting, c)
	closed := l.closed
	l.mu.Unlock()
	if n == 0 || err != nil || closed {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	l.deliver(&keptConn{Conn: c, kept: one})
}

func (l *Listener) deliver(c net.Conn) {
	select {
	case l.back <- c:
	case <-l.done:
		c.Close()
	}
}
