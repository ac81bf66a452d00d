package upstream

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestUncheckedTargetWaits: right after start, before the first health
// check, a client whose first target is a dead address is ready (its
// ServerReady finds a live engine, as a gateway's readiness probe does),
// and every request it then serves succeeds: metadata lookups, which
// have no failover, and calls. A target no check has answered yet is
// not chosen while one that a check admitted exists.
func TestUncheckedTargetWaits(t *testing.T) {
	a, b := startEngine(t, ""), startEngine(t, "")
	dead := deadAddr(t)
	c := newTestClient(t, []string{dead, a.addr, b.addr}, &Options{HealthInterval: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), waitHang)
	defer cancel()
	if ready, err := c.ServerReady(ctx); !ready {
		t.Fatalf("ServerReady: %v, %v", ready, err)
	}
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			if _, err := c.ModelConfig(ctx, "repeat_int32", ""); err != nil {
				t.Errorf("ModelConfig %d: %v", i, err)
			}
			if _, err := c.ModelMetadata(ctx, "repeat_int32", ""); err != nil {
				t.Errorf("ModelMetadata %d: %v", i, err)
			}
			if _, err := c.ServerMetadata(ctx); err != nil {
				t.Errorf("ServerMetadata %d: %v", i, err)
			}
			cl, err := c.Start(ctx, repeatN(int32(10*i), 2, 0))
			if err != nil {
				t.Errorf("Start %d: %v", i, err)
				return
			}
			rs, err := readAll(ctx, cl)
			if err != nil {
				t.Errorf("call %d on %s: %v", i, cl.Target(), err)
				return
			}
			checkRepeat(t, rs, int32(10*i), 2)
		})
	}
	wg.Wait()
}

// TestPickPrefersChecked: with health checks on, pick never chooses a
// healthy target no check has reached while a checked healthy one
// exists, even when the checked one carries more requests; it still
// chooses it over an ejected target, and without health checks an
// unchecked target is as good as a checked one.
func TestPickPrefersChecked(t *testing.T) {
	mk := func(addr string, checked, healthy bool, outstanding int64) *target {
		tg := &target{addr: addr}
		tg.checked.Store(checked)
		tg.healthy.Store(healthy)
		tg.outstanding.Store(outstanding)
		return tg
	}
	picks := func(interval time.Duration, ts ...*target) map[string]int {
		c := &Client{opts: Options{HealthInterval: interval}}
		c.targets.Store(&ts)
		got := map[string]int{}
		for range 2 * len(ts) { // every rotation of the start
			tg, release, err := c.pick(nil)
			if err != nil {
				t.Fatal(err)
			}
			release()
			got[tg.addr]++
		}
		return got
	}
	if got := picks(time.Second, mk("unchecked", false, true, 0), mk("checked", true, true, 5)); got["unchecked"] != 0 {
		t.Errorf("an unchecked target chosen over a checked healthy one: %v", got)
	}
	if got := picks(time.Second, mk("unchecked", false, true, 0), mk("ejected", true, false, 0)); got["ejected"] != 0 {
		t.Errorf("an ejected target chosen over an unchecked one: %v", got)
	}
	if got := picks(0, mk("unchecked", false, true, 0), mk("checked", true, true, 5)); got["checked"] != 0 {
		t.Errorf("without health checks, the busier target chosen: %v", got)
	}
}
