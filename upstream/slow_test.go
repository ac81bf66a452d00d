package upstream

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
	"github.com/streamgate/streamgate/upstream/budget"
)

// slowClient is a client for the slow-consumer tests: one stream for
// everything, in-band cancels, a small own allowance per request and the
// injected clock clk for the stall check.
func slowClient(t *testing.T, addr string, clk *fakeClock, mem *budget.Budget) *Client {
	c := newTestClient(t, []string{addr}, &Options{
		MaxStreamsPerTarget: 1,
		Cancel:              CancelInband,
		HealthInterval:      -1,
		QueueBytes:          4 << 10,
		Memory:              mem,
	})
	c.lim.now = clk.now // before any traffic: the reader reads it
	return c
}

// TestSlowReaderFinishes: a client that reads 500 responses, then pauses
// for 2 s (on the injected clock, while the engine keeps producing), and
// so on through 20,000 responses, gets every one of them in order, though
// it is far behind the engine all along.
func TestSlowReaderFinishes(t *testing.T) {
	const total, burst = 20000, 500
	e := startEngine(t, "")
	clk := newFakeClock()
	mem := budget.New(64 << 20)
	c := slowClient(t, e.addr, clk, mem)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	cl, err := c.Start(ctx, repeatN(0, total, 0))
	if err != nil {
		t.Fatal(err)
	}
	maxQueued := 0
	for i := 0; ; i++ {
		if i%burst == 0 && i > 0 {
			// Pause: let the engine run ahead (until it is done or far
			// ahead), and let 2 s pass.
			waitFor(t, "the engine to run ahead", func() bool {
				n, _ := cl.q.queued()
				return n >= 2*burst || isDone(cl)
			})
			n, _ := cl.q.queued()
			maxQueued = max(maxQueued, n)
			clk.advance(2 * time.Second)
		}
		r, err := cl.Recv(ctx)
		if errors.Is(err, io.EOF) {
			if i != total {
				t.Fatalf("%d responses, want %d", i, total)
			}
			break
		}
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if out, idx := output(t, r, "OUT"), output(t, r, "IDX"); out != int64(i) || idx != int64(i) {
			t.Fatalf("response %d: OUT=%d IDX=%d", i, out, idx)
		}
	}
	s := c.Stats()
	t.Logf("at most %d responses waited; %d KiB borrowed at the peak", maxQueued, s.MemoryPeak>>10)
	if maxQueued < 2*burst || s.MemoryPeak == 0 {
		t.Fatalf("the reader was never far behind (%d queued, %d borrowed): the test proves nothing", maxQueued, s.MemoryPeak)
	}
	if s.QueueOverflows != 0 || s.Behind != 1 || s.MemoryUsed != 0 || s.InFlight != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func isDone(cl *Call) bool {
	select {
	case <-cl.Done():
		return true
	default:
		return false
	}
}

// TestStalledReaderFailsAlone: a reader that takes nothing for the stall
// timeout while responses wait fails alone with KindTooSlow, after the
// responses queued before, and is cancelled upstream; a request read
// promptly on the same stream completes.
func TestStalledReaderFailsAlone(t *testing.T) {
	e := startEngine(t, "")
	clk := newFakeClock()
	c := slowClient(t, e.addr, clk, budget.New(64<<20))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	stalled, err := c.Start(ctx, repeatN(0, 100000, 1)) // one response a millisecond
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		r, err := stalled.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if out := output(t, r, "OUT"); out != int64(i) {
			t.Fatalf("OUT %d, want %d", out, i)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		cl, err := c.Start(ctx, repeatN(5000, 200, 1))
		if err != nil {
			t.Error(err)
			return
		}
		rs, err := readAll(ctx, cl)
		if err != nil {
			t.Errorf("prompt request: %v", err)
			return
		}
		checkRepeat(t, rs, 5000, 200)
	})
	// The stalled reader falls behind, then the stall timeout passes.
	waitFor(t, "responses to wait", func() bool { n, _ := stalled.q.queued(); return n >= 20 })
	clk.advance(29 * time.Second)
	// A push after the advance reads the clock under the queue's lock
	// before it counts: one more queued response has seen 29 s.
	n0, _ := stalled.q.queued()
	waitFor(t, "a push after 29 s", func() bool { n, _ := stalled.q.queued(); return n > n0 || isDone(stalled) })
	if isDone(stalled) {
		t.Fatal("failed before the stall timeout")
	}
	clk.advance(time.Second)
	select {
	case <-stalled.Done():
	case <-ctx.Done():
		t.Fatal("the stalled request never ended")
	}
	wg.Wait()
	rs, err := readAll(ctx, stalled)
	wantKind(t, err, KindTooSlow)
	if !strings.Contains(err.Error(), "took no response for 30s") {
		t.Fatalf("error %q does not say why", err)
	}
	checkRepeatFrom(t, append(make([]*pb.ModelInferResponse, 10), rs...), 0, 10+len(rs))
	s := c.Stats()
	if s.Stalled != 1 || s.OverBudget != 0 || s.CancelsInband != 1 || s.MemoryUsed != 0 {
		t.Fatalf("stats %+v", s)
	}
	waitFor(t, "engine idle", func() bool { return e.srv.InFlight() == 0 })
}

