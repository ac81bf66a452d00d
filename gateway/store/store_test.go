package store_test

import (
	"testing"

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
