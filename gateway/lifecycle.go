package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/streamgate/streamgate/gateway/metrics"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/upstream"
)

// The life of one inference request, the same for every route and
// protocol: a handler validates the request into a job, then serve admits
// it, starts it upstream, relays its responses into a sink and accounts how
// it ended. sinks.go has the three sinks, errors.go the error formats.

// translator turns one call's responses into payloads, each one JSON
// value: an SSE event's data, a WebSocket data frame's "data", or the body
// of a non-streaming response.
type translator interface {
	// begin gives the payloads due once the call has started.
	begin() [][]byte
	// next gives the payloads for one response. They (and the slice) are
	// only valid until the next call: sinks copy them out.
	next(resp *pb.ModelInferResponse) ([][]byte, error)
	// end gives the payloads due after the last response.
	end() ([][]byte, error)
}

// form is how a job's payloads reach the client; the translator is built
// for it.
type form int

const (
	// formBody: one JSON body once the call has ended (non-streaming
	// routes).
	formBody form = iota
	// formSSE: one event per payload; OpenAI streams end with [DONE].
	formSSE
	// formWS: one WebSocket data frame per payload; the session's done
	// frame ends the request, so there is no [DONE].
	formWS
)

// job is a validated request, ready to start upstream.
type job struct {
	req *pb.ModelInferRequest
	tr  translator
	op  string // gen_ai.operation.name: opChat, opCompletion or opGenerate
	// tokens is what a keyed request reserves of its key's tokens per
	// minute (estimateTokens; 0 for requests that are not text), prompt
	// the part of it that is the prompt's estimate.
	tokens, prompt int
}

// sink is where one request's payloads go: an event stream (sseSink), one
// JSON body (bodySink) or WebSocket data frames (wsSink). serve drives it
// from the request's goroutine; nothing else touches it.
type sink interface {
	// protocol names the sink in metrics: "sse", "http" or "ws".
	protocol() string
	// keepAlive is how long the request may stay quiet before idle is
	// due; 0 means never.
	keepAlive() time.Duration
	// send takes one payload, copying what it keeps. It may buffer it
	// until flush. A failed write returns errClientGone.
	send(p []byte) error
	// flush delivers what send buffered; serve calls it after every batch
	// of ready responses. The first flush (or idle) commits the response:
	// its status is 200 from then on.
	flush() error
	// idle is called whenever the request has been quiet for keepAlive.
	idle() error
	// fail delivers err, which ended the request, if the sink can (in
	// band, or in the form its route gives errors that come first). It
	// returns false when it wrote nothing and the caller must answer err
	// in its route's error format.
	fail(err error) bool
	// cut makes the sink's write in progress and every later one fail at
	// once. Unlike the other methods it is called from another goroutine:
	// Drain's, for a request that outlived its stop timeout.
	cut()
}

// serve runs one request through its whole life:
//
//  1. admit: not draining, under the global and per-client limits
//     (limitKey: the API key, else the connection), registered for Drain;
//     a keyed request's model allowed and its key's limits taken
//     (admitKeyed), settled when it ends;
//  2. start the call upstream;
//  3. relay its responses through j's translator into out;
//  4. account how it ended and let out deliver the error if it can.
//
// ctx is the request's (the HTTP request's, or the WebSocket request's);
// when it is done the call is cancelled upstream. conn names the client
// connection for the per-client limit when the request has no API key
// ("" for none: a WebSocket's requests are limited by its session).
// serve returns nil when the request succeeded or out delivered its
// error, and otherwise the error the caller must answer (errClientGone
// when there is nobody to answer).
//
// serve is begin (1, 2), relay (3) and finish (4) on the caller's
// goroutine; relayLater runs 3 and 4 without one.
func (s *Server) serve(ctx context.Context, conn string, j *job, out sink) error {
	// serve's frame (and relay's, below it) stays on the stack of a
	// streaming request for its whole life, under net/http's and the
	// router's: the admission and the error paths are functions of their
	// own so that the frames stay small. A handler goroutine that waits
	// using under 4 KB of stack keeps an 8 KB stack; one that waits deeper
	// keeps 16 KB, which is most of what a held stream costs.
	f, err := s.begin(ctx, nil, conn, j, out)
	if f == nil {
		return err
	}
	return f.finish(relay(f.ctx, f.c, j.tr, out))
}

