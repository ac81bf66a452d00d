package upstream

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestStalledConsumer puts a request whose consumer never reads on the same
// stream as requests read promptly. The fast ones must all complete, in
// order, while the stalled one is still unread; the stalled one must fail
// alone with KindTooSlow after the responses its queue held, and be
// cancelled upstream.
func TestStalledConsumer(t *testing.T) {
	const queue, fast, perFast = 8, 16, 40
	e := startEngine(t, "")
	c := newTestClient(t, []string{e.addr}, &Options{
		MaxStreamsPerTarget: 1, // everyone on one stream
		QueueSize:           queue,
		Cancel:              CancelInband,
		HealthInterval:      -1,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	run := func(withStall bool) (time.Duration, *Call) {
		var stalled *Call
		if withStall {
			var err error
			stalled, err = c.Start(ctx, repeatN(0, 1000, 0)) // floods at once
			if err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		var wg sync.WaitGroup
		for i := range fast {
			wg.Go(func() {
				base := int32(1000 * (i + 1))
				cl, err := c.Start(ctx, repeatN(base, perFast, 2))
				if err != nil {
					t.Error(err)
					return
				}
				rs, err := readAll(ctx, cl)
				if err != nil {
					t.Errorf("fast request %d: %v", i, err)
					return
				}
				checkRepeat(t, rs, base, perFast)
			})
		}
		wg.Wait()
		return time.Since(start), stalled
	}

	alone, _ := run(false)
	beside, stalled := run(true)
	t.Logf("%d fast requests x %d responses: %v alone, %v beside a stalled consumer", fast, perFast, alone, beside)
	if t.Failed() {
		return
	}
	if n := len(c.Stats().Targets[0].Streams); n != 1 {
		t.Fatalf("%d streams, want 1", n)
	}
	// The fast requests are done and the stalled consumer has not read yet.
	select {
	case <-stalled.Done():
	case <-ctx.Done():
		t.Fatal("stalled request never ended")
	}
	rs, err := readAll(ctx, stalled)
	wantKind(t, err, KindTooSlow)
	checkRepeat(t, rs, 0, queue)
	s := c.Stats()
	if s.QueueOverflows != 1 || s.CancelsInband != 1 || s.InFlight != 0 {
		t.Fatalf("stats %+v", s)
	}
	waitFor(t, 5*time.Second, "engine idle", func() bool { return e.srv.InFlight() == 0 })
}
