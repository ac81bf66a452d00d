package core

import (
	"context"
	"errors"
	"math"
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
// it ended. sinks.go has the sinks, errors.go the error formats.

// Translator turns one call's responses into payloads, each one JSON
// value: an SSE event's data, a WebSocket data frame's "data", or the body
// of a non-streaming response.
type Translator interface {
	// Begin gives the payloads due once the call has started.
	Begin() [][]byte
	// Next gives the payloads for one response. They (and the slice) are
	// only valid until the next call: sinks copy them out.
	Next(resp *pb.ModelInferResponse) ([][]byte, error)
	// End gives the payloads due after the last response.
	End() ([][]byte, error)
}

// Form is how a job's payloads reach the client; the translator is built
// for it.
type Form int

const (
	// formBody: one JSON body once the call has ended (non-streaming
	// routes).
	FormBody Form = iota
	// formSSE: one event per payload; OpenAI streams end with [DONE].
	FormSSE
	// formWS: one WebSocket data frame per payload; the session's done
	// frame ends the request, so there is no [DONE].
	FormWS
)

// Job is a validated request, ready to start upstream.
type Job struct {
	Req *pb.ModelInferRequest
	Tr  Translator
	Op  string // gen_ai.operation.name: opChat, opCompletion or opGenerate
	// Tokens is what a keyed request reserves of its key's tokens per
	// minute (estimateTokens; 0 for requests that are not text), prompt
	// the part of it that is the prompt's estimate.
	Tokens, Prompt int
}

// Sink is where one request's payloads go: an event stream (SSESink), one
// JSON body (BodySink) or WebSocket data frames (WSSink); LogSink (a
// background response's) writes them to its resumable log alone. Its
// request's relay drives it (run or relayLater), one batch at a time;
// only cut comes from elsewhere.
type Sink interface {
	// protocol names the sink in metrics: "sse", "http" or "ws".
	protocol() string
	// keepAlive is how long the request may stay quiet before idle is
	// due; 0 means never.
	keepAlive() time.Duration
	// send takes one payload, copying what it keeps. It may buffer it
	// until flush. A failed write returns ErrClientGone.
	send(p []byte) error
	// flush delivers what send buffered; serve calls it after every batch
	// of ready responses. The first flush (or idle) commits the response:
	// its status is 200 from then on. Without wait it must not wait for
	// the client (it runs on the upstream reader, which serves many
	// requests): done false says that some of the batch may not have gone
	// out, and the relay goes on on a goroutine of its own, which flushes
	// again with wait first.
	flush(wait bool) (done bool, err error)
	// flushLast is flush for the call's last batch, once the call has
	// completed and nothing is owed: a sink that can (a detached event
	// stream's) keeps the batch to go out in one write with the
	// response's end, after the request's accounting, and says held;
	// otherwise it does nothing and the batch is flushed.
	flushLast() (held bool)
	// idle is called whenever the request has been quiet for keepAlive.
	idle() error
	// fail delivers err, which ended the request, if the sink can (in
	// band, or in the form its route gives errors that come first). It
	// returns false when it wrote nothing and the caller must answer err
	// in its route's error format.
	fail(err error) bool
	// writer is the HTTP response the sink writes, whose log line names
	// the request's model and tokens (noteRequest); nil for none.
	writer() http.ResponseWriter
	// countEvents counts in metrics the payloads sent since the last
	// count (flush and fail count too; finish calls it for a batch that
	// ended early).
	countEvents()
	// cut makes the sink's write in progress and every later one fail at
	// once. Unlike the other methods it is called from another goroutine:
	// Drain's, for a request that outlived its stop timeout.
	cut()
}

// Serve runs one request through its whole life:
//
//  1. admit: not draining, under the global and per-client limits
//     (limitKey: the API key, else the connection), registered for Drain;
//     a keyed request's model allowed and its key's limits taken
//     (admitKeyed), settled when it ends;
//  2. start the call upstream (upstream.Client.Start);
//  3. relay its responses through j's translator into out, with out's
//     keepalives while it is quiet;
//  4. finish: account how it ended and let out deliver the error if it
//     can.
//
// ctx is the request's (the HTTP request's, or the WebSocket request's);
// when it is done the call is cancelled upstream. conn names the client
// connection for the per-client limit when the request has no API key
// ("" for none: a WebSocket's requests are limited by its session).
// Serve returns nil when the request succeeded or out delivered its
// error, and otherwise the error the caller must answer (ErrClientGone
// when there is nobody to answer).
//
// Serve is Begin (1, 2) and Flight.run (3, 4); the caller's goroutine
// waits for the end, in this frame: see run. A WebSocket request runs 3
// and 4 with no goroutine waiting (Flight.RelayLater), and so does a
// detached event stream (Flight.Relay). All relay in steps, with the same
// relayer, and end in finish.
func (s *Server) Serve(ctx context.Context, conn string, j *Job, out Sink) error {
	f, err := s.Begin(ctx, nil, conn, j, out)
	if f == nil {
		return err
	}
	return <-f.run()
}

// Flight is a request between begin and finish: admitted, its call
// started upstream.
type Flight struct {
	// The relay's state (run, relayLater), first: every response
	// touches it, and a paced one finds it out of the cache.
	wakes atomic.Int32 // wake calls not yet looked at; stays > 0 once ended
	ka    keepalive    // ka.on() false without keepalives
	r     relayer

	s      *Server
	parent context.Context // the ctx given to begin
	ctx    context.Context // the request's: parent, or its child
	cancel context.CancelCauseFunc
	own    bool // ctx is parent's child, cancelled by finish
	ob     *observation
	c      *upstream.Call
	j      *Job
	out    Sink
	active *metrics.GaugeValue
	ended  func(error) // takes what serve returns

	// What admission took (admit), which unadmit gives back: a slot
	// counted against client (limitKey), the registration for Drain, and
	// a keyed request's limits (settle; nil without a key).
	client   string
	live     LiveStream
	settle   func()
	admitted bool // taken and not yet given back
}

// Begin admits j and starts its call: Serve's steps 1 and 2. A nil flight
// comes with the error serve returns. cancel, if not nil, cancels ctx
// (a WebSocket request's: ws.Request.Cancel), whose owner cancels it once
// the request has ended; otherwise the request runs in a child of ctx
// that finish cancels.
func (s *Server) Begin(ctx context.Context, cancel context.CancelCauseFunc, conn string, j *Job, out Sink) (*Flight, error) {
	f := &Flight{s: s, parent: ctx, ctx: ctx, cancel: cancel, j: j, out: out}
	if cancel == nil {
		f.ctx, f.cancel = context.WithCancelCause(ctx)
		f.own = true
	}
	f.live = LiveStream{Hard: func() { f.cancel(ErrDraining) }, Cut: out.cut}
	if err := f.admit(conn); err != nil {
		f.release()
		return nil, err
	}
	f.ob = s.observe(f.ctx, j) // the upstream span, in ob.ctx
	var err error
	f.c, err = s.Up.Start(f.ob.ctx, j.Req)
	if err != nil {
		err = s.failed(f.ctx, ctx, f.ob, nil, j, out, err)
		f.unadmit()
		f.release()
		return nil, err
	}
	f.r = relayer{c: f.c, ob: f.ob, tr: j.Tr, out: out, pending: j.Tr.Begin()}
	f.active = s.metrics.active.With(out.protocol())
	f.active.Inc()
	return f, nil
}

// finish ends a flight whose relay returned err: Serve's step 4, the one
// end of every inference request. It returns what serve returns.
func (f *Flight) finish(err error) error {
	f.c.Notify(nil)
	f.out.countEvents() // what the last batch emitted, if it did not flush
	if err == nil {
		f.ob.end(nil, false, f.j.Tr)
		noteRequest(f.out, f.ob)
	} else {
		err = f.s.failed(f.ctx, f.parent, f.ob, f.c, f.j, f.out, err)
	}
	f.active.Dec()
	f.c.Cancel()
	f.unadmit()
	f.release()
	return err
}

// release cancels the request's context if begin made it.
func (f *Flight) release() {
	if f.own {
		f.cancel(nil)
	}
}

// run starts relaying f's call, to finish f when it ends: Serve's steps
// 3 and 4. It returns at once, with the channel that gets what serve
// returns; the caller's goroutine only waits for it: each time the call
// says it may have a response ready (Notify), the goroutine that says so
// (the upstream stream's reader, which has just queued it) relays what
// is ready there and then, as relayLater does, as long as out can write
// it without waiting (flush), and finishes f there when the call
// completed with everything out; otherwise, each time the keepalive is
// due and for any other end, a short-lived goroutine relays (step) and
// leaves.
// The caller waits a channel receive deep, in Serve's frame rather than
// run's, so its stack (grown to 8 KB by routing and parsing the request)
// halves at the next collection, and the relay's deeper frames (the
// translator, the writes) are on no goroutine while the request is
// quiet. The runtime halves a parked goroutine's stack only while it
// uses under a quarter of it, 800 bytes of margin included: a held
// HTTP/2 stream waits about 1.2 KB deep (topHandler, runShallow's rest,
// ServeSSE's run, Serve, the receive), so 16 more bytes (run's frame
// under Serve's was 96) keep its 8 KB and cost about 4 KB per held
// stream (bench --preset hold --http2). The sink sends the payloads of every response already
// queued, then flushes once (one write per batch), and out.idle is called
// whenever the request has been quiet for out.keepAlive(). The payloads
// of tr.begin wait for the first response (or the first idle), so that
// an error coming first finds the response still uncommitted and gets
// its own status.
func (f *Flight) run() <-chan error {
	done := make(chan error, 1)
	f.ended = func(err error) { done <- err }
	f.startKeepAlive()
	f.c.Notify((*readyHere)(f))
	f.wakeGo()
	return done
}

// Relay relays f's call and finishes f as run does, keepalives and all,
// with no goroutine waiting for its end: ended gets what serve returns,
// where f ends. That is on the upstream reader when the call completed
// with everything out (ended then gets nil and must not wait), and on a
// goroutine that may wait otherwise. The first step runs on the calling
// goroutine, which may wait for the client: a detached event stream's
// (serveDetached).
func (f *Flight) Relay(ended func(error)) {
	f.ended = ended
	f.startKeepAlive()
	f.c.Notify((*readyHere)(f))
	if f.wakes.Add(1) == 1 {
		f.steps(false)
	}
}

// startKeepAlive starts the keepalive timer of a sink that has one.
func (f *Flight) startKeepAlive() {
	if ka := f.out.keepAlive(); ka > 0 {
		f.ka.ka, f.ka.last = ka, clock()
		f.ka.t = time.AfterFunc(math.MaxInt64, f.wakeIdle) // set before it can fire
		f.ka.t.Reset(ka)
	}
}

// keepalive is when a quiet request is due its sink's idle call. The
// timer is not reset by every batch: a batch notes when it went out
// (last, on the clock), and the timer, when it fires, waits again for
// what is left of the interval since then. It is part of its Flight,
// beside the relay's state: a batch touches no object of its own for
// it.
type keepalive struct {
	fired atomic.Bool   // t has fired since the last step looked
	last  time.Duration // clock() at the last batch (or the start)
	// quick: the last batch went out less than coalesceGap after the
	// one before it (or the start); see hot.
	quick bool
	ka    time.Duration
	t     *time.Timer // wakes the request (wakeIdle); nil: no keepalives
}

// on says that the request has keepalives.
func (k *keepalive) on() bool { return k.t != nil }

// clockEpoch is clock's origin.
var clockEpoch = time.Now()

// clock is the time on the monotonic clock alone since clockEpoch: one
// clock read, where time.Now is two.
func clock() time.Duration { return time.Since(clockEpoch) }

// batch notes that a batch went out at now (clock).
func (k *keepalive) batch(now time.Duration) {
	k.quick = now-k.last < coalesceGap
	k.last = now
}

// coalesceGap is how close behind the last batch a response comes when
// its stream is relayed at full speed rather than paced (LLM tokens come
// 20 to 50 ms apart). Such a stream is relayed on a goroutine of its
// own, not on the upstream reader: the responses that come while it
// wakes go out in one write, where the reader would write each on its
// own.
const coalesceGap = 5 * time.Millisecond

// hot says whether the stream runs at full speed: now (clock) is less
// than coalesceGap after the last batch, and so was that batch after
// the one before it. One short gap is not enough: on a busy machine a
// paced stream's batch that went out late (its reader waited for a
// CPU) is often followed by the next one on time, and each such gap
// started a goroutine (which grew its stack in the translator) for one
// batch.
func (k *keepalive) hot(now time.Duration) bool { return k.quick && now-k.last < coalesceGap }

// due says whether the timer fired and the request has been quiet for
// the whole interval since (the timer then restarts for the next one);
// when a batch went out meanwhile the timer waits for the rest.
func (k *keepalive) due() bool {
	if !k.fired.Load() || !k.fired.Swap(false) { // no locked swap per batch
		return false
	}
	now := clock()
	if quiet := now - k.last; quiet < k.ka {
		k.t.Reset(k.ka - quiet)
		return false
	}
	k.last, k.quick = now, false // a keepalive is a gap: no batch before the next one is quick
	k.t.Reset(k.ka)
	return true
}

// wakeIdle is the keepalive timer's: the request may be due its idle.
func (f *Flight) wakeIdle() {
	f.ka.fired.Store(true)
	f.wakeGo()
}

// RelayLater relays f's call and finishes f like run, but with no
// goroutine at all between batches: each time the call says it may have
// a response ready (or has ended), the goroutine that says so (the
// upstream stream's reader, which has just queued a response) relays
// what is ready itself, unless another does already; once the call has
// ended, f is finished there (it completed) or on a goroutine of its own
// (any other end), which gives ended what serve would have returned:
// ended must not wait. It is for sinks whose writes never block and that
// need no keepalives: a WebSocket request's (its session queues the
// frames).
func (f *Flight) RelayLater(ended func(error)) {
	f.ended = ended
	f.c.Notify((*readyHere)(f))
	f.wakeHere()
}

// readyHere is a Flight as its call's upstream.Notifier: Ready is
// wakeHere, reached from the call with no closure in between (one
// object fewer to load per response).
type readyHere Flight

func (r *readyHere) Ready() { (*Flight)(r).wakeHere() }

// wakeGo steps f on a goroutine of its own unless a step runs already
// (which then steps again): run's.
func (f *Flight) wakeGo() {
	if f.wakes.Add(1) == 1 {
		go f.steps(false)
	}
}

// wakeHere steps f on the calling goroutine unless a step runs already
// (which then steps again): relayLater's.
func (f *Flight) wakeHere() {
	if f.wakes.Add(1) == 1 {
		f.steps(true)
	}
}

// steps relays whatever is ready, with out.idle when the keepalive is
// due, again while a wake came meanwhile, and finishes f once its call
// has ended: there and then when that waits for nobody (it completed,
// all out), or (here: on the goroutine that delivered the response,
// where nothing may wait for the client) on a goroutine of its own,
// which also takes over the relay when out could not write a batch at
// once or the keepalive is due, and relays a stream that runs at full
// speed (keepalive.hot) until its call has ended.
func (f *Flight) steps(here bool) {
	defer f.recoverStep(here)
	// now is read once per step on the reader: a paced stream's step is
	// one batch, and the clock is read for hot and noted for batch alike.
	var now time.Duration
	if f.ka.on() {
		now = clock()
	}
	if here && f.ka.on() && f.ka.hot(now) && !f.r.ending() {
		go f.steps(false) // wakes stays > 0: it steps in this one's place
		return
	}
	f.r.wait = !here
	for first := true; ; first = false {
		n := f.wakes.Load()
		relayed, ended, err := f.r.step()
		if here && !ended && (f.r.owed || f.ka.fired.Load()) {
			go f.steps(false) // wakes stays > 0: it steps in this one's place
			return
		}
		if !ended && f.ka.on() {
			if relayed {
				if !here || !first { // a flush that may wait took its time
					now = clock()
				}
				f.ka.batch(now)
			}
			if f.ka.due() {
				if err = f.r.sendPending(); err == nil {
					err = f.out.idle()
				}
				ended = err != nil
			}
		}
		if ended { // wakes stays > 0: no step runs again
			// A request that completed with everything out ends there and
			// then: its finish waits for nobody. Any other end may write
			// to the client (the rest of its last batch, its error).
			if here && (err != nil || f.r.owed) {
				go func() {
					defer f.recoverStep(false)
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

// end finishes f, whose relay ended with err, and hands what serve
// returns to f.ended.
func (f *Flight) end(err error) {
	if f.ka.on() {
		f.ka.t.Stop()
	}
	if err == nil && f.r.owed { // the last batch, not all out yet
		_, err = f.out.flush(true)
	}
	f.ended(f.finish(err))
}

// errRelayPanic ends a request whose relay panicked.
var errRelayPanic = &HTTPError{Status: http.StatusInternalServerError, Code: "internal", Msg: "internal error relaying the response"}

// recoverStep ends f's request when its step panicked, as net/http ends a
// handler that panics, rather than the whole process (a panic on the
// upstream reader's goroutine would end it): the panic is logged with its
// stack and f finished with errRelayPanic, which its client gets like any
// other failure (here: on a goroutine of its own, as steps ends it).
// wakes stays > 0: no step runs again. A second panic, in finish itself,
// still ends the process.
func (f *Flight) recoverStep(here bool) {
	v := recover()
	if v == nil {
		return
	}
	f.s.Log.ErrorContext(f.ctx, "panic relaying a request", "model", f.j.Req.GetModelName(),
		"panic", v, "stack", stack())
	if here {
		go f.end(errRelayPanic)
		return
	}
	f.end(errRelayPanic)
}

// failed accounts a request whose call could not start (c nil) or ended
// with err, and lets out deliver the error if it can: Serve's error path.
func (s *Server) failed(ctx, parent context.Context, ob *observation, c *upstream.Call, j *Job, out Sink, err error) error {
	err = endCause(ctx, parent, err)
	s.noteEnd(out.protocol(), err)
	if c == nil {
		ob.end(err, false, j.Tr)
		noteRequest(out, ob)
		return err
	}
	// The call may still run upstream (the client went away, a drain, a
	// bad response): cancel it now, inside its span.
	_, upstreamEnded := upstream.AsError(err)
	c.Cancel()
	ob.end(err, !upstreamEnded, j.Tr)
	noteRequest(out, ob)
	if errors.Is(err, ErrClientGone) || !out.fail(err) {
		return err
	}
	return nil
}

// admit lets f's request in, Serve's admission: not draining, under the
// limits (limitKey: its API key, else its connection conn), registered
// for Drain (f.live), then a keyed request's model allowed and its key's
// limits taken (admitKeyed). unadmit gives everything back.
func (f *Flight) admit(conn string) error {
	s := f.s
	if s.draining.Load() {
		s.metrics.rejected.With("draining").Inc()
		return ErrDraining
	}
	client := limitKey(f.ctx, conn)
	if err := s.limits.take(client); err != nil {
		reason := "global_limit"
		switch err {
		case errConnLimit:
			reason = "connection_limit"
		case errKeyLimit:
			reason = "key_limit"
		}
		s.metrics.rejected.With(reason).Inc()
		return err
	}
	if !s.streams.add(&f.live) {
		s.limits.give(client)
		s.metrics.rejected.With("draining").Inc()
		return ErrDraining
	}
	f.client, f.admitted = client, true
	if kd := keyOf(f.ctx); kd != nil {
		settle, err := s.admitKeyed(f.ctx, kd, f.j)
		if err != nil {
			f.unadmit()
			return err
		}
		f.settle = settle
	}
	return nil
}

// unadmit gives back what admit took, once: a finish that panicked
// after it (recoverStep ends the flight again) gives nothing back twice.
func (f *Flight) unadmit() {
	if !f.admitted {
		return
	}
	f.admitted = false
	if f.settle != nil {
		f.settle()
		f.settle = nil
	}
	f.s.streams.remove(&f.live)
	f.s.limits.give(f.client)
}

// endCause is why a request that failed with err ended: ErrDraining when
// Drain ended it, ErrClientGone when its client went away (its context is
// done, or a write failed), otherwise err.
func endCause(ctx, parent context.Context, err error) error {
	switch {
	case errors.Is(context.Cause(ctx), ErrDraining):
		return ErrDraining
	case parent.Err() != nil, errors.Is(err, ErrClientGone):
		return ErrClientGone
	}
	return err
}

// noteEnd counts how a request ended, when it did not succeed.
func (s *Server) noteEnd(protocol string, err error) {
	if errors.Is(err, ErrClientGone) {
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
