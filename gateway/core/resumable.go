package core

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/streamgate/streamgate/gateway/openai"
	"github.com/streamgate/streamgate/gateway/resume"
	"github.com/streamgate/streamgate/gateway/sse"
	"github.com/streamgate/streamgate/gateway/store"
	"github.com/streamgate/streamgate/gateway/ws"
)

// Resumable streams (DESIGN.md "Scale-out"): a streaming request that asks
// (or every one, per Options.Resumable) is logged to the shared store
// through a resume.Producer as it is sent, runs on for the grace period
// when its client leaves, and can be read again from any replica with
// GET /v1/streams/{sid} or a WebSocket resume frame, and cancelled with
// DELETE /v1/streams/{sid}. The machinery (log, lease, cancel, grace) is
// package resume; this file is the HTTP side.

// Options.Resumable values.
const (
	ResumableOptIn  = "opt-in"
	ResumableAlways = "always"
	ResumableNever  = "never"
)

// Headers of resumable streams.
const (
	HeaderResumable = "Streamgate-Resumable"
	HeaderStreamID  = "Streamgate-Stream-Id"
	HeaderLastEvent = "Last-Event-ID"
)

// Stream formats (store.StreamMeta.Format): how a stream's events and
// errors are written.
const (
	FormatOpenAI    = "openai"
	FormatTriton    = "triton"
	FormatResponses = "responses" // the Responses API's named semantic events
)

// formatErrors is the error format of a stream format.
func formatErrors(format string) ErrorFormat {
	if format == FormatTriton {
		return TritonErrors
	}
	return OpenAIErrors
}

var (
	errStreamNotFound = &HTTPError{Status: http.StatusNotFound, Code: "stream_not_found", Msg: "no such stream: it never existed, has expired, or belongs to another API key"}
	errStreamLost     = &HTTPError{Status: http.StatusBadGateway, Code: "stream_lost", Msg: "the stream was lost: the replica producing it is gone, and the events above are all that were stored"}
	errStreamTrimmed  = &HTTPError{Status: http.StatusGone, Code: "stream_truncated", Msg: "the events asked for are no longer stored"}
	// errStreamCancelled is the error event that ends an event stream
	// cancelled by DELETE /v1/streams/{sid}, for its live client and for
	// every reader: a cancel is no normal finish.
	errStreamCancelled = &HTTPError{Status: http.StatusConflict, Code: "cancelled", Msg: "cancelled: the stream was cancelled, by DELETE /v1/streams/{sid} or for want of a reader within the grace period"}
)

// classifyResume maps the errors of resumable streams, and the shared
// store's unavailability whatever found it (classify calls it).
func classifyResume(err error) *HTTPError {
	switch {
	case errors.Is(err, resume.ErrNotFound):
		return errStreamNotFound
	case errors.Is(err, resume.ErrLost):
		return errStreamLost
	case errors.Is(err, store.ErrTrimmed):
		return errStreamTrimmed
	case errors.Is(err, store.ErrUnavailable):
		return errStore(err)
	}
	return nil
}

// ParseResumable reads a Streamgate-Resumable header (or the WebSocket
// flag's text): "true" or "false" in any case, or empty for not asked.
func ParseResumable(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "":
		return false, nil
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, &HTTPError{Status: http.StatusBadRequest, Code: "invalid_value", Param: HeaderResumable,
		Msg: "header " + HeaderResumable + " must be true or false, not '" + Truncate(v, 64) + "'"}
}

// ParseLastEventID reads the id a stream read resumes after: the
// Last-Event-ID header, else the last_event_id query parameter, else 0
// (from the start).
func ParseLastEventID(header, query string) (uint64, error) {
	v, name := header, HeaderLastEvent
	if v == "" {
		v, name = query, "last_event_id"
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, &HTTPError{Status: http.StatusBadRequest, Code: "invalid_value", Param: name,
			Msg: name + " must be the id of an event of the stream (a whole number), not '" + Truncate(v, 64) + "'"}
	}
	return n, nil
}

// Truncate is s cut to n bytes, with an ellipsis when cut: what an error
// message quotes of a client's input.
func Truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// ResumableAsked is whether a request that asked (or not) gets a
// resumable stream under Options.Resumable.
func (s *Server) ResumableAsked(asked bool) bool {
	switch s.Opts.Resumable {
	case ResumableAlways:
		return true
	case ResumableNever:
		return false
	}
	return asked
}

