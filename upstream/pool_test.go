package upstream

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestStreamPool checks lazy opening up to the cap, the per-stream request
// cap, and idle streams closing.
func TestStreamPool(t *testing.T) {
	e := startEngine(t, "")
	c := newTestClient(t, []string{e.addr}, &Options{
		MaxStreamsPerTarget:  2,
		MaxRequestsPerStream: 3,
		IdleStreamTimeout:    50 * time.Millisecond,
		HealthInterval:       -1,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if s := c.Stats(); s.StreamsOpen != 0 {
		t.Fatalf("%d streams before any request", s.StreamsOpen)
	}
	var calls []*Call
	for range 6 {
		cl, err := c.Start(ctx, repeatN(0, 1, 300))
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, cl)
	}
	s := c.Stats()
	if s.StreamsOpen != 2 || s.InFlight != 6 || s.Targets[0].Streams[0].InFlight != 3 {
		t.Fatalf("stats with 6 requests: %+v", s)
	}
	_, err := c.Start(ctx, repeatN(0, 1, 0))
	wantKind(t, err, KindRejected)
	for _, cl := range calls {
		if _, err := readAll(ctx, cl); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "idle streams to close", func() bool { return c.Stats().StreamsOpen == 0 })
	// A closed pool opens again.
	cl, err := c.Start(ctx, repeatN(4, 2, 0))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := readAll(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	checkRepeat(t, rs, 4, 2)
	if s := c.Stats(); s.StreamBreaks != 0 || s.Retries != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestStreamFill: requests fill the open streams up to StreamFill each
// before another stream opens, and spread evenly over the open ones; the
// default fill is a quarter of MaxRequestsPerStream.
func TestStreamFill(t *testing.T) {
	e := startEngine(t, "")
	for _, o := range []*Options{
		{MaxRequestsPerStream: 8, StreamFill: 2, HealthInterval: -1},
		{MaxRequestsPerStream: 8, HealthInterval: -1},
	} {
		c := newTestClient(t, []string{e.addr}, o)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var calls []*Call
		for i := range 5 {
			cl, err := c.Start(ctx, repeatN(0, 1, 60000))
			if err != nil {
				t.Fatal(err)
			}
			calls = append(calls, cl)
			// 1 and 2 on the first stream, 3 opens a second, 4 joins
			// it, 5 opens a third.
			if want := 1 + i/2; c.Stats().StreamsOpen != want {
				t.Fatalf("fill %d: %d streams open with %d requests, want %d: %+v", o.StreamFill, c.Stats().StreamsOpen, i+1, want, c.Stats())
			}
		}
		for _, cl := range calls {
			cl.Cancel()
		}
		cancel()
	}
}

// TestDNSTarget resolves "dns:///localhost:port". Addresses that do not
// answer (e.g. ::1) fail over to the ones that do.
func TestDNSTarget(t *testing.T) {
	e := startEngine(t, "")
	_, port, _ := splitHostPort(e.addr)
	c := newTestClient(t, []string{"dns:///localhost:" + port}, &Options{HealthInterval: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			cl, err := c.Start(ctx, repeatN(int32(i), 1, 0))
			if err != nil {
				t.Error(err)
				return
			}
			rs, err := readAll(ctx, cl)
			if err != nil {
				t.Error(err)
				return
			}
			checkRepeat(t, rs, int32(i), 1)
		})
	}
	wg.Wait()
	if s := c.Stats(); len(s.Targets) == 0 || s.Targets[0].Addr == "" {
		t.Fatalf("stats %+v", s)
	}
	md, err := c.ServerMetadata(ctx)
	if err != nil || len(md.GetExtensions()) == 0 {
		t.Fatalf("ServerMetadata = %v, %v", md, err)
	}
}

// A target that leaves dns and is reaped while a request is between
// choosing it and being placed on it keeps its connection until that
// request is done: the request is served there, with no retry burned.
func TestReapWaitsForPlacement(t *testing.T) {
	e := startEngine(t, "")
	c := newTestClient(t, []string{e.addr}, &Options{HealthInterval: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.testHookPicked = func(tg *target) {
		// What the maintenance goroutine may do at this very moment.
		tg.removed.Store(true)
		c.reap()
	}
	cl, err := c.Start(ctx, repeatN(0, 2, 0))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := readAll(ctx, cl)
	if err != nil {
		t.Fatalf("request on a target reaped before placement: %v", err)
	}
	checkRepeat(t, rs, 0, 2)
	if s := c.Stats(); s.Retries != 0 {
		t.Fatalf("stats %+v", s)
	}
	c.reap() // now it carries nothing: it goes
	if n := len(c.targetList()); n != 0 {
		t.Fatalf("%d targets left after the reap", n)
	}
}
