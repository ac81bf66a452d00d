package detach

import (
	"net"
	"sync"
	"time"
)

// Listener hands the connections of detached responses back to the
// http.Server: serve it with the same server, beside the listener the
// server accepts new connections on (http.Server.Serve may run on several
// listeners). A connection handed back waits for its next request, up to
// IdleTimeout, in one small goroutine (its response's reader, Watch: an
// idle keep-alive connection then holds none of net/http's buffers), and
// comes out of Accept with that request's first bytes in front. Close (the server's
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

// wait notes that c waits for its next request (a Response's reader
// waits on it), so that Close closes it; false: l is closed.
func (l *Listener) wait(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.waiting[c] = struct{}{}
	return true
}

// unwait ends wait: c no longer waits here. closed says that l was closed
// meanwhile (and closed c).
func (l *Listener) unwait(c net.Conn) (closed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.waiting, c)
	return l.closed
}

// deliver gives c, whose next request has begun, to Accept.
func (l *Listener) deliver(c net.Conn) {
	select {
	case l.back <- c:
	case <-l.done:
		c.Close()
	}
}
