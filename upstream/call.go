package upstream

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// Call is one request in flight: read its responses with Recv, stop it with
// Cancel. Cancel, ID and Done may be called from any goroutine; Recv from one
// goroutine at a time.
type Call struct {
	// What every response touches comes first, in the first three cache
	// lines: the queue (the reader's push and the consumer's pop), then
	// the rest of what route, deliver and TryRecv read. A paced response
	// finds its call untouched for tens of milliseconds, out of the cache,
	// so each line here is a miss per response. The Call's 320 bytes fill
	// the 320-byte size class, whose objects start on a line: the hot 184
	// bytes are three lines, never four (TestCallLayout).
	q respQueue
	c *Client
	// cur is the frame of the response Recv last returned; only the
	// consumer touches it.
	cur    *frame
	origID string // the caller's req.Id, put back on responses
	// progress counts the responses routed to the call (queued); the
	// idle watch reads it.
	progress  atomic.Uint64
	delivered atomic.Bool // a response was queued; no more failover
	// ended is set as done closes: TryRecv looks at it rather than at
	// done, whose channel is one more cache line to load per response.
	ended     atomic.Bool
	aborted   atomic.Bool // ended by Cancel, ctx or Close: skip queued data
	decoupled bool

	// The rest is read at the call's start and end.
	auto bool         // mode follows the target (CancelAuto)
	mode atomic.Int32 // CancelMode in effect: inband, stream or none
	req  *pb.ModelInferRequest
	id   string      // upstream id, unique per Client
	key  uint64      // id's routing key (Client.newID)
	seq  *seqRoute   // the sequence the request belongs to; nil for none
	span trace.Span  // Start's ctx's: events go there
	md   metadata.MD // trace context for a dedicated stream; nil for none

	mu        sync.Mutex
	retried   bool
	finished  bool
	st        *stream // the stream the call was last placed on
	err       error   // io.EOF or *Error; set once, before done closes
	done      chan struct{}
	stopWatch func() bool // stops the context.AfterFunc on Start's ctx
	idle      *time.Timer // the idle watch (watchIdle), nil without one
}

// ID returns the upstream request id: unique within the Client, sent as
// ModelInferRequest.id.
func (cl *Call) ID() string { return cl.id }

// Target returns the address of the target the call was last placed on.
func (cl *Call) Target() string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.st == nil {
		return ""
	}
	return cl.st.t.addr
}

// Done is closed when the call has ended upstream. Responses received before
// the end may still be waiting for Recv.
func (cl *Call) Done() <-chan struct{} { return cl.done }

// Recv returns the call's next response, in order. The response (and
// every slice and map in it) is only valid until the next call of Recv,
// RecvTick or TryRecv: the call reuses its memory, so a caller that keeps
// a response must copy it (proto.Clone). After the last response Recv
// returns io.EOF: a data response carrying triton_final_response=true is
// returned and the next Recv returns io.EOF; a flags-only final gives
// io.EOF directly. A call that ends otherwise returns an *Error (after
// the responses queued before the end, except for KindCancelled,
// KindDeadline and Close, which return at once). If ctx ends first Recv
// returns ctx.Err() and the call carries on.
func (cl *Call) Recv(ctx context.Context) (*pb.ModelInferResponse, error) {
	return cl.RecvTick(ctx, nil)
}

