package upstream

import (
	"context"
	"testing"
	"time"
)

// TestClose ends calls in flight with KindUnavailable at once, refuses new
// ones, and (through TestMain's leak check) leaves no goroutine behind.
func TestClose(t *testing.T) {
	e := startEngine(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, mode := range []CancelMode{CancelInband, CancelStream} {
		c, err := New([]string{e.addr}, withTestTransport(&Options{Cancel: mode, HealthInterval: 10 * time.Millisecond}))
		if err != nil {
			t.Fatal(err)
		}
		var calls []*Call
		for range 3 {
			cl, err := c.Start(ctx, repeatN(0, 5, 1000))
			if err != nil {
				t.Fatal(err)
			}
			calls = append(calls, cl)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		for _, cl := range calls {
			_, err := cl.Recv(ctx)
			wantKind(t, err, KindUnavailable)
		}
		_, err = c.Start(ctx, repeatN(0, 1, 0))
		wantKind(t, err, KindUnavailable)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "engine idle", func() bool { return e.srv.InFlight() == 0 })
}
