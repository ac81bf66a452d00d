// Package wsapi serves the streamgate.v1 WebSocket protocol on /v1/ws:
// one ws.Session per socket, each request frame run by the core like its
// HTTP twin (generate, chat.completions, completions, responses),
// resumable requests and resume frames, and Triton sequences streamed in
// chunks. A frame's job is built by package jobs, as its HTTP twin's is:
// this surface imports no other.
package wsapi

import (
	"context"
	"net/http"

	"github.com/coder/websocket"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/streamgate/streamgate/gateway/core"
	"github.com/streamgate/streamgate/gateway/jobs"
	"github.com/streamgate/streamgate/gateway/openai"
	"github.com/streamgate/streamgate/gateway/ws"
)

// API is the /v1/ws surface, on the gateway's core.
// A frame's job comes from the builder its HTTP twin uses (package jobs).
type API struct{ *jobs.Builder }

// New returns the surface on b.
func New(b *jobs.Builder) *API { return &API{b} }

// WebSocket serves GET /v1/ws: the streamgate.v1 protocol, one ws.Session
// per socket, each request run by serve like its HTTP twin.
func (s *API) WebSocket(w http.ResponseWriter, r *http.Request) error {
	if s.Draining() {
		return core.ErrDraining
	}
	var authErr error
	if s.Opts.Keys != nil {
		ctx, _, err := s.Authenticate(r, true)
		if err == nil {
			r = r.WithContext(ctx)
		}
		authErr = err
	}
	if origin := r.Header.Get("Origin"); origin != "" && !s.Opts.WebSocketSkipOriginCheck && !s.OriginAllowed(r, origin) {
		return &core.HTTPError{Status: http.StatusForbidden, Code: "origin_not_allowed",
			Msg: "origin " + core.Truncate(origin, 128) + " may not open /v1/ws from a browser (see --origins)"}
	}
	c, err := ws.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols:       []string{ws.Subprotocol},
		InsecureSkipVerify: true, // originAllowed has checked it
	})
	if err != nil {
		return nil // Accept has answered the client
	}
	if c.Subprotocol() != ws.Subprotocol {
		c.Close(websocket.StatusPolicyViolation, "the client must speak "+ws.Subprotocol)
		return nil
	}
	if authErr != nil {
		s.refuseSocket(r, c, authErr)
		return nil
	}
	opts := ws.Options{}
	if s.Opts.WebSocket != nil {
		opts = *s.Opts.WebSocket
	}
	opts.ErrorInfo = core.WSErrorInfo
	sess := ws.NewSession(c, func(ctx context.Context, req *ws.Request, emit func([]byte) error) error {
		return s.Request(ctx, r, req, emit)
	}, &opts)
	// Cancelling Run's context closes the connection at once: Drain's cut
	// for a socket whose client does not read.
	ctx, cut := context.WithCancel(r.Context())
	defer cut()
	remove, ok := s.AddStream(&core.LiveStream{Soft: sess.Drain, Hard: sess.Stop, Cut: cut})
	if !ok {
		c.Close(websocket.StatusGoingAway, "server shutting down")
		return nil
	}
	defer remove()
	defer s.CountSocket()()
	// Run returns once the socket is closed and every request on it ended.
	sess.Run(ctx)
	return nil
}

// Request runs one request frame on the socket upgraded by r (the
// session's ws.Handler) in its own server span, a child of the socket's.
// A plain streaming request waits for its responses without a goroutine
// (flight.relayLater: req.Later); the others end before it returns.
func (s *API) Request(ctx context.Context, r *http.Request, req *ws.Request, emit func([]byte) error) error {
	ctx, span := s.Tracer.Start(ctx, core.WSSpanName(req.Type), trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("streamgate.ws.request_id", req.ID))
	}
	var err error
	switch req.Type {
	case ws.TypeSequenceStart:
		err = s.wsSequence(ctx, req, emit)
	case ws.TypeResume:
		err = s.WSResume(ctx, req, emit)
	default:
		var later bool
		if later, err = s.wsInfer(ctx, r, span, req, emit); later {
			return nil
		}
	}
	s.wsEnd(ctx, r, span, err)
	return err
}

// wsEnd logs the error that ended a WebSocket request (nil: none) and
// ends its span.
func (s *API) wsEnd(ctx context.Context, r *http.Request, span trace.Span, err error) {
	if err != nil {
		s.LogError(ctx, r, err, http.StatusSwitchingProtocols)
	}
	core.EndSpan(span, err)
}

// wsInfer runs an inference request frame (generate, chat.completions,
// completions, responses). later says it goes on after wsInfer returns,
// and will end itself (wsEnd, then the function req.Later gave).
func (s *API) wsInfer(ctx context.Context, r *http.Request, span trace.Span, req *ws.Request, emit func([]byte) error) (later bool, err error) {
	out := s.NewWSSink(emit)
	var j *core.Job
	if s.ResumableAsked(req.Resumable) {
		if j, err = s.wsJob(ctx, req); err != nil {
			return false, err
		}
		return false, s.WSResumable(ctx, req, j, out)
	}
	if j, err = s.wsJob(ctx, req); err != nil {
		return false, err
	}
	req.Body = nil // parsed: not kept while the request runs
	f, err := s.Begin(ctx, req.Cancel, "", j, out)
	if f == nil {
		return false, err
	}
	end := req.Later()
	f.RelayLater(func(err error) {
		s.wsEnd(ctx, r, span, err)
		end(err)
	})
	return true, nil
}

// wsJob validates a request frame into a job: the body is the same as on
// the frame type's HTTP route, the payloads are data frames.
func (s *API) wsJob(ctx context.Context, req *ws.Request) (*core.Job, error) {
	switch req.Type {
	case ws.TypeGenerate:
		return s.GenerateJob(ctx, req.Model, req.Version, req.Body, core.FormWS)
	case ws.TypeChat:
		cr, err := openai.ParseChat(req.Body)
		if err != nil {
			return nil, err
		}
		return s.ChatJob(ctx, cr, core.FormWS)
	case ws.TypeCompletions:
		cr, err := openai.ParseCompletion(req.Body)
		if err != nil {
			return nil, err
		}
		return s.CompletionJob(ctx, cr, core.FormWS)
	case ws.TypeResponses:
		rr, err := openai.ParseResponses(req.Body)
		if err != nil {
			return nil, err
		}
		if rr.Background {
			return nil, &core.HTTPError{Status: http.StatusBadRequest, Code: "unsupported_parameter", Param: "background",
				Msg: "Unsupported parameter: 'background' is not supported on the WebSocket: create background responses with POST /v1/responses."}
		}
		return s.ResponsesJob(ctx, rr, core.FormWS)
	}
	// ws.ParseFrame lets no other type through.
	return nil, &core.HTTPError{Status: http.StatusBadRequest, Code: ws.CodeBadRequest, Msg: "unknown frame type '" + req.Type + "'"}
}

// refuseSocket answers a socket whose upgrade had no valid API key (or
// whose key the store could not check): one error frame, before any
// request runs, then the close (1008, or 1013 to try again later).
func (s *API) refuseSocket(r *http.Request, c *ws.Conn, err error) {
	e := s.LogError(r.Context(), r, err, http.StatusSwitchingProtocols)
	ctx, cancel := context.WithTimeout(r.Context(), s.Opts.StopTimeout)
	defer cancel()
	c.WriteText(ctx, ws.ErrorFrame("", e.Code, e.Msg))
	code := websocket.StatusPolicyViolation
	if e.Status == http.StatusServiceUnavailable {
		code = websocket.StatusTryAgainLater
	}
	c.Close(code, e.Code)
}
