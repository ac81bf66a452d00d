package bench

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/streamgate/streamgate/engine/backend"
)

// heldTransport answers each request with one response after hold, or
// never when hold is 0 (the request then ends with the run).
type heldTransport struct{ hold time.Duration }

func (h heldTransport) do(ctx context.Context, _ int32, s *stream) error {
	s.begin()
	if h.hold == 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	if !backend.Sleep(ctx, h.hold) {
		return ctx.Err()
	}
	s.response()
	return nil
}

func (heldTransport) close() {}

// TestOpenLoop checks the open loop's schedule and its overload count on
// a fake clock (synctest), so that no machine is too slow for it: a start
// every 5ms for 300ms, at most 8 in flight.
func TestOpenLoop(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hold     time.Duration
		requests int64 // completed in the window
		overload int64
	}{
		// 20ms each: 4 in flight at most. Starts at 0, 5, ..., 275ms end
		// inside the window: 56.
		{"keeps up", 20 * time.Millisecond, 56, 0},
		// Never answered: the starts at 0..35ms take the 8 slots, the
		// other 52 due in the window find none free.
		{"never answers", 0, 0, 52},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var serial atomic.Int32
				r := run(context.Background(), runSpec{name: "held", tr: heldTransport{tc.hold}, conc: 8, rate: 200,
					duration: 300 * time.Millisecond, serial: &serial})
				if r.Requests != tc.requests || r.Errors["overload"] != tc.overload || len(r.Errors) > 1 {
					t.Errorf("requests %d, errors %v; want %d requests, %d overload", r.Requests, r.Errors, tc.requests, tc.overload)
				}
			})
		})
	}
}

// TestClosedLoopWindow checks what a closed-loop run counts, on a fake
// clock: 2 clients, each request answered after 20ms, a 100ms warm-up,
// then a 300ms window.
func TestClosedLoopWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var serial atomic.Int32
		r := run(context.Background(), runSpec{name: "held", tr: heldTransport{20 * time.Millisecond}, conc: 2,
			warmup: 100 * time.Millisecond, duration: 300 * time.Millisecond, serial: &serial})
		// Each client's requests end at 20, 40, ... ms: those ending at
		// 100..380 are in the window (15 each); time to first response
		// counts only the ones that also started in it (100..360: 14 each).
		if r.Requests != 30 || r.Responses != 30 || r.TTFT.N != 28 || len(r.Errors) != 0 || r.Seconds != 0.3 {
			t.Errorf("requests %d, responses %d, ttft n %d, errors %v, %vs", r.Requests, r.Responses, r.TTFT.N, r.Errors, r.Seconds)
		}
	})
}