// ServeSSE runs j as an event stream in error format errs (its stream
// format: format), resumable when the request asks and Options.Resumable
// allows it.
func (s *Server) ServeSSE(w http.ResponseWriter, r *http.Request, j *Job, errs ErrorFormat, format string, firstErrorAsEvent bool) error {
	asked, err := ParseResumable(r.Header.Get(HeaderResumable))
	if err != nil {
		return err
	}
	resumable := s.ResumableAsked(asked)
	if !resumable && s.serveDetached(w, r, j, errs, firstErrorAsEvent) {
		return nil
	}
	run := func(w http.ResponseWriter, r *http.Request) error {
		out := s.NewSSESink(w, r, errs, firstErrorAsEvent)
		if !resumable {
			return s.Serve(r.Context(), r.RemoteAddr, j, out)
		}
		return s.serveResumable(r, j, out, errs, format)
	}
	if s.DetachStream(w, r, errs, run) {
		return nil
	}
	return run(w, r)
}

// serveResumable is ServeSSE for a resumable stream (apart, so that the
// frame of a plain stream stays small: see serve).
func (s *Server) serveResumable(r *http.Request, j *Job, out *SSESink, errs ErrorFormat, format string) error {
	w := out.w
	// The request no longer ends with its client: it ends on its own, on
	// a cancel, or when the grace period runs out with nobody reading.
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
	defer cancel(nil)
	p := s.StartLog(r.Context(), format, out, cancel)
	w.Header().Set(HeaderStreamID, p.ID())
	stop := context.AfterFunc(r.Context(), p.Detach)
	defer stop()
	err := s.Serve(ctx, r.RemoteAddr, j, out)
	if errors.Is(context.Cause(ctx), resume.ErrCancelled) && format != FormatResponses {
		// The error event takes the end event's id, as readers of the
		// log get it (followStream); it is not logged itself.
		id := p.NextID()
		s.EndLog(p, ctx, err, out, errs)
		if out.gone || !out.started {
			return ErrClientGone
		}
		out.countEvents()
		out.sw.SetNextID(id)
		out.append(errs(errStreamCancelled))
		if out.sw.Flush() == nil {
			out.events.Inc()
		}
		return nil
	}
	s.EndLog(p, ctx, err, out, errs)
	if err != nil && out.gone {
		return ErrClientGone
	}
	return err
}

// WSResumable runs a WebSocket request as a resumable stream: its first
// data frame names the stream; a socket that closes leaves it running
// for the grace period, a cancel frame cancels it.
func (s *Server) WSResumable(ctx context.Context, req *ws.Request, j *Job, out *WSSink) error {
	dctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	p := s.StartLog(ctx, WSFormat(req), out, cancel)
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(context.Cause(ctx), ws.ErrCancelled) {
			cancel(resume.ErrCancelled)
			return
		}
		p.Detach()
	})
	defer stop()
	req.SetSeq(p.NextID() - 1)
	out.announce = func() {
		<-p.Created() // the stream id goes out once others can find it
		req.Announce(p.ID())
	}
	err := s.Serve(dctx, "", j, out)
	s.EndLog(p, dctx, err, out, nil)
	if errors.Is(context.Cause(dctx), resume.ErrCancelled) {
		return ws.ErrCancelled
	}
	return err
}

// WSResume serves a resume frame, admitted as a new request is (its key
// looked up again, its limits taken): the stream's events after req.After
// as data frames (seq = event id - 1), then the live ones, then the
// stream's own terminal frame.
func (s *Server) WSResume(ctx context.Context, req *ws.Request, emit func([]byte) error) error {
	done, err := s.AdmitFrame(ctx)
	if err != nil {
		return err
	}
	defer done()
	rd, err := s.Resume.Open(ctx, req.Stream, CallerKey(ctx), req.After)
	if err != nil {
		return err
	}
	s.metrics.resumes.With("ws").Inc()
	for {
		events, err := rd.Next(ctx, followWait)
		if err != nil {
			return err
		}
		for _, e := range events {
			switch e.End {
			case resume.EndFinal:
				return nil
			case resume.EndCancelled:
				return ws.ErrCancelled
			case resume.EndError:
				var d struct{ Code, Message string }
				if json.Unmarshal(e.Data, &d) != nil || d.Code == "" {
					d.Code, d.Message = "internal", "internal error"
				}
				return &ws.FrameError{ID: req.ID, Code: d.Code, Message: d.Message}
			case "":
			default:
				return nil
			}
			if string(e.Data) == "[DONE]" { // an event stream's end marker, not data
				continue
			}
			req.SetSeq(e.ID - 1)
			if err := emit(e.Data); err != nil {
				return err
			}
		}
	}
}

// StartLog starts a resumable stream in format, owned by ctx's caller,
// whose log gets every payload out sends from now on (the producer glue
// every resumable route shares: event streams, WebSocket requests,
// background responses). cancel is called when the stream is cancelled
// or abandoned; EndLog closes the log.
func (s *Server) StartLog(ctx context.Context, format string, out LoggedSink, cancel context.CancelCauseFunc) *resume.Producer {
	p := s.Resume.Start(store.StreamMeta{Owner: CallerKey(ctx), Format: format}, cancel)
	out.logTo(p)
	return p
}

