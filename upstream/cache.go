package upstream

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// cache holds answers for ttl and shares one fetch among concurrent
// callers of the same key. Errors are not cached. It also keeps the last
// answer of every key, whatever the ttl, to stand in when the source
// cannot be reached (see get).
type cache[V any] struct {
	ttl time.Duration // <0: share in-flight fetches only
	now func() time.Time

	mu   sync.Mutex
	m    map[string]*cacheEntry[V]
	last map[string]V // the last answer fetched per key, even expired
}

type cacheEntry[V any] struct {
	done chan struct{} // closed when val, err and exp are set
	val  V
	err  error
	exp  time.Time
}

func newCache[V any](ttl time.Duration) *cache[V] {
	return &cache[V]{ttl: ttl, now: time.Now, m: map[string]*cacheEntry[V]{}, last: map[string]V{}}
}

// get returns the live cached answer for key or fetches it. Only one fetch
// per key runs at a time, in the goroutine of the caller that started it,
// with that caller's ctx; others wait for it within their own ctx, and
// fetch again themselves if it failed only because its ctx ended.
//
// When a fetch fails because the source is unreachable (unavailable, or
// out of time while the caller's ctx is still live) and an answer for key
// was fetched before, get returns that answer instead, and the next get
// fetches again.
func (c *cache[V]) get(ctx context.Context, key string, fetch func(context.Context) (V, error)) (V, error) {
	for {
		c.mu.Lock()
		e := c.m[key]
		if e != nil {
			select {
			case <-e.done:
				if e.err == nil && c.now().Before(e.exp) {
					c.mu.Unlock()
					return e.val, nil
				}
				e = nil // expired
			default:
			}
		}
		if e == nil {
			e = &cacheEntry[V]{done: make(chan struct{})}
			c.m[key] = e
			c.mu.Unlock()
			v, err := fetch(ctx)
			c.mu.Lock()
			exp := c.now().Add(c.ttl)
			if err == nil {
				c.last[key] = v
			} else if old, ok := c.last[key]; ok && ctx.Err() == nil && unreachable(err) {
				v, err, exp = old, nil, c.now() // stands in once, expired
			}
			e.val, e.err, e.exp = v, err, exp
			if (err != nil || c.ttl < 0) && c.m[key] == e {
				delete(c.m, key)
			}
			close(e.done)
			c.mu.Unlock()
			return v, err
		}
		c.mu.Unlock()
		select {
		case <-e.done:
			if e.err == nil || ctx.Err() != nil || !isContextError(e.err) {
				return e.val, e.err
			}
			// The fetching caller gave up; try again with our ctx.
		case <-ctx.Done():
			var zero V
			return zero, ctx.Err()
		}
	}
}

// peek returns the last answer fetched for key, even expired, without
// fetching.
func (c *cache[V]) peek(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.last[key]
	return v, ok
}

func isContextError(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	c := status.Code(err)
	return c == codes.Canceled || c == codes.DeadlineExceeded
}

// unreachable reports whether err says that the source did not answer
// (rather than answering with an error, such as NotFound).
func unreachable(err error) bool {
	if e, ok := AsError(err); ok {
		return e.Kind == KindUnavailable || e.Kind == KindDeadline
	}
	return isContextError(err) || status.Code(err) == codes.Unavailable
}
