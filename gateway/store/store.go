package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/redis/go-redis/v9"
)

// Store is the state shared by gateway replicas. Its parts are defined
// beside their implementations: Streams (resumable stream logs), Keys
// (API keys), Limits (per-key limits), Responses (stored responses) and
// Storage (the bytes each key keeps).
type Store interface {
	Streams
	Keys
	Limits
	Responses
	Storage

	// Ping reports whether the store answers; Memory always does.
	Ping(ctx context.Context) error
	// Close releases the store's connections. Using it afterwards is an
	// error.
	Close() error
}

// ErrUnavailable wraps every failure to reach the backing store (Redis
// down, a timeout): callers answer 503 and keep serving what does not
// need the store.
var ErrUnavailable = errors.New("store unavailable")

// Open returns the store a gateway was configured with: Memory when url
// is empty, otherwise Redis at url, through a go-redis UniversalClient:
//
//   - one node: redis://[user:pass@]host:6379/0 (rediss:// for TLS);
//   - Sentinel: the sentinels' addresses and the master's name,
//     redis://[user:pass@]sentinel1:26379/0?master_name=mymaster&addr=sentinel2:26379;
//   - Cluster: several nodes, redis://[user:pass@]node1:6379?addr=node2:6379&addr=node3:6379.
//
// Query parameters set go-redis's options (dial_timeout, read_timeout,
// max_retries, pool_size, ...). Unless the URL sets them, timeouts
// and retries are short (1s to dial, read or write; one retry of a
// command, one dial per attempt) so that a Redis that is down fails
// requests at once instead of holding them, and a command also ends
// with its context's deadline; the pool holds up to 512 connections to
// each node (pool_size), one for each reader following a stream.
func Open(url string) (Store, error) {
	if url == "" {
		return NewMemory(), nil
	}
	c, err := newClient(url)
	if err != nil {
		return nil, fmt.Errorf("store: --redis %q: %w", redactURL(url), err)
	}
	return NewRedis(c), nil
}

// Default client timeouts and retries (when the URL sets none).
const (
	dialTimeout   = time.Second
	ioTimeout     = time.Second
	maxRetries    = 1
	dialerRetries = 1
	// poolSize is the connections to each Redis node: every reader
	// following a resumable stream holds one while it waits for events
	// (XREAD BLOCK), so go-redis's default (10 per CPU) queued readers
	// behind one another: at 500 followers per replica on 2 CPUs,
	// resumes took seconds and stream_lost minutes.
	poolSize = 512
)

func newClient(rawURL string) (redis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, errors.New("not a valid URL") // url's error would show the password
	}
	q := u.Query()
	switch {
	case q.Has("master_name"):
		o, err := redis.ParseFailoverURL(rawURL)
		if err != nil {
			return nil, err
		}
		defaults(q, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.DialerRetries, &o.PoolSize, &o.ContextTimeoutEnabled)
		return redis.NewFailoverClient(o), nil
	case q.Has("addr"):
		o, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, err
		}
		defaults(q, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.DialerRetries, &o.PoolSize, &o.ContextTimeoutEnabled)
		return redis.NewClusterClient(o), nil
	}
	o, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	defaults(q, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.DialerRetries, &o.PoolSize, &o.ContextTimeoutEnabled)
	return redis.NewClient(o), nil
}

// defaults sets the client options the URL's query q does not. Context
// deadlines always bound commands (go-redis ignores them by default):
// the store's callers bound each operation with one.
func defaults(q url.Values, dial, read, write *time.Duration, retries, dialRetries, pool *int, ctxTimeouts *bool) {
	for _, d := range []struct {
		name string
		p    *time.Duration
		v    time.Duration
	}{{"dial_timeout", dial, dialTimeout}, {"read_timeout", read, ioTimeout}, {"write_timeout", write, ioTimeout}} {
		if !q.Has(d.name) {
			*d.p = d.v
		}
	}
	if !q.Has("max_retries") {
		*retries = maxRetries
	}
	if !q.Has("dialer_retries") {
		*dialRetries = dialerRetries
	}
	if !q.Has("pool_size") {
		*pool = poolSize
	}
	if !q.Has("context_timeout_enabled") {
		*ctxTimeouts = true
	}
}

// redactURL is url without its password, for errors and logs.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// Redis is the Store shared by replicas, on one go-redis client.
type Redis struct {
	c redis.UniversalClient
	redisStreams
	redisKeys
	redisLimits
	redisResponses
	redisStorage
}

// NewRedis returns a Store on c; Close closes c.
func NewRedis(c redis.UniversalClient) *Redis {
	r := &Redis{c: c}
	r.redisStreams.init(c)
	r.redisKeys.init(c)
	r.redisLimits.init(c, r.redisKeys.replicaCount)
	r.redisResponses.init(c)
	r.redisStorage.init(c)
	return r
}

// Client is the Redis client (tests and tools).
func (r *Redis) Client() redis.UniversalClient { return r.c }

// Ping implements Store.
func (r *Redis) Ping(ctx context.Context) error {
	if err := r.c.Ping(ctx).Err(); err != nil {
		return unavailable(err)
	}
	return nil
}

// Close implements Store.
func (r *Redis) Close() error {
	r.redisLimits.close()
	r.redisKeys.close()
	return r.c.Close()
}

// Memory is the in-process Store: one replica's state, lost when the
// process exits.
type Memory struct {
	memStreams
	memKeys
	memLimits
	memResponses
	memStorage
}

// NewMemory returns an empty in-process store.
func NewMemory() *Memory {
	m := &Memory{}
	m.memStreams.init()
	m.memKeys.init()
	m.memLimits.init()
	m.memResponses.init()
	m.memStorage.init()
	return m
}

// Ping implements Store.
func (m *Memory) Ping(context.Context) error { return nil }

// Close implements Store.
func (m *Memory) Close() error { return nil }

// unavailable wraps a Redis failure as ErrUnavailable, keeping its text.
// redis.Nil (a missing key) is not a failure and is returned as is.
func unavailable(err error) error {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

var (
	_ Store = (*Redis)(nil)
	_ Store = (*Memory)(nil)
)
