package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/streamgate/streamgate/gateway/sse"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// notifyCall is a call fed by a test that tells when it has responses
// (Notify), as upstream.Call does; it ends when its start's context does.
type notifyCall struct {
	mu        sync.Mutex
	q         []*pb.ModelInferResponse
	end       error // io.EOF or the error that ended it; nil while it runs
	notify    func()
	cancelled bool
}

func (c *notifyCall) push(r *pb.ModelInferResponse, end error) {
	c.mu.Lock()
	if r != nil {
		c.q = append(c.q, r)
	}
	if c.end == nil {
		c.end = end
	}
	f := c.notify
	c.mu.Unlock()
	if f != nil {
		f()
	}
}

func (c *notifyCall) Notify(f func()) {
	c.mu.Lock()
	c.notify = f
	c.mu.Unlock()
}

func (c *notifyCall) TryRecv() (*pb.ModelInferResponse, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.q) > 0 {
		r := c.q[0]
		c.q = c.q[1:]
		return r, true, nil
	}
	return nil, c.end != nil, c.end
}

func (c *notifyCall) RecvTick(context.Context, <-chan time.Time) (*pb.ModelInferResponse, error) {
	panic("a request relayed later never waits in RecvTick")
}

func (c *notifyCall) Cancel() {
	c.mu.Lock()
	c.cancelled = true
	c.mu.Unlock()
	c.push(nil, errors.New("cancelled"))
}

// TestRelayLater: a request relayed without a goroutine of its own sends
// each batch of ready responses as it arrives, in order, and finishes
// once its call ends: completed, or cancelled by its client (its context)
// while it waits. While it waits no goroutine of its runs.
func TestRelayLater(t *testing.T) {
	for _, tc := range []struct {
		name    string
		end     func(c *notifyCall, cancel context.CancelFunc)
		want    []string
		wantErr error
	}{
		{"completes", func(c *notifyCall, _ context.CancelFunc) { c.push(nil, io.EOF) }, []string{"begin", "a", "b", "c", "end", "[DONE]"}, nil},
		{"client leaves", func(_ *notifyCall, cancel context.CancelFunc) { cancel() }, []string{"begin", "a", "b", "c"}, errClientGone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var c *notifyCall
				start := func(ctx context.Context, _ *pb.ModelInferRequest) (call, error) {
					c = &notifyCall{}
					context.AfterFunc(ctx, func() { c.push(nil, ctx.Err()) }) // as upstream.Call.watch
					return c, nil
				}
				srv := testServer(start, fakeUpstream{}, nil)
				var mu sync.Mutex
				var sent []string
				out := &wsSink{events: srv.metrics.events.With("ws"), emit: func(p []byte) error {
					mu.Lock()
					sent = append(sent, string(p))
					mu.Unlock()
					return nil
				}}
				got := func() []string {
					mu.Lock()
					defer mu.Unlock()
					return append([]string(nil), sent...)
				}
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				f, err := srv.begin(ctx, nil, "", &job{req: &pb.ModelInferRequest{ModelName: "m"}, tr: nameEvents{}, op: opGenerate}, out)
				if err != nil || !f.canRelayLater() {
					t.Fatalf("begin: %v, can relay later: %v", err, f != nil && f.canRelayLater())
				}
				ended := make(chan error, 1)
				f.relayLater(func(err error) { ended <- err })
				synctest.Wait() // no goroutine waits for the call
				if s := got(); len(s) != 0 {
					t.Fatalf("sent %q before any response", s)
				}
				c.push(&pb.ModelInferResponse{ModelName: "a"}, nil)
				synctest.Wait()
				c.push(&pb.ModelInferResponse{ModelName: "b"}, nil)
				c.push(&pb.ModelInferResponse{ModelName: "c"}, nil)
				synctest.Wait()
				if s := got(); !slices.Equal(s, []string{"begin", "a", "b", "c"}) {
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
				if s := got(); !slices.Equal(s, tc.want) {
					t.Fatalf("sent %q, want %q", s, tc.want)
				}
				if !c.cancelled {
					t.Fatal("the call was not cancelled at the end")
				}
			})
		})
	}
}