// flight is a request between begin and finish: admitted, its call
// started upstream.
type flight struct {
	s      *Server
	parent context.Context // the ctx given to begin
	ctx    context.Context // the request's: parent, or its child
	cancel context.CancelCauseFunc
	own    bool   // ctx is parent's child, cancelled by finish
	done   func() // gives back what admission took
	ob     *observation
	raw    call // the call as started
	c      call // raw, observed by ob
	j      *job
	out    sink
	active *metrics.GaugeValue

	// relayLater's state
	r     relayer
	wakes atomic.Int32 // wake calls not yet looked at; stays > 0 once ended
	ended func(error)
	// With a keepalive (out.keepAlive() > 0, serveParked): quiet wakes
	// step after ka without a batch, and idleDue says it has fired.
	ka      time.Duration
	quiet   *time.Timer
	idleDue atomic.Bool
	// start and last: a batch notes when it went out (last, since start)
	// rather than resetting quiet; quiet, when it fires, waits again for
	// what is left of ka since then.
	start time.Time
	last  time.Duration
}

// begin admits j and starts its call: serve's steps 1 and 2. A nil flight
// comes with the error serve returns. cancel, if not nil, cancels ctx
// (a WebSocket request's: ws.Request.Cancel), whose owner cancels it once
// the request has ended; otherwise the request runs in a child of ctx
// that finish cancels.
func (s *Server) begin(ctx context.Context, cancel context.CancelCauseFunc, conn string, j *job, out sink) (*flight, error) {
	f := &flight{s: s, parent: ctx, ctx: ctx, cancel: cancel, j: j, out: out}
	if cancel == nil {
		f.ctx, f.cancel = context.WithCancelCause(ctx)
		f.own = true
	}
	var err error
	f.done, err = s.admitJob(f.ctx, conn, j, &liveStream{hard: func() { f.cancel(errDraining) }, cut: out.cut})
	if err != nil {
		f.release()
		return nil, err
	}
	f.ob = s.observe(f.ctx, j) // the upstream span, in ob.ctx
	f.raw, err = s.start(f.ob.ctx, j.req)
	if err != nil {
		err = s.failed(f.ctx, ctx, f.ob, nil, j, out, err)
		f.done()
		f.release()
		return nil, err
	}
	f.c = f.ob.call(f.raw)
	f.active = s.active(out.protocol())
	return f, nil
}

// finish ends a flight whose relay returned err: serve's step 4. It
// returns what serve returns.
func (f *flight) finish(err error) error {
	if ws, ok := f.out.(*wsSink); ok {
		ws.countEvents() // what the last batch emitted, if it did not flush
	}
	if err == nil {
		f.ob.end(nil, false, f.j.tr)
		noteRequest(f.out, f.ob)
	} else {
		err = f.s.failed(f.ctx, f.parent, f.ob, f.c, f.j, f.out, err)
	}
	f.active.Dec()
	f.c.Cancel()
	f.done()
	f.release()
	return err
}

// release cancels the request's context if begin made it.
func (f *flight) release() {
	if f.own {
		f.cancel(nil)
	}
}

// notifier is a call that says when it may have a response ready or has
// ended (upstream.Call.Notify).
type notifier interface {
	Notify(func())
}

// canRelayLater says whether relayLater can run f: its call says when it
// has responses (notifier) and its sink needs no keepalives (a timer to
// wait for). Otherwise the caller relays and finishes f itself.
func (f *flight) canRelayLater() bool {
	_, ok := f.raw.(notifier)
	return ok && f.out.keepAlive() <= 0
}

