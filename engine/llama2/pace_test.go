package llama2

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamgate/streamgate/engine/backend"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// gatedSleep replaces a backend's pacing wait: each wait reports its
// duration on waits and lasts until the test sends on open.
type gatedSleep struct {
	waits chan time.Duration
	open  chan struct{}
}

func gate(b *Backend) *gatedSleep {
	g := &gatedSleep{waits: make(chan time.Duration), open: make(chan struct{})}
	b.sleep = func(ctx context.Context, d time.Duration) bool {
		select {
		case g.waits <- d:
		case <-ctx.Done():
			return false
		}
		select {
		case <-g.open:
			return true
		case <-ctx.Done():
			return false
		}
	}
	return g
}

// next returns the duration of the next wait, failing the test if none
// starts within 10 s (a backend that does not pace would hang it).
func (g *gatedSleep) next(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-g.waits:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("no pacing wait started")
		return 0
	}
}

func delayed(c call, ms int64) *backend.Request {
	req := c.request()
	req.Parameters = map[string]*pb.InferParameter{
		paramDelay: {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: ms}},
	}
	return req
}

// TestDelayPacesOnlyItsOwnSequence: a request with delay_ms waits before
// each streamed piece, one piece per wait, while an undelayed request
// batched with it runs from start to finish without waiting.
func TestDelayPacesOnlyItsOwnSequence(t *testing.T) {
	b := cycle(t, 4096, map[string]string{paramMaxSequences: "2"})
	var batched atomic.Bool // a pass ran with both sequences holding KV caches
	b.onPass = func(int64) {
		if b.slotsInUse.Load() == 2 {
			batched.Store(true)
		}
	}
	g := gate(b)

	ctxA, cancelA := context.WithCancel(t.Context())
	recA := &recorder{t: t}
	doneA := make(chan error, 1)
	go func() {
		resp, err := b.Execute(ctxA, delayed(call{stream: true, params: `{"temperature":0,"max_tokens":100000}`}, 250), recA)
		if resp != nil {
			t.Errorf("A answered after cancellation: %v", resp)
		}
		doneA <- err
	}()
	// A has a piece ready and waits before sending it.
	if d := g.next(t); d != 250*time.Millisecond {
		t.Fatalf("A waits %v, want 250ms", d)
	}

	// B, undelayed, runs to its end while A's first piece waits.
	res := run(t, b, call{stream: true, params: `{"temperature":0,"max_tokens":5}`})
	if res.streamed() != "abcda" || len(res.pieces) != 5 {
		t.Errorf("B streamed %q", res.pieces)
	}
	if got := recA.sent(); len(got) != 0 {
		t.Fatalf("A sent %q before its wait ended", got)
	}
	if !batched.Load() {
		t.Error("A and B never shared a forward pass")
	}

	// Each wait lets exactly one piece through (the next wait comes after
	// the piece's Send).
	for i := 1; i <= 5; i++ {
		g.open <- struct{}{}
		g.next(t)
		if got := recA.sent(); len(got) != i {
			t.Fatalf("after %d waits A sent %d pieces: %q", i, len(got), got)
		}
	}
	if got := strings.Join(recA.sent(), ""); got != "abcda" {
		t.Errorf("A streamed %q", got)
	}
	// Cancelled while it waits, A ends and frees its KV cache.
	cancelA()
	if err := <-doneA; err != nil {
		t.Errorf("A: %v", err)
	}
	waitFor(t, "the KV slots to be freed", func() bool { return b.slotsInUse.Load() == 0 })
}

// TestDelayWholeAnswer: a non-streaming request waits delay_ms per output
// token before its answer.
func TestDelayWholeAnswer(t *testing.T) {
	b := scripted(t, 64, bytesChain("abcdefgh"), nil)
	g := gate(b)
	done := make(chan result, 1)
	go func() {
		resp, err := b.Execute(t.Context(), delayed(call{params: `{"temperature":0,"max_tokens":4}`}, 10), &recorder{t: t})
		if err != nil {
			t.Error(err)
		}
		done <- decodeFinal(t, resp)
	}()
	if d := g.next(t); d != 40*time.Millisecond {
		t.Errorf("whole answer of 4 tokens waits %v, want 40ms", d)
	}
	g.open <- struct{}{}
	if res := <-done; res.text != "abcd" {
		t.Errorf("answer %q", res.text)
	}

}

func TestDelayBounds(t *testing.T) {
	b := scripted(t, 16, bytesChain("ab"), nil)
	for _, tc := range []struct {
		p    *pb.InferParameter
		want string
	}{
		{&pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: -1}}, "got -1"},
		{&pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: MaxDelayMs + 1}}, "got 10001"},
		{&pb.InferParameter{ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: 1 << 63}}, "got 9223372036854775808"},
		{&pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: "5"}}, `got "5"`},
		{&pb.InferParameter{ParameterChoice: &pb.InferParameter_DoubleParam{DoubleParam: 1.5}}, "got 1.5"},
	} {
		req := call{params: greedy}.request()
		req.Parameters = map[string]*pb.InferParameter{paramDelay: tc.p}
		_, err := b.Execute(t.Context(), req, &recorder{t: t})
		if err == nil || !strings.Contains(err.Error(), "llama2: parameter delay_ms must be an integer between 0 and 10000, "+tc.want) {
			t.Errorf("%v: err = %v", tc.p, err)
		}
	}
	req := call{params: greedy}.request()
	req.Parameters = map[string]*pb.InferParameter{paramDelay: {ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: 0}}}
	if _, err := b.Execute(t.Context(), req, &recorder{t: t}); err != nil {
		t.Errorf("delay_ms 0 as uint64: %v", err)
	}
}
