package upstream

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestCancelOne cancels one of several requests sharing a client, in each
// cancel mode that tells the engine, and checks that the engine stops it
// while the others complete untouched.
func TestCancelOne(t *testing.T) {
	for _, mode := range []CancelMode{CancelInband, CancelStream} {
		t.Run(mode.String(), func(t *testing.T) {
			const n, per, victim = 8, 20, 3
			e := startEngine(t, "")
			c := newTestClient(t, []string{e.addr}, &Options{MaxStreamsPerTarget: 1, Cancel: mode, HealthInterval: -1})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			calls := make([]*Call, n)
			for i := range calls {
				cl, err := c.Start(ctx, repeatN(int32(100*i), per, 10))
				if err != nil {
					t.Fatal(err)
				}
				calls[i] = cl
			}
			if r, err := calls[victim].Recv(ctx); err != nil || output(t, r, "OUT") != 100*victim {
				t.Fatalf("victim's first response %v, %v", r, err)
			}
			waitFor(t, "all requests running", func() bool { return e.srv.InFlight() == n })
			s := c.Stats()
			wantStreams := 1
			if mode == CancelStream {
				wantStreams = n
			}
			if s.StreamsOpen != wantStreams {
				t.Fatalf("%d streams, want %d", s.StreamsOpen, wantStreams)
			}

			t0 := time.Now()
			calls[victim].Cancel()
			waitFor(t, "engine to stop the request", func() bool { return e.srv.InFlight() < n })
			t.Logf("cancel latency (%s): %v from Cancel to engine InFlight dropping", mode, time.Since(t0))
			calls[victim].Cancel() // idempotent
			_, err := calls[victim].Recv(ctx)
			wantKind(t, err, KindCancelled)

			var wg sync.WaitGroup
			for i, cl := range calls {
				if i == victim {
					continue
				}
				wg.Go(func() {
					rs, err := readAll(ctx, cl)
					if err != nil {
						t.Errorf("request %d: %v", i, err)
						return
					}
					checkRepeat(t, rs, int32(100*i), per)
				})
			}
			wg.Wait()
			waitFor(t, "engine idle", func() bool { return e.srv.InFlight() == 0 })
			s = c.Stats()
			if s.CancelsInband+s.CancelsStream != 1 || s.StreamBreaks != 0 || s.Retries != 0 || s.InFlight != 0 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// TestContextEnds checks that Start's context bounds the call: a
// cancelled context gives KindCancelled, a deadline KindDeadline, and the
// engine stops the request either way.
func TestContextEnds(t *testing.T) {
	e := startEngine(t, "")
	c := newTestClient(t, []string{e.addr}, &Options{HealthInterval: -1})
	bg, cancelBg := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelBg()

	ctx, cancel := context.WithCancel(bg)
	cl, err := c.Start(ctx, repeatN(0, 100, 20))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Recv(bg); err != nil {
		t.Fatal(err)
	}
	cancel()
	_, err = cl.Recv(bg)
	wantKind(t, err, KindCancelled)
	waitFor(t, "engine idle", func() bool { return e.srv.InFlight() == 0 })

	ctx, cancel = context.WithTimeout(bg, 100*time.Millisecond)
	defer cancel()
	cl, err = c.Start(ctx, repeatN(0, 100, 20))
	if err != nil {
		t.Fatal(err)
	}
	_, err = readAll(bg, cl)
	wantKind(t, err, KindDeadline)
	waitFor(t, "engine idle", func() bool { return e.srv.InFlight() == 0 })

	// Recv's own context only bounds the wait.
	cl, err = c.Start(bg, repeatN(0, 2, 200))
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(bg, 10*time.Millisecond)
	defer cancelShort()
	if _, err := cl.Recv(short); err != context.DeadlineExceeded {
		t.Fatalf("Recv with a short context: %v", err)
	}
	rs, err := readAll(bg, cl)
	if err != nil {
		t.Fatal(err)
	}
	checkRepeat(t, rs, 0, 2)
}

// TestCancelNone checks that CancelNone stops delivery but leaves the
// request running upstream, its late responses dropped.
func TestCancelNone(t *testing.T) {
	e := startEngine(t, "")
	c := newTestClient(t, []string{e.addr}, &Options{Cancel: CancelNone, HealthInterval: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := c.Start(ctx, repeatN(0, 5, 20))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Recv(ctx); err != nil {
		t.Fatal(err)
	}
	cl.Cancel()
	_, err = cl.Recv(ctx)
	wantKind(t, err, KindCancelled)
	if e.srv.InFlight() != 1 {
		t.Fatalf("engine in flight %d, want the request still running", e.srv.InFlight())
	}
	waitFor(t, "engine idle", func() bool { return e.srv.InFlight() == 0 })
	waitFor(t, "late responses dropped", func() bool { return c.Stats().Dropped >= 4 })
	if s := c.Stats(); s.CancelsNone != 1 || s.InFlight != 0 {
		t.Fatalf("stats %+v", s)
	}
}
