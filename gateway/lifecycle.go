package gateway

import (
	"context"
	"errors"
	"io"
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
func (s *Server) serve(ctx context.Context, conn string, j *job, out sink) error {
	// serve's frame (and relay's, below it) stays on the stack of a
	// streaming request for its whole life, under net/http's and the
	// router's: the admission and the error paths are functions of their
	// own so that the frames stay small. A handler goroutine that waits
	// using under 4 KB of stack keeps an 8 KB stack; one that waits deeper
	// keeps 16 KB, which is most of what a held stream costs.
	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done, err := s.admitJob(ctx, conn, j, &liveStream{hard: func() { cancel(errDraining) }, cut: out.cut})
	if err != nil {
		return err
	}
	defer done()
	ob := s.observe(ctx, j) // the upstream span, in ob.ctx
	c, err := s.start(ob.ctx, j.req)
	if err != nil {
		return s.failed(ctx, parent, ob, nil, j, out, err)
	}
	defer c.Cancel()
	active := s.active(out.protocol())
	defer active.Dec()

	err = relay(ctx, ob.call(c), j.tr, out)
	if err == nil {
		ob.end(nil, false, j.tr)
		return nil
	}
	return s.failed(ctx, parent, ob, c, j, out, err)
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
		return err
	}
	// The call may still run upstream (the client went away, a drain, a
	// bad response): cancel it now, inside its span.
	_, upstreamEnded := upstream.AsError(err)
	c.Cancel()
	ob.end(err, !upstreamEnded, j.tr)
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
	send := func(ps [][]byte) error {
		for _, p := range ps {
			if err := out.send(p); err != nil {
				return err
			}
		}
		return nil
	}
	pending := tr.begin()
	sendPending := func() error {
		err := send(pending)
		pending = nil
		return err
	}
	var tick <-chan time.Time
	ka := out.keepAlive()
	var timer *time.Timer
	if ka > 0 {
		timer = time.NewTimer(ka)
		defer timer.Stop()
		tick = timer.C
	}
	for {
		resp, err := c.RecvTick(ctx, tick)
		if resp == nil && err == nil { // quiet for ka
			if err := sendPending(); err != nil {
				return err
			}
			if err := out.idle(); err != nil {
				return err
			}
			timer.Reset(ka)
			continue
		}
		if err == nil || err == io.EOF {
			if err := sendPending(); err != nil {
				return err
			}
		}
		for {
			if err == io.EOF {
				ps, terr := tr.end()
				if terr != nil {
					return terr
				}
				if err := send(ps); err != nil {
					return err
				}
				return finish(out)
			}
			if err != nil {
				return err
			}
			ps, terr := tr.next(resp)
			if terr != nil {
				return terr
			}
			if err := send(ps); err != nil {
				return err
			}
			var ok bool
			if resp, ok, err = c.TryRecv(); !ok {
				break
			}
		}
		if err := out.flush(); err != nil {
			return err
		}
		if timer != nil {
			timer.Reset(ka)
		}
	}
}
