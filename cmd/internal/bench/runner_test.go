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
