package upstream

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// TestTenThousand runs 10,000 concurrent repeat_int32 requests through one
// client to one engine and checks every response, in order, and that they
// shared at most 64 streams. Every request waits firstDelay before its first
// response, so that all of them are in flight at once.
func TestTenThousand(t *testing.T) {
	const n, perReq, firstDelay = 10000, 2, 1500
	e := startEngine(t, "")
	c := newTestClient(t, []string{e.addr}, &Options{HealthInterval: -1})
	// No deadline of its own: at load 20-30 on two cores under the race
	// detector, 10,000 requests take minutes; the test binary's -timeout
	// catches a hang.
	ctx := t.Context()

	var maxStreams, maxInFlight atomic.Int64
	sampleDone := make(chan struct{})
	stopSample := make(chan struct{})
	go func() {
		defer close(sampleDone)
		for {
			s := c.Stats()
			if int64(s.StreamsOpen) > maxStreams.Load() {
				maxStreams.Store(int64(s.StreamsOpen))
			}
			if int64(s.InFlight) > maxInFlight.Load() {
				maxInFlight.Store(int64(s.InFlight))
			}
			select {
			case <-stopSample:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()

	var wg sync.WaitGroup
	var failed atomic.Int64
	start := time.Now()
	calls := make([]*Call, n)
	for i := range calls {
		delays := make([]uint32, perReq)
		delays[0] = firstDelay
		cl, err := c.Start(ctx, repeatDelays(int32(i*10), delays))
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		calls[i] = cl
	}
	started := time.Since(start)
	for i, cl := range calls {
		wg.Go(func() {
			base := int32(i * 10)
			rs, err := readAll(ctx, cl)
			if err != nil {
				failed.Add(1)
				t.Errorf("request %d: %v", i, err)
				return
			}
			checkRepeat(t, rs, base, perReq)
		})
	}
	wg.Wait()
	close(stopSample)
	<-sampleDone
	s := c.Stats()
	t.Logf("%d requests x %d responses in %v (all started in %v); max streams %d, max in flight %d",
		n, perReq, time.Since(start), started, maxStreams.Load(), maxInFlight.Load())
	if failed.Load() > 0 {
		t.Fatalf("%d requests failed", failed.Load())
	}
	if maxStreams.Load() > 64 || s.StreamsOpen > 64 {
		t.Fatalf("used %d streams, want <= 64", maxStreams.Load())
	}
	if maxInFlight.Load() < n/2 && started < firstDelay*time.Millisecond/2 {
		t.Errorf("at most %d requests were in flight at once", maxInFlight.Load())
	}
	if s.InFlight != 0 {
		t.Fatalf("%d requests still in flight", s.InFlight)
	}
	if s.Started != n || s.Retries != 0 || s.StreamBreaks != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestEnds covers how a request can end: zero responses, n responses, a
// non-decoupled model, in-band errors.
func TestEnds(t *testing.T) {
	e := startEngine(t, "")
	c := newTestClient(t, []string{e.addr}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	t.Run("zero responses", func(t *testing.T) {
		for range 3 {
			cl, err := c.Start(ctx, squareRequest(0))
			if err != nil {
				t.Fatal(err)
			}
			if r, err := cl.Recv(ctx); !errors.Is(err, io.EOF) {
				t.Fatalf("Recv = %v, %v; want io.EOF", r, err)
			}
			if _, err := cl.Recv(ctx); !errors.Is(err, io.EOF) {
				t.Fatalf("second Recv = %v; want io.EOF again", err)
			}
		}
	})
	t.Run("square", func(t *testing.T) {
		cl, err := c.Start(ctx, squareRequest(5))
		if err != nil {
			t.Fatal(err)
		}
		rs, err := readAll(ctx, cl)
		if err != nil || len(rs) != 5 {
			t.Fatalf("got %d responses, %v", len(rs), err)
		}
		for _, r := range rs {
			if v := output(t, r, "OUT"); v != 5 {
				t.Fatalf("OUT = %d", v)
			}
		}
	})
	t.Run("caller id kept", func(t *testing.T) {
		req := repeatN(7, 1, 0)
		req.Id = "mine"
		cl, err := c.Start(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if cl.ID() == "mine" || req.Id != cl.ID() {
			t.Fatalf("upstream id %q, request id %q", cl.ID(), req.Id)
		}
		rs, err := readAll(ctx, cl)
		if err != nil || len(rs) != 1 || rs[0].GetId() != "mine" {
			t.Fatalf("responses %v, %v", rs, err)
		}
	})
	t.Run("non-decoupled", func(t *testing.T) {
		req := &pb.ModelInferRequest{ModelName: "identity_int32"}
		tensorsToRequest(req, tensorInt32("INPUT0", 1, 2, 3))
		cl, err := c.Start(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		// Not req's parameters: Start owns req, and the stream's reader
		// drops them once a response arrives (a race with this read).
		if cl.decoupled {
			t.Fatal("empty final response requested from a non-decoupled model")
		}
		r, err := cl.Recv(ctx)
		if err != nil || len(r.GetOutputs()) != 1 || r.GetOutputs()[0].GetName() != "OUTPUT0" {
			t.Fatalf("Recv = %v, %v", r, err)
		}
		if _, err := cl.Recv(ctx); !errors.Is(err, io.EOF) {
			t.Fatalf("second Recv = %v; want io.EOF", err)
		}
	})
	t.Run("model error", func(t *testing.T) {
		cl, err := c.Start(ctx, repeatRequest([]int32{1}, []uint32{1, 2}, 0))
		if err != nil {
			t.Fatal(err)
		}
		_, err = readAll(ctx, cl)
		e := wantKind(t, err, KindModel)
		if e.Message != "expected IN and DELAY shape to match, got [1] and [2]" {
			t.Fatalf("message %q", e.Message)
		}
	})
	t.Run("unknown model", func(t *testing.T) {
		cl, err := c.Start(ctx, &pb.ModelInferRequest{ModelName: "nope"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = readAll(ctx, cl)
		if e := wantKind(t, err, KindModel); e.Code != codes.NotFound {
			t.Fatalf("code %v for %q", e.Code, e.Message)
		}
	})
	if s := c.Stats(); s.InFlight != 0 || s.Retries != 0 {
		t.Fatalf("stats %+v", s)
	}
}