// relayLater relays f's call and finishes f like serve, but without a
// goroutine that waits: each time the call says it may have a response
// ready (or has ended), a goroutine relays what is ready, flushes and
// leaves; once the call has ended it finishes f and gives ended what
// serve would have returned. f's call must be a notifier. A sink with a
// keepalive gets its idle calls as in relay, from a timer that wakes the
// request when it has been quiet that long; a sink without one
// (canRelayLater) must not block in its writes.
func (f *flight) relayLater(ended func(error)) {
	f.r = relayer{c: f.c, tr: f.j.tr, out: f.out, pending: f.j.tr.begin()}
	f.ended = ended
	if ka := f.out.keepAlive(); ka > 0 {
		f.ka, f.start = ka, time.Now()
		f.quiet = time.AfterFunc(ka, f.wakeIdle)
	}
	if f.quiet == nil {
		f.raw.(notifier).Notify(f.wakeHere)
	} else {
		f.raw.(notifier).Notify(f.wake)
	}
	f.wake()
}

// wakeIdle is the keepalive timer's: the request has been quiet for ka.
func (f *flight) wakeIdle() {
	f.idleDue.Store(true)
	f.wake()
}

// wake runs step on a goroutine of its own unless one runs already (which
// then steps again).
func (f *flight) wake() {
	if f.wakes.Add(1) == 1 {
		go f.step()
	}
}

// wakeHere is wake for a sink that never blocks in its writes (no
// keepalive: canRelayLater): the goroutine that calls it, the upstream
// stream's reader that has just queued a response, relays what is ready
// itself rather than waking a goroutine to do it, unless one runs
// already. Only the end of the request, its accounting and the ended
// callback, goes to a goroutine of its own.
func (f *flight) wakeHere() {
	if f.wakes.Add(1) == 1 {
		f.steps(true)
	}
}

// step relays whatever is ready, again while wake was called meanwhile,
// and finishes f once its call has ended.
func (f *flight) step() { f.steps(false) }

// steps is step, on wakeHere's goroutine when here: f is then finished on
// a goroutine of its own.
func (f *flight) steps(here bool) {
	defer f.recoverStep()
	for {
		n := f.wakes.Load()
		relayed, ended, err := f.r.step()
		if !ended && f.quiet != nil {
			ended, err = f.keepAlive(relayed)
		}
		if ended { // wakes stays > 0: no step runs again
			if here {
				go func() {
					defer f.recoverStep()
					f.end(err)
				}()
			} else {
				f.end(err)
			}
			return
		}
		if f.wakes.Add(-n) == 0 {
			return
		}
	}
}

// end finishes f, whose relay ended with err.
func (f *flight) end(err error) {
	f.raw.(notifier).Notify(nil)
	if f.quiet != nil {
		f.quiet.Stop()
	}
	f.ended(f.finish(err))
}

// errRelayPanic ends a request whose relay panicked.
var errRelayPanic = &httpError{Status: http.StatusInternalServerError, Code: "internal", Msg: "internal error relaying the response"}

// recoverStep ends f's request when its step panicked, as net/http ends a
// handler that panics, rather than the whole process (which a panic on
// a goroutine of step's own would end): the panic is logged with its
// stack and f finished with errRelayPanic, which its client gets like any
// other failure (in band once its stream has started). wakes stays > 0:
// no step runs again. A second panic, in finish itself, still ends the
// process.
func (f *flight) recoverStep() {
	v := recover()
	if v == nil {
		return
	}
	f.s.log.ErrorContext(f.ctx, "panic relaying a request", "model", f.j.req.GetModelName(),
		"panic", v, "stack", stack())
	f.raw.(notifier).Notify(nil)
	if f.quiet != nil {
		f.quiet.Stop()
	}
	f.ended(f.finish(errRelayPanic))
}

