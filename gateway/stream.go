package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/streamgate/streamgate/gateway/sse"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/upstream"
)

// translator turns one call's responses into payloads, each one JSON
// value: an SSE event's data, a WebSocket data frame's "data", or the body
// of a non-streaming response.
type translator interface {
	// begin gives the payloads due once the call has started.
	begin() [][]byte
	// next gives the payloads for one response. They (and the slice) are
	// only valid until the next call: callers copy them out first.
	next(resp *pb.ModelInferResponse) ([][]byte, error)
	// end gives the payloads due after the last response.
	end() ([][]byte, error)
}

// job is a validated request, ready to start upstream.
type job struct {
	req *pb.ModelInferRequest
	tr  translator
}

// pump runs j's translator over c until the call ends, handing each
// payload to emit.
func pump(ctx context.Context, c call, tr translator, emit func([]byte) error) error {
	for _, p := range tr.begin() {
		if err := emit(p); err != nil {
			return err
		}
	}
	for {
		resp, err := c.RecvTick(ctx, nil)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		ps, err := tr.next(resp)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if err := emit(p); err != nil {
				return err
			}
		}
	}
	ps, err := tr.end()
	if err != nil {
		return err
	}
	for _, p := range ps {
		if err := emit(p); err != nil {
			return err
		}
	}
	return nil
}

// admit lets one inference request in: not draining, under the limits,
// registered for Drain (hard ends it). done gives everything back.
func (s *Server) admit(conn string, hard func()) (done func(), err error) {
	if s.draining.Load() {
		s.metrics.rejected.With("draining").Inc()
		return nil, errDraining
	}
	release, err := s.limits.acquire(conn)
	if err != nil {
		reason := "global_limit"
		if err == errConnLimit {
			reason = "connection_limit"
		}
		s.metrics.rejected.With(reason).Inc()
		return nil, err
	}
	remove, ok := s.streams.add(&liveStream{hard: hard})
	if !ok {
		release()
		s.metrics.rejected.With("draining").Inc()
		return nil, errDraining
	}
	return func() { remove(); release() }, nil
}

// route is how one HTTP route reports errors.
type route struct {
	// writeError answers before a stream has started.
	writeError func(w http.ResponseWriter, r *http.Request, err error)
	// errorEvent is the payload of an in-band error event.
	errorEvent func(e *httpError) []byte
	// done, if set, is the last event of a successful stream.
	done []byte
	// firstErrorAsEvent answers an error that is the first response with
	// its status and an event-stream body of one error event (Triton's
	// generate_stream); otherwise writeError answers it.
	firstErrorAsEvent bool
}

// endCause says why ctx ended: errDraining, errClientGone or nil.
func endCause(ctx context.Context, reqCtx context.Context) error {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errDraining):
		return errDraining
	case reqCtx.Err() != nil, errors.Is(cause, errClientGone):
		return errClientGone
	}
	return nil
}

// noteEnd counts how a request ended.
func (s *Server) noteEnd(protocol string, err error) {
	if err == nil {
		return
	}
	if errors.Is(err, errClientGone) {
		s.metrics.clientGone.With(protocol).Inc()
		return
	}
	if ue, ok := upstream.AsError(err); ok {
		s.metrics.upstream.With(ue.Kind.String()).Inc()
	}
}

// serveSSE runs j as an event stream. Errors before upstream accepted the
// request are answered by rt.writeError with their status; later ones
// become one in-band error event that ends the stream.
func (s *Server) serveSSE(w http.ResponseWriter, r *http.Request, j *job, rt route) {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	done, err := s.admit(r.RemoteAddr, func() { cancel(errDraining) })
	if err != nil {
		rt.writeError(w, r, err)
		return
	}
	defer done()
	c, err := s.start(ctx, j.req)
	if err != nil {
		rt.writeError(w, r, err)
		return
	}
	defer c.Cancel()
	// Like Triton, let the first response set the status: an error that
	// comes first is answered with its status, not inside a 200 stream.
	c, err = firstResponse(ctx, c, s.sseKeepAlive())
	if err != nil {
		if cause := endCause(ctx, r.Context()); cause != nil {
			err = cause
		}
		s.noteEnd("sse", err)
		switch {
		case errors.Is(err, errClientGone):
		case rt.firstErrorAsEvent:
			e := s.logError(r, err)
			sse.SetHeaders(w.Header())
			w.WriteHeader(e.Status)
			_, _ = w.Write(sse.AppendEvent(nil, 0, rt.errorEvent(e)))
		default:
			rt.writeError(w, r, err)
		}
		return
	}
	active := s.metrics.active.With("sse")
	active.Inc()
	defer active.Dec()

	// This goroutine is the stream's only writer: it reads the call and
	// writes the events itself, so a response crosses one goroutine
	// hand-off (upstream reader → here) on its way to the socket.
	sw := sse.NewWriter(w, s.opts.SSE)
	events := s.metrics.events.With("sse")
	err = sw.Start()
	if err == nil {
		err = relaySSE(ctx, c, j.tr, sw, rt.done, events.Inc)
	}
	if err == nil {
		return
	}
	if cause := endCause(ctx, r.Context()); cause != nil {
		err = cause
	}
	s.noteEnd("sse", err)
	if errors.Is(err, errClientGone) {
		return
	}
	e := s.logError(r, err)
	sw.Append(rt.errorEvent(e))
	if sw.Flush() == nil {
		events.Inc()
	}
}

