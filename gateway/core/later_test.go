package core

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/upstream"
)

// wsRecorder is a WSSink whose data frames a test reads back.
type wsRecorder struct {
	mu   sync.Mutex
	sent []string
}

func (w *wsRecorder) sink(srv *Server) *WSSink {
	return &WSSink{Events: srv.metrics.Events.With("ws"), Emit: func(p []byte) error {
		w.mu.Lock()
		w.sent = append(w.sent, string(p))
		w.mu.Unlock()
		return nil
	}}
}

func (w *wsRecorder) got() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.sent...)
}

// cancelledCall says whether the call a feed feeds ended other than by
// completing (cancelled by finish, or by its context).
func cancelledCall(f *upstream.Feed) bool {
	ended, err := f.Ended()
	return ended && err != io.EOF
}

// TestRelayLater: a request relayed without a goroutine of its own sends
// each batch of ready responses as it arrives, in order, and finishes
// once its call ends: completed, or cancelled by its client (its context)
// while it waits. While it waits no goroutine of its runs.
func TestRelayLater(t *testing.T) {
	for _, tc := range []struct {
		name      string
		end       func(c *upstream.Feed, cancel context.CancelFunc)
		want      []string
		wantErr   error
		cancelled bool
	}{
		{"completes", func(c *upstream.Feed, _ context.CancelFunc) { c.End(io.EOF) }, []string{"begin", "a", "b", "c", "end", "[DONE]"}, nil, false},
		{"client leaves", func(_ *upstream.Feed, cancel context.CancelFunc) { cancel() }, []string{"begin", "a", "b", "c"}, ErrClientGone, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				up, calls := feeds(1)
				srv := testServer(up, nil, nil)
				var rec wsRecorder
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				f, err := srv.Begin(ctx, nil, "", &Job{Req: &pb.ModelInferRequest{ModelName: "m"}, Tr: nameEvents{}, Op: OpGenerate}, rec.sink(srv))
				if err != nil {
					t.Fatalf("begin: %v", err)
				}
				c := <-calls
				ended := make(chan error, 1)
				f.RelayLater(func(err error) { ended <- err })
				synctest.Wait() // no goroutine waits for the call
				if s := rec.got(); len(s) != 0 {
					t.Fatalf("sent %q before any response", s)
				}
				c.Send(&pb.ModelInferResponse{ModelName: "a"})
				synctest.Wait()
				c.Send(&pb.ModelInferResponse{ModelName: "b"})
				c.Send(&pb.ModelInferResponse{ModelName: "c"})
				synctest.Wait()
				if s := rec.got(); !slices.Equal(s, []string{"begin", "a", "b", "c"}) {
					t.Fatalf("sent %q", s)
				}
				select {
				case err := <-ended:
					t.Fatalf("ended (%v) while its call runs", err)
				default:
				}
				tc.end(c, cancel)
				if err := <-ended; !errors.Is(err, tc.wantErr) {
					t.Fatalf("ended with %v, want %v", err, tc.wantErr)
				}
				if s := rec.got(); !slices.Equal(s, tc.want) {
					t.Fatalf("sent %q, want %q", s, tc.want)
				}
				if ended, _ := c.Ended(); !ended || cancelledCall(c) != tc.cancelled {
					t.Fatalf("the call ended %v, cancelled %v, want cancelled %v", ended, cancelledCall(c), tc.cancelled)
				}
			})
		})
	}
}

// TestRelayLaterHoldsNoGoroutine: requests waiting for their calls hold
// no goroutine, and each still gets its responses in order.
func TestRelayLaterHoldsNoGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 200
		up, calls := feeds(n)
		srv := testServer(up, nil, &Options{MaxStreams: 1000})
		recs := make([]wsRecorder, n)
		ended := make(chan error, n)
		before := runtime.NumGoroutine()
		for i := range n {
			f, err := srv.Begin(t.Context(), nil, "", &Job{Req: &pb.ModelInferRequest{ModelName: "m"}, Tr: nameEvents{}, Op: OpGenerate}, recs[i].sink(srv))
			if err != nil {
				t.Fatal(err)
			}
			f.RelayLater(func(err error) { ended <- err })
		}
		feedsOf := make([]*upstream.Feed, n)
		for i := range feedsOf {
			feedsOf[i] = <-calls
			feedsOf[i].Send(&pb.ModelInferResponse{ModelName: "a"})
		}
		synctest.Wait()
		if g := runtime.NumGoroutine(); g > before+n/2 {
			t.Fatalf("%d goroutines with %d requests waiting, %d before", g, n, before)
		}
		for _, c := range feedsOf {
			c.Send(&pb.ModelInferResponse{ModelName: "b"})
			c.End(io.EOF)
		}
		for range n {
			if err := <-ended; err != nil {
				t.Fatal(err)
			}
		}
		for i := range recs {
			if s, want := recs[i].got(), []string{"begin", "a", "b", "end", "[DONE]"}; !slices.Equal(s, want) {
				t.Fatalf("request %d sent %q, want %q", i, s, want)
			}
		}
	})
}

// panicEvents is nameEvents that panics at a response named "boom".
type panicEvents struct{ nameEvents }

func (p panicEvents) Next(r *pb.ModelInferResponse) ([][]byte, error) {
	if r.ModelName == "boom" {
		panic("boom")
	}
	return p.nameEvents.Next(r)
}

// TestRelayLaterPanicEndsOneRequest: a panic while a request is relayed
// on the goroutine that delivered its response (an upstream stream's
// reader) ends that request with an internal error, logged with its
// stack, and cancels its call, as net/http ends a handler that panics,
// instead of ending the process; another request on the same server
// relays on.
func TestRelayLaterPanicEndsOneRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up, calls := feeds(2)
		var logged bytes.Buffer
		srv := testServer(up, nil, &Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
		run := func(tr Translator, rec *wsRecorder) (chan error, *upstream.Feed) {
			ended := make(chan error, 1)
			f, err := srv.Begin(t.Context(), nil, "", &Job{Req: &pb.ModelInferRequest{ModelName: "m"}, Tr: tr, Op: OpGenerate}, rec.sink(srv))
			if err != nil {
				t.Fatal(err)
			}
			f.RelayLater(func(err error) { ended <- err })
			return ended, <-calls
		}
		var badRec, goodRec wsRecorder
		bad, badCall := run(panicEvents{}, &badRec)
		good, goodCall := run(nameEvents{}, &goodRec)
		badCall.Send(&pb.ModelInferResponse{ModelName: "a"})
		badCall.Send(&pb.ModelInferResponse{ModelName: "boom"})
		goodCall.Send(&pb.ModelInferResponse{ModelName: "a"})
		synctest.Wait()
		if err := <-bad; !errors.Is(err, errRelayPanic) || !slices.Equal(badRec.got(), []string{"begin", "a"}) {
			t.Fatalf("the panicking request: %v, sent %q, want %v after begin, a", err, badRec.got(), errRelayPanic)
		}
		if !cancelledCall(badCall) {
			t.Fatal("the panicking request's call was not cancelled")
		}
		if !strings.Contains(logged.String(), "panic relaying a request") || !strings.Contains(logged.String(), "panicEvents.Next") {
			t.Fatalf("log has no panic with its stack:\n%s", logged.String())
		}
		goodCall.Send(&pb.ModelInferResponse{ModelName: "b"})
		goodCall.End(io.EOF)
		if err := <-good; err != nil || !slices.Equal(goodRec.got(), []string{"begin", "a", "b", "end", "[DONE]"}) {
			t.Fatalf("the other request: %v, sent %q", err, goodRec.got())
		}
	})
}