// EndLog closes a resumable stream's log with how its request ended: err
// as Serve returned it into out, whose logged error event (if any) ended
// the log; errs is the event format of an error logged here (nil: no
// event, as on WebSocket, whose errors are terminal frames).
func (s *Server) EndLog(p *resume.Producer, ctx context.Context, err error, out LoggedSink, errs ErrorFormat) {
	cause := context.Cause(ctx)
	failed := out.logFailed()
	switch {
	case errors.Is(cause, resume.ErrCancelled), errors.Is(cause, resume.ErrAbandoned):
		p.Close(resume.EndCancelled, nil)
	case failed != nil:
		p.Close(resume.EndError, EndDetail(failed))
	case err != nil && !errors.Is(err, ErrClientGone):
		// Refused before it started (limits, upstream): the log says why.
		e := Classify(err)
		if errs != nil {
			p.Append(errs(e))
		}
		p.Close(resume.EndError, EndDetail(e))
	default:
		p.Close(resume.EndFinal, nil)
	}
}

// EndDetail is an error end event's Data: {"code","message"}, what a
// WebSocket reader's error frame says.
func EndDetail(e *HTTPError) []byte {
	b, _ := json.Marshal(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{e.Code, e.Msg})
	return b
}

// followWait is how long one read of a followed stream waits for events.
const followWait = time.Second

// FollowStream answers r with the events of stream sid after id after,
// then the live ones until its end, as an event stream in the stream's
// format (GET /v1/streams/{sid}, and GET /v1/responses/{id}?stream=true
// for a background response's stream).
func (s *Server) FollowStream(w http.ResponseWriter, r *http.Request, sid string, after uint64) error {
	if s.draining.Load() {
		return ErrDraining
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	rd, err := s.Resume.Open(ctx, sid, CallerKey(ctx), after)
	if err != nil {
		return err
	}
	events, err := rd.Next(ctx, 0)
	if err != nil && !errors.Is(err, resume.ErrLost) {
		return err
	}
	named := rd.Meta().Format == FormatResponses
	// A stream ended before the first event read: 204, which stops an
	// EventSource, unless it was cancelled and this reader has not yet
	// seen its cancel event (which carries the end event's id).
	if err == nil && len(events) == 1 && events[0].End != "" &&
		(events[0].End != resume.EndCancelled || named || events[0].ID <= after) {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	sw := sse.NewWriter(w, s.Opts.SSE)
	remove, ok := s.streams.Add(&LiveStream{Hard: func() { cancel(ErrDraining) }, Cut: sw.Abort})
	if !ok {
		return ErrDraining
	}
	defer remove()
	s.metrics.resumes.With("sse").Inc()
	if sw.Start() != nil {
		return nil
	}
	errs := formatErrors(rd.Meta().Format)
	if named { // the Responses API's error event, numbered after the last event sent
		errs = func(e *HTTPError) []byte { return openai.ErrorEvent(int(rd.After()), e.Code, e.Msg, e.Param) }
	}
	ka := sw.KeepAliveInterval()
	quiet := time.Now()
	for {
		if err != nil {
			if ctx.Err() != nil && !errors.Is(context.Cause(ctx), ErrDraining) {
				return nil // the client left
			}
			if errors.Is(context.Cause(ctx), ErrDraining) {
				err = ErrDraining
			}
			e := s.LogError(ctx, r, err, http.StatusOK)
			sw.SetNextID(rd.After()) // an error is no event of the stream: it repeats the last id
			if named {
				sw.AppendNamed([]byte("error"), errs(e))
			} else {
				sw.Append(errs(e))
			}
			_ = sw.Flush()
			return nil
		}
		for _, e := range events {
			if e.End == resume.EndCancelled && !named && e.ID > after {
				sw.SetNextID(e.ID)
				sw.Append(errs(errStreamCancelled))
			}
			if e.End != "" {
				_ = sw.Flush()
				return nil
			}
			sw.SetNextID(e.ID)
			if named {
				sw.AppendNamed(eventType(e.Data), e.Data)
			} else {
				sw.Append(e.Data)
			}
		}
		if len(events) > 0 {
			if sw.Flush() != nil {
				return nil
			}
			quiet = time.Now()
		} else if ka > 0 && time.Since(quiet) >= ka {
			if sw.KeepAlive() != nil {
				return nil
			}
			quiet = time.Now()
		}
		wait := followWait
		if ka > 0 {
			wait = min(wait, ka)
		}
		events, err = rd.Next(ctx, wait)
	}
}

// WSFormat is the stream format of a WebSocket request's payloads.
func WSFormat(req *ws.Request) string {
	if req.Type == ws.TypeGenerate {
		return FormatTriton
	}
	return FormatOpenAI
}