// TestBudgetRefusal: when the shared memory budget is spent, the request
// whose queue must grow beyond its own allowance fails with KindBudget,
// saying so; a request that keeps up completes; everything borrowed is
// given back.
func TestBudgetRefusal(t *testing.T) {
	e := startEngine(t, "")
	clk := newFakeClock()
	mem := budget.New(64 << 10)
	c := slowClient(t, e.addr, clk, mem)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	hog, err := c.Start(ctx, repeatN(0, 100000, 0)) // floods; nobody reads
	if err != nil {
		t.Fatal(err)
	}
	cl, err := c.Start(ctx, repeatN(7000, 300, 1))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := readAll(ctx, cl)
	if err != nil {
		t.Fatalf("prompt request: %v", err)
	}
	checkRepeat(t, rs, 7000, 300)
	select {
	case <-hog.Done():
	case <-ctx.Done():
		t.Fatal("the hog never ended")
	}
	if mem.Peak() > mem.Limit() {
		t.Fatalf("borrowed %d of %d", mem.Peak(), mem.Limit())
	}
	rs, err = readAll(ctx, hog)
	wantKind(t, err, KindBudget)
	if !strings.Contains(err.Error(), "memory for waiting responses (64 KiB) is spent") || len(rs) < 100 {
		t.Fatalf("error %q after %d responses", err, len(rs))
	}
	hog.Cancel()
	s := c.Stats()
	if s.OverBudget != 1 || s.Stalled != 0 || s.MemoryUsed != 0 {
		t.Fatalf("stats %+v", s)
	}
	waitFor(t, "engine idle", func() bool { return e.srv.InFlight() == 0 })
}

// TestStalledTextConsumerCompletes: a text stream whose consumer does not
// read until the request has ended upstream (no time passes) does not
// fail: the text read afterwards is complete and in order.
func TestStalledTextConsumerCompletes(t *testing.T) {
	const words = 3000
	e := startEngine(t, "")
	c := slowClient(t, e.addr, newFakeClock(), budget.New(64<<20))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ws := make([]string, words)
	for i := range ws {
		ws[i] = "wörd" + string(rune('a'+i%26)) + "€"
	}
	text := strings.Join(ws, " ")
	req := &pb.ModelInferRequest{ModelName: "echo"}
	tensorsToRequest(req, tensor.NewString("text_input", text), tensor.NewBool("stream", []int64{1}, []bool{true}))
	textCall, err := c.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-textCall.Done():
	case <-ctx.Done():
		t.Fatal("the request never ended")
	}
	rs, err := readAll(ctx, textCall)
	if err != nil {
		t.Fatalf("text request failed: %v", err)
	}
	var got strings.Builder
	for _, r := range rs {
		got.WriteString(respText(t, r))
	}
	if got.String() != text {
		t.Fatalf("text differs: got %d bytes, want %d", got.Len(), len(text))
	}
	if s := c.Stats(); s.QueueOverflows != 0 || s.MemoryUsed != 0 {
		t.Fatalf("stats %+v", s)
	}
}
