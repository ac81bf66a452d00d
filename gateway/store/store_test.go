package store_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/streamgate/streamgate/gateway/store"
	"github.com/streamgate/streamgate/gateway/store/redistest"
)

// eachStore runs f as a subtest on both implementations: the store suite
// is one set of tests.
func eachStore(t *testing.T, f func(t *testing.T, s store.Store)) {
	t.Run("memory", func(t *testing.T) {
		s := store.NewMemory()
		t.Cleanup(func() { s.Close() })
		f(t, s)
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		s, err := store.Open(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		f(t, s)
	})
}

func TestPing(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		if err := s.Ping(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// blackHole is a TCP server that accepts connections and never answers:
// a Redis that hangs.
func blackHole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// A Redis that hangs fails each operation when its context ends, even
// when the URL sets long client timeouts: the bounds callers put on
// store operations (the resume writer's, a settlement's) hold.
func TestRedisHonoursContext(t *testing.T) {
	s, err := store.Open("redis://" + blackHole(t) + "/0?read_timeout=1h&write_timeout=1h&max_retries=0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.(*store.Redis).SetLimitsOnFailure(false) // open would admit locally
	ops := map[string]func(ctx context.Context) error{
		"ping": s.Ping,
		"append": func(ctx context.Context) error {
			_, err := s.AppendStream(ctx, "s1", store.Append{Events: []store.Event{{ID: 1}}, Renew: true, Lease: time.Second, TTL: time.Minute})
			return err
		},
		"admit": func(ctx context.Context) error {
			_, err := s.Admit(ctx, "k1", store.Limit{RPM: 1}, store.Take{Requests: 1})
			return err
		},
	}
	for name, op := range ops {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		errc := make(chan error, 1)
		go func() { errc <- op(ctx) }()
		select {
		case err := <-errc:
			if !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("%s: %v, want ErrUnavailable", name, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s: still waiting on a hung Redis long after its context ended", name)
		}
		cancel()
	}
}