// TestRelayLaterHoldsNoGoroutine: requests waiting for their calls hold
// no goroutine, and each still gets its responses in order.
func TestRelayLaterHoldsNoGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls []*notifyCall
		start := func(context.Context, *pb.ModelInferRequest) (call, error) {
			c := &notifyCall{}
			calls = append(calls, c)
			return c, nil
		}
		srv := testServer(start, fakeUpstream{}, &Options{MaxStreams: 1000})
		const n = 200
		var mu sync.Mutex
		sent := make([][]string, n)
		ended := make(chan error, n)
		before := runtime.NumGoroutine()
		for i := range n {
			out := &wsSink{events: srv.metrics.events.With("ws"), emit: func(p []byte) error {
				mu.Lock()
				sent[i] = append(sent[i], string(p))
				mu.Unlock()
				return nil
			}}
			f, err := srv.begin(t.Context(), nil, "", &job{req: &pb.ModelInferRequest{ModelName: "m"}, tr: nameEvents{}, op: opGenerate}, out)
			if err != nil {
				t.Fatal(err)
			}
			f.relayLater(func(err error) { ended <- err })
		}
		for _, c := range calls {
			c.push(&pb.ModelInferResponse{ModelName: "a"}, nil)
		}
		synctest.Wait()
		if g := runtime.NumGoroutine(); g > before+n/2 {
			t.Fatalf("%d goroutines with %d requests waiting, %d before", g, n, before)
		}
		for _, c := range calls {
			c.push(&pb.ModelInferResponse{ModelName: "b"}, io.EOF)
		}
		for range n {
			if err := <-ended; err != nil {
				t.Fatal(err)
			}
		}
		for i, s := range sent {
			if want := []string{"begin", "a", "b", "end", "[DONE]"}; !slices.Equal(s, want) {
				t.Fatalf("request %d sent %q, want %q", i, s, want)
			}
		}
	})
}

// tickCall is a notifyCall that relay can also wait on (RecvTick), for
// comparing serve with serveParked.
type tickCall struct {
	notifyCall
	sig chan struct{}
}

func newTickCall() *tickCall {
	c := &tickCall{sig: make(chan struct{}, 1)}
	c.notify = func() {
		select {
		case c.sig <- struct{}{}:
		default:
		}
	}
	return c
}

