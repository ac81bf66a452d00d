package store_test

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamgate/streamgate/gateway/store"
	"github.com/streamgate/streamgate/gateway/store/redistest"
)

func typeName(v any) string { return reflect.TypeOf(v).String() }

func TestRequestsPerMinute(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		l := store.Limit{RPM: 3}
		for i := range 3 {
			v, err := s.Admit(t.Context(), "key_a", l, store.Take{Requests: 1})
			if err != nil {
				t.Fatal(err)
			}
			if v.Limited != "" || v.Requests.Limit != 3 || v.Requests.Remaining != 2-i || v.Requests.Reset <= 0 {
				t.Fatalf("request %d: %+v", i+1, v)
			}
		}
		v, err := s.Admit(t.Context(), "key_a", l, store.Take{Requests: 1})
		if err != nil {
			t.Fatal(err)
		}
		if v.Limited != store.LimitRequests || v.RetryAfter <= 0 || v.Requests.Remaining != 0 {
			t.Fatalf("4th request: %+v", v)
		}
		// Another key has its own minute.
		if v, _ := s.Admit(t.Context(), "key_b", l, store.Take{Requests: 1}); v.Limited != "" {
			t.Fatalf("other key: %+v", v)
		}
		// No limit: everything passes, and no window is reported.
		if v, _ := s.Admit(t.Context(), "key_a", store.Limit{}, store.Take{Requests: 1, Tokens: 1e6}); v.Limited != "" || v.Requests.Limit != 0 {
			t.Fatalf("no limit: %+v", v)
		}
	})
}

func TestTokensPerMinute(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		ctx := t.Context()
		l := store.Limit{TPM: 100}
		v, err := s.Admit(ctx, "key_t", l, store.Take{Requests: 1, Tokens: 80})
		if err != nil || v.Limited != "" || v.Reserved != 80 || v.Tokens.Remaining != 20 {
			t.Fatalf("first: %+v %v", v, err)
		}
		if v, _ := s.Admit(ctx, "key_t", l, store.Take{Requests: 1, Tokens: 30}); v.Limited != store.LimitTokens || v.RetryAfter <= 0 {
			t.Fatalf("over: %+v", v)
		}
		// The first request used 10 of its 80: 70 come back.
		if err := s.Settle(ctx, "key_t", l, "", 10-80); err != nil {
			t.Fatal(err)
		}
		v, _ = s.Admit(ctx, "key_t", l, store.Take{Tokens: 30})
		if v.Limited != "" || v.Tokens.Remaining < 59 || v.Tokens.Remaining > 60 {
			t.Fatalf("after settling: %+v", v)
		}
		// A request used more than it reserved: the minute runs over.
		if err := s.Settle(ctx, "key_t", l, "", 200); err != nil {
			t.Fatal(err)
		}
		if v, _ := s.Admit(ctx, "key_t", l, store.Take{Tokens: 1}); v.Limited != store.LimitTokens || v.Tokens.Remaining != 0 {
			t.Fatalf("overdrawn: %+v", v)
		}
		// More than the whole minute reserves the minute.
		if v, _ := s.Admit(ctx, "key_big", l, store.Take{Tokens: 500}); v.Limited != "" || v.Reserved != 100 {
			t.Fatalf("big: %+v", v)
		}
	})
}

func TestConcurrency(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		ctx := t.Context()
		l := store.Limit{Concurrency: 2, RPM: 100}
		for _, slot := range []string{"s1", "s2"} {
			if v, err := s.Admit(ctx, "key_c", l, store.Take{Requests: 1, Slot: slot}); err != nil || v.Limited != "" {
				t.Fatalf("%s: %+v %v", slot, v, err)
			}
		}
		v, _ := s.Admit(ctx, "key_c", l, store.Take{Requests: 1, Slot: "s3"})
		if v.Limited != store.LimitConcurrency || v.RetryAfter <= 0 {
			t.Fatalf("third: %+v", v)
		}
		// Refused: nothing was taken, not even the request.
		if v.Requests.Remaining != 98 {
			t.Fatalf("a refused take counted: %+v", v)
		}
		if err := s.Settle(ctx, "key_c", l, "s1", 0); err != nil {
			t.Fatal(err)
		}
		if v, _ := s.Admit(ctx, "key_c", l, store.Take{Requests: 1, Slot: "s3"}); v.Limited != "" {
			t.Fatalf("after release: %+v", v)
		}
	})
}