// keepAlive is relay's keepalive for relayLater: after a batch (relayed)
// the request is quiet again for ka; when it has been quiet that long,
// out.idle.
func (f *flight) keepAlive(relayed bool) (ended bool, err error) {
	now := time.Since(f.start)
	if relayed {
		f.last = now
	}
	if !f.idleDue.Swap(false) {
		return false, nil
	}
	if quiet := now - f.last; quiet < f.ka {
		f.quiet.Reset(f.ka - quiet)
		return false, nil
	}
	if err := f.r.sendPending(); err != nil {
		return true, err
	}
	if err := f.out.idle(); err != nil {
		return true, err
	}
	f.last = now
	f.quiet.Reset(f.ka)
	return false, nil
}

// serveParked is serve for a request whose goroutine must stay until it
// ends but need not relay (runShallow's: net/http's handler goroutine
// over HTTP/2): the call is relayed with relayLater, and the goroutine
// waits for it in this frame, a channel receive deep, rather than in
// relay's wait. Waiting at that depth it uses under a quarter of an 8 KB
// stack, so the runtime halves the stack its request's parsing grew.
func (s *Server) serveParked(ctx context.Context, conn string, j *job, out sink) error {
	f, err := s.begin(ctx, nil, conn, j, out)
	if f == nil {
		return err
	}
	if _, ok := f.raw.(notifier); !ok {
		return f.finish(relay(f.ctx, f.c, j.tr, out))
	}
	done := make(chan error, 1)
	f.relayLater(func(err error) { done <- err })
	return <-done
}

// active counts one more request relaying on protocol and returns its
// gauge (a function apart: see serve).
//
//go:noinline
func (s *Server) active(protocol string) *metrics.GaugeValue {
	g := s.metrics.active.With(protocol)
	g.Inc()
	return g
}

// admitJob is serve's admission: admit, then a keyed request's model and
// key limits (admitKeyed). done gives everything back.
func (s *Server) admitJob(ctx context.Context, conn string, j *job, e *liveStream) (func(), error) {
	release, err := s.admit(limitKey(ctx, conn), e)
	if err != nil {
		return nil, err
	}
	kd := keyOf(ctx)
	if kd == nil {
		return release, nil
	}
	settle, err := s.admitKeyed(ctx, kd, j)
	if err != nil {
		release()
		return nil, err
	}
	return func() { settle(); release() }, nil
}

// failed accounts a request whose call could not start (c nil) or ended
// with err, and lets out deliver the error if it can: serve's error path.
func (s *Server) failed(ctx, parent context.Context, ob *observation, c call, j *job, out sink, err error) error {
	err = endCause(ctx, parent, err)
	s.noteEnd(out.protocol(), err)
	if c == nil {
		ob.end(err, false, j.tr)
		noteRequest(out, ob)
		return err
	}
	// The call may still run upstream (the client went away, a drain, a
	// bad response): cancel it now, inside its span.
	_, upstreamEnded := upstream.AsError(err)
	c.Cancel()
	ob.end(err, !upstreamEnded, j.tr)
	noteRequest(out, ob)
	if errors.Is(err, errClientGone) || !out.fail(err) {
		return err
	}
	return nil
}

// admit lets one inference request in: not draining, under the limits
// (client is its limitKey), registered for Drain as e. done gives
// everything back.
func (s *Server) admit(client string, e *liveStream) (done func(), err error) {
	if s.draining.Load() {
		s.metrics.rejected.With("draining").Inc()
		return nil, errDraining
	}
	release, err := s.limits.acquire(client)
	if err != nil {
		reason := "global_limit"
		switch err {
		case errConnLimit:
			reason = "connection_limit"
		case errKeyLimit:
			reason = "key_limit"
		}
		s.metrics.rejected.With(reason).Inc()
		return nil, err
	}
	remove, ok := s.streams.add(e)
	if !ok {
		release()
		s.metrics.rejected.With("draining").Inc()
		return nil, errDraining
	}
	return func() { remove(); release() }, nil
}

// endCause is why a request that failed with err ended: errDraining when
// Drain ended it, errClientGone when its client went away (its context is
// done, or a write failed), otherwise err.
func endCause(ctx, parent context.Context, err error) error {
	switch {
	case errors.Is(context.Cause(ctx), errDraining):
		return errDraining
	case parent.Err() != nil, errors.Is(err, errClientGone):
		return errClientGone
	}
	return err
}

