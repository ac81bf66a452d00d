package upstream

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// notified reads cl as a consumer that waits without a goroutine of its
// own does: Notify, then TryRecv until it is not ok, then wait for the
// next notification. It returns the responses (copies) and the end.
func notified(cl *Call) ([]*pb.ModelInferResponse, error) {
	wake := make(chan struct{}, 1)
	cl.Notify(NotifyFunc(func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}))
	defer cl.Notify(nil)
	var out []*pb.ModelInferResponse
	for {
		r, ok, err := cl.TryRecv()
		switch {
		case !ok:
			<-wake
		case err == io.EOF:
			return out, nil
		case err != nil:
			return out, err
		default:
			out = append(out, proto.CloneOf(r))
		}
	}
}

// TestNotify: many calls on one stream, each read only through Notify
// and TryRecv, get every response in order and their end; a call
// cancelled while its consumer waits notifies its end, and the engine
// stops it.
func TestNotify(t *testing.T) {
	e := startEngine(t, "")
	c := newTestClient(t, []string{e.addr}, &Options{MaxStreamsPerTarget: 1, HealthInterval: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	const n, per = 50, 10
	var wg sync.WaitGroup
	got := make([][]*pb.ModelInferResponse, n)
	errs := make([]error, n)
	for i := range n {
		cl, err := c.Start(ctx, repeatN(int32(100*i), per, 2))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { got[i], errs[i] = notified(cl) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		checkRepeat(t, got[i], int32(100*i), per)
	}

	// Cancelled while waiting: by its context, then by Cancel.
	for _, how := range []string{"context", "Cancel"} {
		cctx, ccancel := context.WithCancel(ctx)
		cl, err := c.Start(cctx, repeatN(0, 1000, 50))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := notified(cl)
			done <- err
		}()
		waitFor(t, "the request to run", func() bool { return e.srv.InFlight() == 1 })
		if how == "context" {
			ccancel()
		} else {
			cl.Cancel()
		}
		wantKind(t, <-done, KindCancelled)
		ccancel()
		waitFor(t, "the engine to stop the request", func() bool { return e.srv.InFlight() == 0 })
	}
}

// TestNotifyFinalWithEnd: a decoupled model's final response that
// carries data (echo's: the finish reason after the last word) wakes its
// consumer once, with the call already ended, so that the consumer relays
// it knowing it is the last (and is not woken again for the end).
func TestNotifyFinalWithEnd(t *testing.T) {
	e := startEngine(t, "")
	c := newTestClient(t, []string{e.addr}, &Options{HealthInterval: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := &pb.ModelInferRequest{ModelName: "echo"}
	tensorsToRequest(req, tensor.NewString("text_input", "one two three"), tensor.NewBool("stream", []int64{1}, []bool{true}))
	cl, err := c.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing is read until the end: each wake sees how many responses
	// are queued and whether the call has ended.
	type wake struct {
		queued int
		ended  bool
	}
	wakes := make(chan wake, 16)
	cl.Notify(NotifyFunc(func() {
		n, _ := cl.q.queued()
		select {
		case <-cl.Done():
			wakes <- wake{n, true}
		default:
			wakes <- wake{n, false}
		}
	}))
	defer cl.Notify(nil)
	var last wake
	for !last.ended {
		select {
		case last = <-wakes:
		case <-ctx.Done():
			t.Fatal("the call's end never woke its consumer")
		}
		if last.queued == 4 && !last.ended {
			t.Fatal("the final response woke its consumer before the call ended")
		}
	}
	if last.queued != 4 {
		t.Fatalf("the end woke the consumer with %d responses queued, want the 3 words and the final one", last.queued)
	}
	rs, err := readAll(ctx, cl)
	if err != nil || len(rs) != 4 || len(rs[3].GetOutputs()) < 2 {
		t.Fatalf("%d responses (%v), want 3 words and the final one with its finish reason", len(rs), err)
	}
	select {
	case w := <-wakes:
		t.Fatalf("woken again after the end: %+v", w)
	default:
	}
}