// Many goroutines on two clients of one Redis (two replicas) never get
// more than the limit.
func TestLimitsUnderConcurrency(t *testing.T) {
	check := func(t *testing.T, stores []store.Store) {
		const goroutines, each = 16, 10
		l := store.Limit{RPM: 12, Concurrency: 3}
		start := time.Now()
		var admitted, held, maxHeld atomic.Int64
		var wg sync.WaitGroup
		for g := range goroutines {
			s := stores[g%len(stores)]
			wg.Go(func() {
				for i := range each {
					slot := fmt.Sprint(g, "-", i)
					v, err := s.Admit(t.Context(), "key_x", store.Limit{Concurrency: 3}, store.Take{Slot: slot})
					if err != nil {
						t.Error(err)
						return
					}
					if v.Limited == "" {
						n := held.Add(1)
						for m := maxHeld.Load(); n > m && !maxHeld.CompareAndSwap(m, n); m = maxHeld.Load() {
						}
						held.Add(-1)
						if err := s.Settle(t.Context(), "key_x", l, slot, 0); err != nil {
							t.Error(err)
						}
					}
					v, err = s.Admit(t.Context(), "key_y", l, store.Take{Requests: 1})
					if err != nil {
						t.Error(err)
						return
					}
					if v.Limited == "" {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		// The bucket refills one request every 5s: a slow run may see
		// a few more, never fewer.
		refill := int64(time.Since(start) / (time.Minute / time.Duration(l.RPM)))
		if n := admitted.Load(); n < int64(l.RPM) || n > int64(l.RPM)+refill {
			t.Errorf("%d requests admitted, limit %d (+%d refilled)", n, l.RPM, refill)
		}
		if maxHeld.Load() > 3 {
			t.Errorf("%d slots held at once, limit 3", maxHeld.Load())
		}
	}
	t.Run("memory", func(t *testing.T) {
		m := store.NewMemory()
		check(t, []store.Store{m})
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		var stores []store.Store
		for range 2 {
			s, err := store.Open(srv.URL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			stores = append(stores, s)
		}
		check(t, stores)
	})
}

// BenchmarkAdmit is one admission (requests, tokens and a slot checked
// and taken) and its settlement: the store's work for one keyed
// inference request besides the key lookup.
func BenchmarkAdmit(b *testing.B) {
	run := func(b *testing.B, s store.Store) {
		l := store.Limit{RPM: 1 << 30, TPM: 1 << 30, Concurrency: 1 << 20}
		for i := 0; b.Loop(); i++ {
			slot := fmt.Sprint(i)
			if v, err := s.Admit(b.Context(), "key_bench", l, store.Take{Requests: 1, Tokens: 100, Slot: slot}); err != nil || v.Limited != "" {
				b.Fatal(v, err)
			}
			if err := s.Settle(b.Context(), "key_bench", l, slot, -50); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("memory", func(b *testing.B) { run(b, store.NewMemory()) })
	b.Run("redis", func(b *testing.B) {
		s, err := store.Open(redistest.Start(b).URL())
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		run(b, s)
	})
}

// A replica's concurrency slots live while it renews them, far past one
// lease, and free within a lease once it stops (it died): three clients
// of one real Redis on one test clock.
func TestSlotLeases(t *testing.T) {
	srv := redistest.Start(t)
	var clock atomic.Int64
	clock.Store(time.Now().UnixMicro())
	now := func() time.Time { return time.UnixMicro(clock.Load()) }
	open := func() (*store.Redis, func(context.Context) error) {
		s, err := store.Open(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		r := s.(*store.Redis)
		return r, store.DriveSlots(r, now)
	}
	live, renewLive := open()
	dead, _ := open()
	judge, _ := open()
	ctx := t.Context()
	l := store.Limit{Concurrency: 2}
	admit := func(s store.Store, slot string) string {
		t.Helper()
		v, err := s.Admit(ctx, "key_lease", l, store.Take{Slot: slot})
		if err != nil {
			t.Fatal(err)
		}
		return v.Limited
	}
	if admit(live, "a") != "" || admit(dead, "b") != "" {
		t.Fatal("first two slots refused")
	}
	dead.Close() // its replica dies: b is never settled nor renewed
	if got := admit(judge, "x"); got != store.LimitConcurrency {
		t.Fatalf("a third slot with two held: %q", got)
	}
	// Three leases pass, live renewing at every third of one.
	for range 9 {
		clock.Add((store.SlotLease / 3).Microseconds())
		if err := renewLive(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := admit(judge, "x"); got != "" {
		t.Fatalf("the dead replica's slot still held after three leases: %q", got)
	}
	if got := admit(judge, "y"); got != store.LimitConcurrency {
		t.Fatalf("the live replica's slot lost although renewed: %q", got)
	}
	if err := live.Settle(ctx, "key_lease", l, "a", 0); err != nil {
		t.Fatal(err)
	}
	if got := admit(judge, "y"); got != "" {
		t.Fatalf("a settled slot still held: %q", got)
	}
	// A settled slot is no longer renewed: renewing does not bring it back.
	if err := renewLive(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := judge.Client().ZCard(ctx, "sg:{key_lease}:slots").Result(); err != nil || n != 2 {
		t.Fatalf("slots held: %d %v, want x and y", n, err)
	}
}
