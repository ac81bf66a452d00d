package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
)

// limiter counts inference requests in flight, in all and per client
// connection.
type limiter struct {
	max, maxPerConn int

	mu      sync.Mutex
	total   int
	perConn map[string]int
}

func newLimiter(max, maxPerConn int) *limiter {
	return &limiter{max: max, maxPerConn: maxPerConn, perConn: map[string]int{}}
}

var (
	errGlobalLimit = &httpError{Status: http.StatusServiceUnavailable, Code: "unavailable", Msg: "too many requests in flight on this server", RetryAfter: true}
	errConnLimit   = &httpError{Status: http.StatusTooManyRequests, Code: "too_many_requests", Msg: "too many requests in flight on this connection", RetryAfter: true}
)

// acquire takes a slot for a request from conn ("" counts only toward the
// global limit) and returns the function that gives it back.
func (l *limiter) acquire(conn string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total >= l.max {
		return nil, errGlobalLimit
	}
	if conn != "" && l.perConn[conn] >= l.maxPerConn {
		return nil, errConnLimit
	}
	l.total++
	if conn != "" {
		l.perConn[conn]++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.total--
			if conn != "" {
				if l.perConn[conn]--; l.perConn[conn] == 0 {
					delete(l.perConn, conn)
				}
			}
		})
	}, nil
}

// idSource makes response ids: a random per-process prefix and a counter.
type idSource struct {
	prefix string
	n      atomic.Uint64
}

func newIDSource() idSource {
	var b [6]byte
	rand.Read(b[:])
	return idSource{prefix: hex.EncodeToString(b[:])}
}

func (s *idSource) next(kind string) string {
	return kind + "-" + s.prefix + strconv.FormatUint(s.n.Add(1), 36)
}
