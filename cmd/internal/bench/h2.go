package bench

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// h2Pool is an HTTP/2 client without TLS (h2c with prior knowledge, what a
// balancer speaks to its backends; the gateway's --h2c) that carries at
// most perConn requests on each connection: conc concurrent streams use
// ⌈conc / perConn⌉ connections, each opened when every open one is full.
// A request goes to the open connection with the fewest in flight; it
// counts there until its response body is closed (or its round trip
// fails). A connection whose server allows fewer streams than perConn
// makes the requests past its limit wait on it, as one HTTP/2 client
// does, and shows in TTFT.
type h2Pool struct {
	t       *http.Transport
	addr    string // host:port
	perConn int

	mu     sync.Mutex // guards conns, opened and every h2Conn's inflight
	conns  []*h2Conn
	opened int // connections dialed so far, closed ones included
}

type h2Conn struct {
	cc       *http.ClientConn
	inflight int
}

func newH2Pool(addr string, perConn int) *h2Pool {
	t := &http.Transport{
		DialContext:        (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		DisableCompression: true,
		Protocols:          new(http.Protocols),
	}
	t.Protocols.SetUnencryptedHTTP2(true)
	return &h2Pool{t: t, addr: addr, perConn: max(perConn, 1)}
}

// RoundTrip sends r on a connection of the pool (its URL's host is not
// looked at: every connection goes to the pool's address).
func (p *h2Pool) RoundTrip(r *http.Request) (*http.Response, error) {
	c, err := p.take(r.Context())
	if err != nil {
		return nil, err
	}
	resp, err := c.cc.RoundTrip(r)
	if err != nil {
		p.give(c)
		return nil, err
	}
	resp.Body = &h2Body{ReadCloser: resp.Body, done: func() { p.give(c) }}
	return resp, nil
}

// take counts a request on the least-loaded live connection with room,
// dialing a new one when none has room.
func (p *h2Pool) take(ctx context.Context) (*h2Conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best *h2Conn
	live := p.conns[:0]
	for _, c := range p.conns {
		if c.cc.Err() != nil {
			c.cc.Close()
			continue
		}
		live = append(live, c)
		if c.inflight < p.perConn && (best == nil || c.inflight < best.inflight) {
			best = c
		}
	}
	clear(p.conns[len(live):])
	p.conns = live
	if best == nil {
		cc, err := p.t.NewClientConn(ctx, "http", p.addr)
		if err != nil {
			return nil, err
		}
		best = &h2Conn{cc: cc}
		p.conns = append(p.conns, best)
		p.opened++
	}
	best.inflight++
	return best, nil
}

func (p *h2Pool) give(c *h2Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.inflight--
}

// connections is how many connections the pool has dialed.
func (p *h2Pool) connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.opened
}

// CloseIdleConnections closes every connection (http.Client's
// CloseIdleConnections reaches it): the bench calls it when a run is over.
func (p *h2Pool) CloseIdleConnections() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.cc.Close()
	}
	p.conns = nil
}

// h2Body is a response body that gives its request's slot back once,
// when closed.
type h2Body struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *h2Body) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.done)
	return err
}
