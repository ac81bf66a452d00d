package detach

import (
	"net"
	"sync"
	"time"
)

// Listener is what an http.Server whose handlers detach responses
// serves: it accepts the connections of the listener it wraps and those
// detached responses hand back (Response.Finish). A connection handed
// back waits here for its next request, up to IdleTimeout, in one small
// goroutine (an idle keep-alive connection then holds none of net/http's
// buffers), and goes to the server with that request's first bytes in
// front. Close closes the wrapped listener and the connections waiting
// here; later hand-backs are closed.
type Listener struct {
	net.Listener
	// IdleTimeout is how long a connection handed back may wait for its
	// next request (as http.Server.IdleTimeout). Zero: no limit. Set it
	// before serving.
	IdleTimeout time.Duration

	start    sync.Once
	accepted chan accepted
	back     chan net.Conn
	done     chan struct{}
	stop     sync.Once

	mu      sync.Mutex
	closed  bool
	waiting map[net.Conn]struct{}
}

type accepted struct {
	c   net.Conn
	err error
}

// NewListener wraps l.
func NewListener(l net.Listener) *Listener {
	return &Listener{
		Listener: l,
		accepted: make(chan accepted),
		back:     make(chan net.Conn),
		done:     make(chan struct{}),
		waiting:  map[net.Conn]struct{}{},
	}
}

// Accept returns the next connection: a new one, or one handed back
// whose next request has begun.
func (l *Listener) Accept() (net.Conn, error) {
	l.start.Do(func() { go l.acceptLoop() })
	select {
	case c := <-l.back:
		return c, nil
	case a := <-l.accepted:
		return a.c, a.err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// acceptLoop accepts from the wrapped listener until it fails for good.
func (l *Listener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		select {
		case l.accepted <- accepted{c, err}:
		case <-l.done:
			if c != nil {
				c.Close()
			}
			return
		}
		if ne, ok := err.(net.Error); err != nil && !(ok && ne.Temporary()) {
			return
		}
	}
}

// Close closes the wrapped listener and every connection waiting for its
// next request.
func (l *Listener) Close() error {
	err := net.ErrClosed
	l.stop.Do(func() {
		close(l.done)
		l.mu.Lock()
		l.closed = true
		for c := range l.waiting {
			c.Close()
		}
		l.mu.Unlock()
		err = l.Listener.Close()
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
