package store_test

import (
	"testing"
	"time"

	"github.com/streamgate/streamgate/gateway/store"
)

// An owner's account counts each record once, at its latest size, until
// it is released or expires; a charge past the limit takes nothing.
func TestStorage(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		ctx := t.Context()
		charge := func(id string, size int64, ttl time.Duration, want bool) {
			t.Helper()
			ok, err := s.ChargeStorage(ctx, "k1", id, size, ttl, 100)
			if err != nil || ok != want {
				t.Fatalf("charge %s %d: %v %v, want %v", id, size, ok, err, want)
			}
		}
		charge("a", 60, time.Minute, true)
		charge("b", 50, time.Minute, false) // 110 > 100
		charge("a", 40, time.Minute, true)  // a again: its new size only
		charge("b", 50, time.Minute, true)  // 90
		charge("c", 20, time.Minute, false)
		if ok, err := s.ChargeStorage(ctx, "k2", "c", 20, time.Minute, 100); !ok || err != nil {
			t.Fatalf("another owner's account: %v %v", ok, err)
		}
		if err := s.ReleaseStorage(ctx, "k1", "b"); err != nil {
			t.Fatal(err)
		}
		charge("c", 20, time.Minute, true) // 60
		if ok, err := s.ChargeStorage(ctx, "k1", "d", 1000, time.Minute, 0); !ok || err != nil {
			t.Fatalf("a charge without a limit: %v %v", ok, err)
		}
		charge("e", 1, time.Minute, false)
		// Records that expire leave the account.
		charge2 := func(id string, size int64, ttl time.Duration) bool {
			ok, err := s.ChargeStorage(ctx, "k3", id, size, ttl, 100)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		if !charge2("x", 100, 50*time.Millisecond) {
			t.Fatal("the first record")
		}
		deadline := time.Now().Add(30 * time.Second)
		for !charge2("y", 100, time.Minute) {
			if time.Now().After(deadline) {
				t.Fatal("an expired record still counts")
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}