func (c *tickCall) RecvTick(ctx context.Context, tick <-chan time.Time) (*pb.ModelInferResponse, error) {
	for {
		if r, ok, err := c.TryRecv(); ok {
			return r, err
		}
		select {
		case <-c.sig:
		case <-tick:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// TestServeParkedAsServe: an event stream whose goroutine waits parked
// (serveParked: relayed by relayLater, keepalives from a timer) sends
// what serve sends, flush for flush: the headers with the first event
// when the first response is late, keepalives while quiet, a batch per
// group of ready responses with the quiet period restarting after it,
// and the end; a client that leaves ends it.
func TestServeParkedAsServe(t *testing.T) {
	type run func(s *Server, ctx context.Context, j *job, out sink) error
	serve := func(s *Server, ctx context.Context, j *job, out sink) error { return s.serve(ctx, "", j, out) }
	parked := func(s *Server, ctx context.Context, j *job, out sink) error { return s.serveParked(ctx, "", j, out) }
	script := func(t *testing.T, r run, leave bool) ([]string, error) {
		var c *tickCall
		start := func(ctx context.Context, _ *pb.ModelInferRequest) (call, error) {
			c = newTickCall()
			context.AfterFunc(ctx, func() { c.push(nil, ctx.Err()) }) // as upstream.Call.watch
			return c, nil
		}
		srv := testServer(start, fakeUpstream{}, &Options{SSE: &sse.Options{KeepAlive: 10 * time.Second}})
		rec := &flushRecorder{ResponseRecorder: httptest.NewRecorder()}
		out := srv.newSSESink(rec, httptest.NewRequest(http.MethodPost, "/", nil), tritonErrors, false)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		errc := make(chan error, 1)
		go func() {
			errc <- r(srv, ctx, &job{req: &pb.ModelInferRequest{ModelName: "m"}, tr: nameEvents{}, op: opGenerate}, out)
		}()
		synctest.Wait()
		time.Sleep(10 * time.Second) // the first response is late: headers and begin
		synctest.Wait()
		time.Sleep(10 * time.Second) // quiet: a keepalive
		synctest.Wait()
		for _, m := range []string{"a", "b", "c"} {
			c.push(&pb.ModelInferResponse{ModelName: m}, nil)
		}
		synctest.Wait()
		time.Sleep(9 * time.Second) // quiet restarted at the batch: nothing yet
		synctest.Wait()
		c.push(&pb.ModelInferResponse{ModelName: "d"}, nil)
		synctest.Wait()
		time.Sleep(10 * time.Second) // a keepalive
		synctest.Wait()
		if leave {
			cancel()
		} else {
			c.push(nil, io.EOF)
		}
		err := <-errc
		return rec.snapshot(), err
	}
	ev := func(i int, d string) string { return string(sse.AppendEvent(nil, uint64(i+1), []byte(d))) } // event i has id i+1
	want := []string{ev(0, "begin"), sse.KeepAliveComment, ev(1, "a") + ev(2, "b") + ev(3, "c"), ev(4, "d"), sse.KeepAliveComment}
	for _, leave := range []bool{false, true} {
		var got [2][]string
		for i, r := range []run{serve, parked} {
			synctest.Test(t, func(t *testing.T) {
				var err error
				got[i], err = script(t, r, leave)
				if leave && !errors.Is(err, errClientGone) || !leave && err != nil {
					t.Fatalf("leave %v: ended with %v", leave, err)
				}
			})
		}
		w := want
		if !leave {
			w = append(slices.Clip(want), ev(5, "end")+ev(6, "[DONE]"))
		}
		if !slices.Equal(got[0], w) || !slices.Equal(got[1], w) {
			t.Fatalf("leave %v: flushes\nserve  %q\nparked %q\nwant   %q", leave, got[0], got[1], w)
		}
	}
}

// panicEvents is nameEvents that panics at a response named "boom".
type panicEvents struct{ nameEvents }

func (p panicEvents) next(r *pb.ModelInferResponse) ([][]byte, error) {
	if r.ModelName == "boom" {
		panic("boom")
	}
	return p.nameEvents.next(r)
}

// TestRelayLaterPanicEndsOneRequest: a panic while a request is relayed
// on relayLater's goroutines (a parked stream's) ends that request with
// an internal error (in band: its stream had started), logged with its
// stack, and cancels its call, as net/http ends a handler that panics,
// instead of ending the process; another request on the same server
// relays on.
func TestRelayLaterPanicEndsOneRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls []*tickCall
		start := func(context.Context, *pb.ModelInferRequest) (call, error) {
			c := newTickCall()
			calls = append(calls, c)
			return c, nil
		}
		var logged bytes.Buffer
		srv := testServer(start, fakeUpstream{}, &Options{
			SSE:    &sse.Options{KeepAlive: 10 * time.Second},
			Logger: slog.New(slog.NewTextHandler(&logged, nil)),
		})
		type result struct {
			rec *flushRecorder
			err error
		}
		run := func(tr translator) chan result {
			res := make(chan result, 1)
			rec := &flushRecorder{ResponseRecorder: httptest.NewRecorder()}
			out := srv.newSSESink(rec, httptest.NewRequest(http.MethodPost, "/", nil), tritonErrors, false)
			go func() {
				err := srv.serveParked(t.Context(), "", &job{req: &pb.ModelInferRequest{ModelName: "m"}, tr: tr, op: opGenerate}, out)
				res <- result{rec, err}
			}()
			synctest.Wait()
			return res
		}
		ev := func(i int, d string) string { return string(sse.AppendEvent(nil, uint64(i+1), []byte(d))) } // event i has id i+1
		bad, good := run(panicEvents{}), run(nameEvents{})
		calls[0].push(&pb.ModelInferResponse{ModelName: "a"}, nil)
		calls[0].push(&pb.ModelInferResponse{ModelName: "boom"}, nil)
		calls[1].push(&pb.ModelInferResponse{ModelName: "a"}, nil)
		synctest.Wait()
		r := <-bad
		if got := strings.Join(r.rec.snapshot(), ""); r.err != nil || !strings.HasPrefix(got, ev(0, "begin")+ev(1, "a")) || !strings.Contains(got, errRelayPanic.Msg) {
			t.Fatalf("the panicking request: %v, sent %q, want begin, a and an error event saying %q", r.err, got, errRelayPanic.Msg)
		}
		if !calls[0].cancelled {
			t.Fatal("the panicking request's call was not cancelled")
		}
		if !strings.Contains(logged.String(), "panic relaying a request") || !strings.Contains(logged.String(), "panicEvents.next") {
			t.Fatalf("log has no panic with its stack:\n%s", logged.String())
		}
		calls[1].push(&pb.ModelInferResponse{ModelName: "b"}, io.EOF)
		synctest.Wait()
		r = <-good
		if got, want := strings.Join(r.rec.snapshot(), ""), ev(0, "begin")+ev(1, "a")+ev(2, "b")+ev(3, "end")+ev(4, "[DONE]"); r.err != nil || got != want {
			t.Fatalf("the other request: %v, sent %q, want %q", r.err, got, want)
		}
	})
}
