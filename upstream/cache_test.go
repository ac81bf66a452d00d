package upstream

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestCacheSharesAndExpires(t *testing.T) {
	c := newCache[int](time.Minute)
	now := time.Unix(0, 0)
	c.now = func() time.Time { return now }
	var fetches atomic.Int32
	release := make(chan struct{})
	fetch := func(context.Context) (int, error) {
		fetches.Add(1)
		<-release
		return 42, nil
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if v, err := c.get(ctx, "k", fetch); v != 42 || err != nil {
				t.Errorf("get = %d, %v", v, err)
			}
		})
	}
	waitFor(t, "a fetch to start", func() bool { return fetches.Load() == 1 })
	close(release)
	wg.Wait()
	if n := fetches.Load(); n != 1 {
		t.Fatalf("%d fetches for 10 concurrent gets", n)
	}
	c.get(ctx, "k", fetch)
	if fetches.Load() != 1 {
		t.Fatal("cached answer fetched again")
	}
	now = now.Add(time.Minute)
	c.get(ctx, "k", fetch)
	if fetches.Load() != 2 {
		t.Fatal("expired answer not fetched again")
	}
	if v, ok := c.peek("k"); !ok || v != 42 {
		t.Fatalf("peek = %d, %v", v, ok)
	}
}

func TestCacheErrors(t *testing.T) {
	c := newCache[int](time.Minute)
	ctx := context.Background()
	boom := errors.New("boom")
	if _, err := c.get(ctx, "k", func(context.Context) (int, error) { return 0, boom }); err != boom {
		t.Fatalf("err = %v", err)
	}
	if _, ok := c.peek("k"); ok {
		t.Fatal("error cached")
	}
	if v, err := c.get(ctx, "k", func(context.Context) (int, error) { return 7, nil }); v != 7 || err != nil {
		t.Fatalf("get after error = %d, %v", v, err)
	}
}

// A waiter whose own context is live fetches again when the fetching
// caller gave up because of its context.
func TestCacheLeaderGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCache[int](time.Minute)
		leaderCtx, cancelLeader := context.WithCancel(context.Background())
		started := make(chan struct{})
		leaderDone := make(chan error, 1)
		go func() {
			_, err := c.get(leaderCtx, "k", func(ctx context.Context) (int, error) {
				close(started)
				<-ctx.Done()
				return 0, ctx.Err()
			})
			leaderDone <- err
		}()
		<-started
		got := make(chan int, 1)
		go func() {
			v, _ := c.get(context.Background(), "k", func(context.Context) (int, error) { return 9, nil })
			got <- v
		}()
		synctest.Wait() // the waiter blocks on the leader
		cancelLeader()
		if err := <-leaderDone; !errors.Is(err, context.Canceled) {
			t.Fatalf("leader err = %v", err)
		}
		if v := <-got; v != 9 {
			t.Fatalf("waiter got %d", v)
		}
	})
}