// maxBatch bounds how many bytes of events relaySSE buffers before it
// flushes, however many responses are ready.
const maxBatch = 32 << 10

// relaySSE runs tr over c into sw: it appends the events of every response
// already queued, then flushes once (one write and one flush per batch),
// and writes a keepalive whenever the stream has been quiet for sw's
// interval. done, if set, is the last event of a successful stream. A
// failed write returns errClientGone; other errors (the call's, ctx's)
// return with the events before them still buffered, for the caller's
// error event to follow in the same flush.
func relaySSE(ctx context.Context, c call, tr translator, sw *sse.Writer, done []byte, counted func()) error {
	emit := func(ps [][]byte) {
		for _, p := range ps {
			sw.Append(p)
			counted()
		}
	}
	flush := func() error {
		if err := sw.Flush(); err != nil {
			return errClientGone
		}
		return nil
	}
	emit(tr.begin())
	var tick <-chan time.Time
	ka := sw.KeepAliveInterval()
	var timer *time.Timer
	if ka > 0 {
		timer = time.NewTimer(ka)
		defer timer.Stop()
		tick = timer.C
	}
	for {
		if err := flush(); err != nil {
			return err
		}
		resp, err := c.RecvTick(ctx, tick)
		if resp == nil && err == nil { // quiet for ka
			if sw.KeepAlive() != nil {
				return errClientGone
			}
			timer.Reset(ka)
			continue
		}
		for {
			if err == io.EOF {
				ps, err := tr.end()
				if err != nil {
					return err
				}
				emit(ps)
				if done != nil {
					emit([][]byte{done})
				}
				return flush()
			}
			if err != nil {
				return err
			}
			ps, terr := tr.next(resp)
			if terr != nil {
				return terr
			}
			emit(ps)
			if sw.Buffered() >= maxBatch {
				break
			}
			var ok bool
			if resp, ok, err = c.TryRecv(); !ok {
				break
			}
		}
		if timer != nil {
			timer.Reset(ka)
		}
	}
}

// serveUnary runs j and answers its one payload as application/json.
func (s *Server) serveUnary(w http.ResponseWriter, r *http.Request, j *job, writeError func(http.ResponseWriter, *http.Request, error)) {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	done, err := s.admit(r.RemoteAddr, func() { cancel(errDraining) })
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer done()
	c, err := s.start(ctx, j.req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer c.Cancel()
	active := s.metrics.active.With("http")
	active.Inc()
	defer active.Dec()

	var body []byte
	err = pump(ctx, c, j.tr, func(p []byte) error { body = p; return nil })
	if err != nil {
		if cause := endCause(ctx, r.Context()); cause != nil {
			err = cause
		}
		s.noteEnd("http", err)
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

// firstResponse waits up to wait for c's first response before the stream
// starts, so that an error coming first can still get its HTTP status. If
// nothing comes within wait the stream starts anyway and keepalive comments
// cover the rest of the wait. The returned call replays what was read.
func firstResponse(ctx context.Context, c call, wait time.Duration) (call, error) {
	if wait <= 0 {
		return c, nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	resp, err := c.RecvTick(ctx, t.C)
	switch {
	case resp == nil && err == nil:
		return c, nil // still waiting for the first response
	case err == nil, err == io.EOF:
		return &replayCall{call: c, resp: resp, err: err}, nil
	}
	return nil, err
}

// replayCall returns one response read ahead, then continues the call.
type replayCall struct {
	call
	resp   *pb.ModelInferResponse
	err    error
	played bool
}

func (r *replayCall) RecvTick(ctx context.Context, tick <-chan time.Time) (*pb.ModelInferResponse, error) {
	if !r.played {
		r.played = true
		return r.resp, r.err
	}
	return r.call.RecvTick(ctx, tick)
}

func (r *replayCall) TryRecv() (*pb.ModelInferResponse, bool, error) {
	if !r.played {
		r.played = true
		return r.resp, true, r.err
	}
	return r.call.TryRecv()
}

// sseKeepAlive is how long an event stream may wait for its first response
// before its headers go out: the keepalive interval (default 15s).
func (s *Server) sseKeepAlive() time.Duration {
	if o := s.opts.SSE; o != nil && o.KeepAlive > 0 {
		return o.KeepAlive
	}
	return 15 * time.Second
}