// noteEnd counts how a request ended, when it did not succeed.
func (s *Server) noteEnd(protocol string, err error) {
	if errors.Is(err, errClientGone) {
		s.metrics.clientGone.With(protocol).Inc()
		return
	}
	if ue, ok := upstream.AsError(err); ok {
		if ue.Kind == upstream.KindTooSlow { // the client's fault, not upstream's
			s.metrics.slowClient.With(protocol).Inc()
			return
		}
		s.metrics.upstream.With(ue.Kind.String()).Inc()
	}
}

// relay runs tr over c into out until the call ends. It sends the payloads
// of every response already queued, then flushes once (one write per
// batch), and calls out.idle whenever the request has been quiet for
// out.keepAlive(). The payloads of tr.begin wait for the first response
// (or the first idle), so that an error coming first finds the response
// still uncommitted and gets its own status. Errors are the call's, the translator's, or
// errClientGone when out could not write; the payloads before them may
// still be buffered in out, for its in-band error to follow.
func relay(ctx context.Context, c call, tr translator, out sink) error {
	r := relayer{c: c, tr: tr, out: out, pending: tr.begin()}
	var tick <-chan time.Time
	ka := out.keepAlive()
	var timer *time.Timer
	// The timer is not reset by every batch: a batch notes when it went
	// out (last, since start), and the timer, when it fires, waits again
	// for what is left of ka since then.
	var start time.Time
	var last time.Duration
	if ka > 0 {
		timer = time.NewTimer(ka)
		defer timer.Stop()
		tick = timer.C
		start = time.Now()
	}
	for {
		resp, err := c.RecvTick(ctx, tick)
		if resp == nil && err == nil { // the timer fired
			now := time.Since(start)
			if quiet := now - last; quiet < ka {
				timer.Reset(ka - quiet)
				continue
			}
			if err := r.sendPending(); err != nil {
				return err
			}
			if err := out.idle(); err != nil {
				return err
			}
			last = now
			timer.Reset(ka)
			continue
		}
		if ended, err := r.batch(resp, err); ended {
			return err
		}
		if timer != nil {
			last = time.Since(start)
		}
	}
}

// relayer is relay's state between batches.
type relayer struct {
	c       call
	tr      translator
	out     sink
	pending [][]byte // tr.begin's payloads, until the first response
}

func (r *relayer) send(ps [][]byte) error {
	for _, p := range ps {
		if err := r.out.send(p); err != nil {
			return err
		}
	}
	return nil
}

func (r *relayer) sendPending() error {
	err := r.send(r.pending)
	r.pending = nil
	return err
}

// step relays the responses ready now, if any, without waiting (batch);
// relayed says there were.
func (r *relayer) step() (relayed, ended bool, err error) {
	resp, ok, err := r.c.TryRecv()
	if !ok {
		return false, false, nil
	}
	ended, err = r.batch(resp, err)
	return true, ended, err
}

// batch relays one result of the call (resp, or its end: err) and every
// response already queued after it, then flushes. ended says that relay
// is over, with err (nil: the call completed and its payloads are out).
func (r *relayer) batch(resp *pb.ModelInferResponse, err error) (ended bool, _ error) {
	if err == nil || err == io.EOF {
		if err := r.sendPending(); err != nil {
			return true, err
		}
	}
	for {
		if err == io.EOF {
			ps, terr := r.tr.end()
			if terr != nil {
				return true, terr
			}
			if err := r.send(ps); err != nil {
				return true, err
			}
			return true, r.out.flush()
		}
		if err != nil {
			return true, err
		}
		ps, terr := r.tr.next(resp)
		if terr != nil {
			return true, terr
		}
		if err := r.send(ps); err != nil {
			return true, err
		}
		var ok bool
		if resp, ok, err = r.c.TryRecv(); !ok {
			break
		}
	}
	err = r.out.flush()
	return err != nil, err
}
