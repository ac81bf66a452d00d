package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Store is the state shared by gateway replicas. Its parts are defined
// beside their implementations: Streams (resumable stream logs), Keys
// (API keys), Limits (per-key limits) and Responses (stored responses).
type Store interface {
	Streams
	Keys
	Limits
	Responses

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
// is empty, otherwise Redis at url ("redis://[user:pass@]host:port/db",
// "rediss://" for TLS; several hosts or a sentinel master name as
// go-redis's ParseClusterURL and UniversalOptions read them).
func Open(url string) (Store, error) {
	if url == "" {
		return NewMemory(), nil
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("store: --redis %q: %w", url, err)
	}
	return NewRedis(redis.NewClient(opts)), nil
}

// Redis is the Store shared by replicas, on one go-redis client.
type Redis struct {
	c redis.UniversalClient
	redisStreams
	redisKeys
	redisLimits
	redisResponses
}

// NewRedis returns a Store on c; Close closes c.
func NewRedis(c redis.UniversalClient) *Redis {
	r := &Redis{c: c}
	r.redisStreams.init(c)
	r.redisKeys.init(c)
	r.redisLimits.init(c)
	r.redisResponses.init(c)
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
func (r *Redis) Close() error { return r.c.Close() }

// Memory is the in-process Store: one replica's state, lost when the
// process exits.
type Memory struct {
	memStreams
	memKeys
	memLimits
	memResponses
}

// NewMemory returns an empty in-process store.
func NewMemory() *Memory {
	m := &Memory{}
	m.memStreams.init()
	m.memKeys.init()
	m.memLimits.init()
	m.memResponses.init()
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
