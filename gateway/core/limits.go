package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
)

// limiter counts inference requests in flight, in all and per client
// (limitKey).
type limiter struct {
	max, maxPerClient int

	mu        sync.Mutex
	total     int
	perClient map[string]int
}

func newLimiter(max, maxPerClient int) *limiter {
	return &limiter{max: max, maxPerClient: maxPerClient, perClient: map[string]int{}}
}

var (
	errGlobalLimit = &HTTPError{Status: http.StatusServiceUnavailable, Code: "unavailable", Msg: "too many requests in flight on this server", RetryAfter: true}
	errConnLimit   = &HTTPError{Status: http.StatusTooManyRequests, Code: "too_many_requests", Msg: "too many requests in flight on this connection", RetryAfter: true}
	errKeyLimit    = &HTTPError{Status: http.StatusTooManyRequests, Code: "too_many_requests", Msg: "too many requests in flight for this API key", RetryAfter: true}
)

// The per-client limit (Options.MaxStreamsPerConn) counts a request
// against its API key when the request has one, otherwise against its
// connection. By connection is right for a client that connects itself:
// over HTTP/1.1 a connection carries one request at a time, over HTTP/2
// one connection carries all of a browser's streams. It is wrong behind a
// balancer that multiplexes many users onto one HTTP/2 connection (h2c),
// and no address tells those users apart; an API key does.
//
// Authentication names the key: it returns the request's context through
// WithLimitKey, before the handler runs (Server.handle).

type limitKeyCtx struct{}

// WithLimitKey returns ctx naming the API key its requests count against
// (a stable id of the key, never the secret).
func WithLimitKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, limitKeyCtx{}, key)
}

// CallerKey is the id of the API key the request with context ctx was
// authenticated with (WithLimitKey), "" on an open gateway. What a key
// creates (resumable streams, stored responses) belongs to it: others
// get 404.
func CallerKey(ctx context.Context) string {
	k, _ := ctx.Value(limitKeyCtx{}).(string)
	return k
}

// limitKey is what a request with context ctx from connection conn (its
// remote address and port; "" for a WebSocket request) counts against:
// "key:" and the API key WithLimitKey put in ctx, else "conn:" and conn.
// A WebSocket request without a key counts only toward the global limit:
// its socket's own limit (ws.Options.MaxInFlight) applies instead.
func limitKey(ctx context.Context, conn string) string {
	if k, ok := ctx.Value(limitKeyCtx{}).(string); ok {
		return "key:" + k
	}
	if conn == "" {
		return ""
	}
	return "conn:" + conn
}

// take takes a slot for a request counted against client (limitKey; ""
// counts only toward the global limit); give gives it back.
func (l *limiter) take(client string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total >= l.max {
		return errGlobalLimit
	}
	if client != "" && l.perClient[client] >= l.maxPerClient {
		if strings.HasPrefix(client, "key:") {
			return errKeyLimit
		}
		return errConnLimit
	}
	l.total++
	if client != "" {
		l.perClient[client]++
	}
	return nil
}

func (l *limiter) give(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if client != "" {
		if l.perClient[client]--; l.perClient[client] == 0 {
			delete(l.perClient, client)
		}
	}
}

// HTTP2Config is the HTTP/2 configuration consistent with the gateway's
// limits, for the http.Server that serves Handler. A connection may open
// twice Options.MaxStreamsPerConn streams (at least the 100 HTTP/2
// recommends): inference requests past the per-client limit are answered
// 429 with Retry-After in the route's format rather than left waiting
// unseen in the client's HTTP/2 queue, and requests that are not inference
// (models, health, metrics) still get through beside a full connection.
func (s *Server) HTTP2Config() *http.HTTP2Config {
	return &http.HTTP2Config{MaxConcurrentStreams: max(2*s.Opts.MaxStreamsPerConn, 100)}
}

// IDSource makes the gateway's public ids (responses, completions,
// request ids, limit slots): a kind and 128 bits from crypto/rand, so
// that no id tells anything about another.
type IDSource struct{}

func newIDSource() IDSource { return IDSource{} }

// Next is a new id of kind: "kind-" and 32 hex digits.
func (IDSource) Next(kind string) string {
	var b [16]byte
	rand.Read(b[:])
	return kind + "-" + hex.EncodeToString(b[:])
}