// RecvTick is Recv that also returns (nil, nil) when tick delivers a value
// before a response is ready (a nil tick never does). It lets one goroutine
// wait for responses and its own timer (a keepalive) at once without a
// context per wait.
func (cl *Call) RecvTick(ctx context.Context, tick <-chan time.Time) (*pb.ModelInferResponse, error) {
	ready := cl.q.ready // only consumers set it
	if ready == nil {
		ready = cl.q.readyChan() // before TryRecv: a push after it leaves a token
	}
	for {
		if r, ok, err := cl.TryRecv(); ok {
			return r, err
		}
		select {
		case <-ready:
		case <-cl.done:
			r, _, err := cl.TryRecv()
			return r, err
		case <-tick:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// TryRecv is Recv without waiting: ok is false when the call is still
// running and no response is ready yet. It lets a consumer drain what is
// already queued before it flushes a batch to its client.
func (cl *Call) TryRecv() (r *pb.ModelInferResponse, ok bool, err error) {
	if cl.aborted.Load() {
		cl.putFrame()
		return nil, true, cl.err
	}
	if r, ok, err := cl.pop(); ok {
		return r, true, err
	}
	if !cl.ended.Load() {
		cl.putFrame() // nothing to hold while the consumer waits
		return nil, false, nil
	}
	// Ended: everything pushed before the end is visible now.
	if !cl.aborted.Load() {
		if r, ok, err := cl.pop(); ok {
			return r, true, err
		}
	}
	cl.putFrame()
	return nil, true, cl.err
}

// pop takes the next queued response and decodes it into cl.cur.
func (cl *Call) pop() (*pb.ModelInferResponse, bool, error) {
	f := cl.cur
	if f == nil {
		f = getFrame()
	}
	buf, ok := cl.q.pop(f.buf, &cl.c.lim)
	f.buf = buf
	if !ok {
		if cl.cur == nil {
			f.release()
		}
		return nil, false, nil
	}
	cl.cur = f
	if err := f.decode(); err != nil {
		cl.abort(errMalformed)
		return nil, true, errMalformed
	}
	f.resp.Id = cl.origID
	return &f.resp, true, nil
}

// putFrame hands the consumer's frame back to the pool.
func (cl *Call) putFrame() {
	if cl.cur != nil {
		cl.cur.release()
		cl.cur = nil
	}
}

// Cancel ends the call with KindCancelled and cancels it upstream according
// to the cancel mode. After the end it drops the responses not received
// yet (their memory counts against the queue budgets until then). It is
// idempotent.
func (cl *Call) Cancel() { cl.abort(errCancelled) }

func (cl *Call) cancelMode() CancelMode { return CancelMode(cl.mode.Load()) }

// finish ends the call with err; false if it had already ended.
func (cl *Call) finish(err error, abort bool) bool {
	cl.mu.Lock()
	if cl.finished {
		cl.mu.Unlock()
		return false
	}
	cl.finishLocked(err, abort)
	stop := cl.stopWatch
	cl.stopWatch = nil
	cl.mu.Unlock()
	if stop != nil {
		stop()
	}
	cl.notifyEnd()
	return true
}

func (cl *Call) finishLocked(err error, abort bool) {
	cl.finished = true
	cl.err = err
	if abort {
		cl.aborted.Store(true)
		cl.q.discard(&cl.c.lim) // nobody will read them
	}
	if cl.idle != nil {
		cl.idle.Stop()
	}
	cl.ended.Store(true)
	close(cl.done)
	if cl.seq != nil {
		cl.c.seqs.ended(cl.seq, err)
	}
}

// abort ends the call early (Cancel, Start's ctx, Close) and cancels it
// upstream if it was still on a stream. Responses still queued are
// dropped.
func (cl *Call) abort(err *Error) { cl.end(err, true) }

// end ends the call with err and cancels it upstream if it was still on a
// stream; with skip, Recv drops the responses still queued.
func (cl *Call) end(err *Error, skip bool) {
	cl.mu.Lock()
	if cl.finished {
		cl.mu.Unlock()
		cl.q.discard(&cl.c.lim)
		return
	}
	st := cl.st
	cl.finishLocked(err, skip)
	stop := cl.stopWatch
	cl.stopWatch = nil
	cl.mu.Unlock()
	if stop != nil {
		stop()
	}
	if st != nil {
		st.removeAndCancel(cl)
	}
	cl.notifyEnd()
}

// A Notifier is told (Ready) whenever a response may have become ready
// for TryRecv and once the call has ended: see Call.Notify.
type Notifier interface{ Ready() }

// NotifyFunc is a function as a Notifier.
type NotifyFunc func()

// Ready calls f.
func (f NotifyFunc) Ready() { f() }

// Notify has n told whenever a response may have become ready for
// TryRecv and once the call has ended, so that a consumer can wait for
// the call without a goroutine of its own. n is told on the goroutine
// that queued the response or ended the call (the stream's reader, a
// timer's, Cancel's caller), holding no lock of the Call's or of its
// stream's: Ready must not block. Told of a response, n may take it
// (TryRecv) there and then, which saves a goroutine's wake-up per
// response. A consumer sets n, then calls TryRecv until it is not ok:
// what was ready before n was set is seen there. Notify(nil) stops the
// calls. A stream's reader on the own-h2 transport tells n once per read
// of its connection, after it has queued every response that read
// brought (and at once of the call's end, which finds them all).
func (cl *Call) Notify(n Notifier) { cl.q.setNotify(n) }

// notifyEnd tells the Notifier of a call that has just ended.
func (cl *Call) notifyEnd() {
	if n := cl.q.notifier(); n != nil {
		n.Ready()
	}
}

// watchIdle ends the call with KindIdleTimeout, cancelling it upstream,
// once it has received nothing for d: a timer looks every quarter of d
// whether progress moved. d <= 0 watches nothing.
func (cl *Call) watchIdle(d time.Duration) {
	if d <= 0 {
		return
	}
	step := max(d/4, time.Millisecond)
	var seen atomic.Uint64 // progress at the last look
	var quiet atomic.Int64 // how long progress has not moved, as looked
	look := func() {
		if n := cl.progress.Load(); n != seen.Load() {
			seen.Store(n)
			quiet.Store(0)
		} else if time.Duration(quiet.Add(int64(step))) >= d {
			cl.c.ctr.idleTimeouts.Add(1)
			cl.end(newError(KindIdleTimeout, codes.DeadlineExceeded,
				"the target sent nothing for "+d.String()), false)
			return
		}
		cl.mu.Lock()
		if !cl.finished {
			cl.idle.Reset(step)
		}
		cl.mu.Unlock()
	}
	cl.mu.Lock()
	if !cl.finished {
		cl.idle = time.AfterFunc(step, look)
	}
	cl.mu.Unlock()
}

// watch ends the call when ctx ends.
func (cl *Call) watch(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { cl.abort(ctxError(ctx)) })
	cl.mu.Lock()
	if !cl.finished {
		cl.stopWatch = stop
		stop = nil
	}
	cl.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// placeErr is why a call that a stream refused cannot be placed at all:
// its own end, or nil when placing may be tried again.
func (cl *Call) placeErr() error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.finished {
		return cl.err
	}
	return nil
}

// failover re-places cl, whose stream on from ended with why, once and
// only if it has delivered nothing; otherwise it ends cl with why. With
// elsewhere, cl is only re-placed on a target other than from.
func (c *Client) failover(cl *Call, from *target, why *Error, elsewhere bool) {
	cl.mu.Lock()
	if cl.finished {
		cl.mu.Unlock()
		return
	}
	closed := c.isClosed()
	if cl.seq != nil && !closed {
		// Never re-routed: the sequence's state was where it ran.
		cl.mu.Unlock()
		cl.finish(c.seqs.lose(cl.seq, why), false)
		return
	}
	retry := !cl.retried && !cl.delivered.Load() && !closed
	cl.retried = true
	cl.mu.Unlock()
	if closed {
		cl.finish(errClosed, true)
		return
	}
	if !retry {
		cl.finish(why, false)
		return
	}
	t, release, err := c.pick(from)
	if err == nil {
		defer release()
	}
	if err == nil && ((elsewhere && t == from) || t.down.Load()) {
		cl.finish(why, false) // nowhere else to go
		return
	}
	c.ctr.retries.Add(1)
	if cl.span.IsRecording() {
		attrs := []attribute.KeyValue{attribute.String("from", from.addr), attribute.String("reason", why.Error())}
		if err == nil {
			attrs = append(attrs, attribute.String("to", t.addr))
		}
		cl.span.AddEvent("retry", trace.WithAttributes(attrs...))
	}
	if err == nil {
		if cl.auto {
			cl.mode.Store(int32(t.cancelModeCached()))
		}
		err = t.place(cl)
	}
	if err != nil {
		if e, ok := AsError(err); ok && e.Kind != KindUnavailable {
			err = why
		}
		cl.finish(err, false)
	}
}
