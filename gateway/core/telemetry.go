package core

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/streamgate/streamgate/gateway/metrics"
	"github.com/streamgate/streamgate/upstream"
)

// The gateway's traces and metrics. Spans: a server span per HTTP request
// (instrument) and per WebSocket request (wsRequest), and a client span
// per upstream call covering its whole life (observe, from serve). Metrics:
// gatewayMetrics, recorded where each thing happens.

// scope is the instrumentation scope of the gateway's tracer and meter.
const scope = "github.com/streamgate/streamgate/gateway"

// tokenBuckets are those of gen_ai.client.token.usage in the semantic
// conventions.
var tokenBuckets = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576}

// GenAI attribute names (semantic conventions).
var (
	attrModel     = string(semconv.GenAIRequestModelKey)
	attrOperation = string(semconv.GenAIOperationNameKey)
	attrTokenType = string(semconv.GenAITokenTypeKey)
	attrErrorType = string(semconv.ErrorTypeKey)
)

// gatewayMetrics are the gateway's instruments (see package metrics for
// adding one). The upstream client and the engine declare their own. The
// buckets of the duration histograms are the process's (a view in
// cmd/internal/telemetry, for every layer).
type gatewayMetrics struct {
	requests   *metrics.Counter // route, code
	active     *metrics.Gauge   // protocol: sse, http, ws
	Sockets    *metrics.Gauge
	draining   *metrics.Gauge
	Events     *metrics.Counter // protocol
	rejected   *metrics.Counter // reason
	clientGone *metrics.Counter // protocol
	slowClient *metrics.Counter // protocol
	upstream   *metrics.Counter // kind
	resumes    *metrics.Counter // protocol

	rateLimited *metrics.Counter // limit: requests, tokens, concurrency
	StoreErrs   *metrics.Counter // op

	// GenAI semantic conventions, by model and operation.
	ttft     *metrics.Histogram // model, operation
	tpot     *metrics.Histogram // model, operation
	duration *metrics.Histogram // model, operation, error type ("" on success)
	tokens   *metrics.Histogram // model, operation, token type
}

func newGatewayMetrics(r *metrics.Registry) *gatewayMetrics {
	return &gatewayMetrics{
		requests:    r.Counter("streamgate.gateway.http_requests", "{request}", "HTTP requests by route pattern and status (101 for WebSocket upgrades).", "route", "code"),
		active:      r.Gauge("streamgate.gateway.active_requests", "{request}", "Inference requests in flight, by protocol (sse, http, ws).", "protocol"),
		Sockets:     r.Gauge("streamgate.gateway.websocket_connections", "{connection}", "Open WebSocket connections."),
		draining:    r.Gauge("streamgate.gateway.draining", "", "1 from the start of the gateway's drain (SIGTERM) until the process ends."),
		Events:      r.Counter("streamgate.gateway.stream_events", "{event}", "Events written to SSE streams and WebSocket data frames, by protocol.", "protocol"),
		rejected:    r.Counter("streamgate.gateway.rejected", "{request}", "Inference requests refused before reaching upstream, by reason.", "reason"),
		clientGone:  r.Counter("streamgate.gateway.client_gone", "{request}", "Requests cancelled upstream because the client went away or cancelled, by protocol.", "protocol"),
		slowClient:  r.Counter("streamgate.gateway.slow_clients", "{request}", "Requests ended because their client did not read its responses fast enough, by protocol.", "protocol"),
		rateLimited: r.Counter("streamgate.gateway.rate_limited", "{request}", "Keyed requests refused with 429 by their API key's limits, by limit (requests, tokens, concurrency).", "limit"),
		StoreErrs:   r.Counter("streamgate.gateway.store_errors", "{error}", "Failed operations on the shared store (Redis), by operation.", "op"),
		resumes:     r.Counter("streamgate.gateway.resumes", "{stream}", "Resumable streams read again from their log (GET /v1/streams/{sid}, WebSocket resume frames), by protocol.", "protocol"),
		upstream:    r.Counter("streamgate.gateway.upstream_errors", "{request}", "Requests that ended with an upstream error, by kind (a client too slow for its responses counts in slow_clients instead).", "kind"),

		ttft: r.Histogram("gen_ai.server.time_to_first_token", "s",
			"Time from the gateway taking a request to its first response, for successful requests.",
			nil, attrModel, attrOperation),
		tpot: r.Histogram("gen_ai.server.time_per_output_token", "s",
			"Time per output token after the first, for successful text requests.",
			nil, attrModel, attrOperation),
		duration: r.Histogram("gen_ai.server.request.duration", "s",
			"Time from the gateway taking a request to its end; error.type names the failure.",
			nil, attrModel, attrOperation, attrErrorType),
		tokens: r.Histogram("gen_ai.client.token.usage", "{token}",
			"Tokens per text request, by gen_ai.token.type (input, output), as the model counted them.",
			tokenBuckets, attrModel, attrOperation, attrTokenType),
	}
}

// Operations (gen_ai.operation.name) of the jobs.
const (
	OpChat       = "chat"            // /v1/chat/completions, WebSocket chat.completions
	OpCompletion = "text_completion" // /v1/completions, WebSocket completions
	OpGenerate   = "generate"        // Triton's generate and generate_stream
)

// Instrument runs every HTTP request in its server span, continuing the
// caller's traceparent, and counts it by route pattern and status.
func (s *Server) Instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ctx, span := s.startServerSpan(r)
		sw, ok := w.(*statusWriter) // topHandler's
		if !ok {
			sw = &statusWriter{ResponseWriter: w}
		}
		sw.span, sw.start, sw.routed = span, start, r.Context()
		if isOpenAIPath(r.URL.Path) {
			ctx = s.nameRequest(ctx, sw, span, start)
		}
		if ctx != r.Context() {
			r = r.WithContext(ctx)
		}
		next.ServeHTTP(sw, r)
		if !sw.detached { // else the detached goroutine ends it
			s.endServerSpan(ctx, r, sw, routePattern(r))
		}
	})
}

// routePattern is the route r matched, "unmatched" if none. It reads
// chi's routing context, which chi reuses once the request's handler has
// returned.
func routePattern(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
		return rc.RoutePattern()
	}
	return "unmatched"
}

// The kinds of the request's and the upstream call's spans, made once
// (an option is an interface value: made per span, it is allocated).
var (
	serverKind = trace.WithSpanKind(trace.SpanKindServer)
	clientKind = trace.WithSpanKind(trace.SpanKindClient)
)

// startServerSpan and endServerSpan are instrument's work before and after
// the request.
//
// A span that is not recorded and has no valid context (no tracing, no
// traceparent) leaves r's context as it is: a context holding it would
// tell nothing, and the request copy that carries it would stay for a
// held stream's whole life.
func (s *Server) startServerSpan(r *http.Request) (context.Context, trace.Span) {
	ctx := r.Context()
	for _, k := range s.propKeys {
		if _, ok := r.Header[k]; ok {
			ctx = s.prop.Extract(ctx, propagation.HeaderCarrier(r.Header))
			break
		}
	}
	extracted := ctx != r.Context()
	ctx, span := s.Tracer.Start(ctx, r.Method, serverKind)
	if !extracted && !span.IsRecording() && !span.SpanContext().IsValid() {
		return r.Context(), span
	}
	if span.IsRecording() {
		span.SetAttributes(
			semconv.HTTPRequestMethodKey.String(r.Method),
			semconv.URLPath(r.URL.Path),
			semconv.NetworkPeerAddress(r.RemoteAddr),
			semconv.UserAgentOriginal(r.UserAgent()),
		)
	}
	return ctx, span
}

func (s *Server) endServerSpan(ctx context.Context, r *http.Request, sw *statusWriter, route string) {
	span := sw.span
	code := sw.status
	if code == 0 {
		code = StatusClientClosed // nothing was written: the client left
	}
	if span.IsRecording() {
		span.SetName(r.Method + " " + route)
		span.SetAttributes(semconv.HTTPRoute(route), semconv.HTTPResponseStatusCode(code))
		if code >= 500 && code != StatusClientClosed {
			span.SetStatus(codes.Error, http.StatusText(code))
		}
	}
	span.End()
	s.metrics.requests.With(route, codeLabel(code)).Inc()
	s.logRequest(ctx, r, sw, route, code, time.Since(sw.start))
}

// codeLabel is code in decimal, the requests counter's label, without
// allocating for the codes HTTP defines.
func codeLabel(code int) string {
	if code >= 100 && code < len(codeLabels) {
		return codeLabels[code]
	}
	return strconv.Itoa(code)
}

var codeLabels = func() (t [600]string) {
	for c := 100; c < len(t); c++ {
		t[c] = strconv.Itoa(c)
	}
	return t
}()

// logRequest writes the request's one line, at its end: INFO, but DEBUG
// for the probes and scrapes that come every few seconds (/healthz,
// /readyz, /metrics) when they succeed.
func (s *Server) logRequest(ctx context.Context, r *http.Request, sw *statusWriter, route string, code int, took time.Duration) {
	level := slog.LevelInfo
	switch r.URL.Path {
	case "/healthz", "/readyz", "/metrics":
		if code < 400 {
			level = slog.LevelDebug
		}
	}
	h := s.Log.Handler()
	if !h.Enabled(ctx, level) {
		return
	}
	// The record is built here rather than by the Logger, which would
	// walk the stack for a caller's address that no handler here writes.
	rec := slog.NewRecord(time.Now(), level, "request", 0)
	rec.AddAttrs(slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("route", route), slog.Int("status", code))
	if sw.model != "" {
		rec.AddAttrs(slog.String("model", sw.model))
	}
	if sw.counted {
		rec.AddAttrs(slog.Int("tokens", sw.tokens))
	}
	rec.AddAttrs(slog.Duration("duration", took))
	_ = h.Handle(ctx, rec) // as the Logger: a log that fails has nobody to tell
}

// noteRequest tells the log line of the HTTP request that out writes to
// (if any: a WebSocket's requests have none of their own) the model ob
// asked for and the tokens it generated.
func noteRequest(out Sink, ob *observation) {
	if sw := instrumented(out.writer()); sw != nil {
		sw.model = ob.model
		if ob.outTokens >= 0 {
			sw.tokens, sw.counted = ob.outTokens, true
		}
	}
}

// nameRequest gives an OpenAI request its id, as OpenAI's conventions
// want: every answer names its request (X-Request-Id), and those that are
// not streams say how long they took (from start). It returns ctx
// carrying the id.
func (s *Server) nameRequest(ctx context.Context, sw *statusWriter, span trace.Span, start time.Time) context.Context {
	id := s.IDs.Next("req")
	sw.Header().Set("X-Request-Id", id)
	sw.since = start
	if span.IsRecording() {
		span.SetAttributes(attribute.StringSlice("http.response.header.x-request-id", []string{id}))
	}
	return withRequestID(ctx, id)
}

type requestIDCtx struct{}

// withRequestID returns ctx carrying the id of its OpenAI request (the
// x-request-id its answer carries).
func withRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDCtx{}, id)
}

// requestID is the x-request-id of the request with context ctx, "" if
// it has none (routes outside /v1).
func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDCtx{}).(string)
	return id
}

// requestIDHandler adds the request_id of the OpenAI request in a
// record's context (requestID) to every line the gateway logs with it.
type requestIDHandler struct{ slog.Handler }

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := requestID(ctx); id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestIDHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(as)}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}

// WSSpanName is the name of a WebSocket request's server span.
func WSSpanName(typ string) string {
	switch typ {
	case "generate":
		return "WS generate"
	case "chat.completions":
		return "WS chat.completions"
	case "completions":
		return "WS completions"
	case "responses":
		return "WS responses"
	case "sequence.start":
		return "WS sequence"
	}
	return "WS request"
}

// EndSpan sets span's status from err, the error a request or call ended
// with (nil: success), and ends it.
func EndSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		typ, msg := errorType(err)
		span.SetAttributes(semconv.ErrorTypeKey.String(typ))
		span.SetStatus(codes.Error, msg)
	}
	span.End()
}

// errorType names err for error.type and a span's status: "cancelled" for
// a client that went away, "draining", the kind of an upstream error, or
// the error's code.
func errorType(err error) (typ, msg string) {
	switch {
	case errors.Is(err, ErrClientGone):
		return "cancelled", "cancelled: the client went away"
	case errors.Is(err, ErrDraining):
		return "draining", "ended by the gateway's drain"
	}
	if ue, ok := upstream.AsError(err); ok {
		return ue.Kind.String(), ue.Error()
	}
	e := Classify(err)
	if e.Code == "" {
		return strconv.Itoa(e.Status), e.Msg
	}
	return e.Code, e.Msg
}

// observation is the telemetry of one inference request from Serve's
// start: the upstream span (a child of the request's server span, in
// ctx) and the GenAI measurements. Serve's goroutine owns it.
type observation struct {
	ctx       context.Context // carries span: the upstream call's context
	span      trace.Span
	m         *gatewayMetrics
	model, op string
	start     time.Time
	first     time.Time // of the first response
	responses int
	outTokens int // generated tokens, once end has run; -1 when not counted
}

// observe starts the telemetry of j, a request just admitted.
func (s *Server) observe(ctx context.Context, j *Job) *observation {
	model := j.Req.GetModelName()
	o := &observation{m: s.metrics, model: model, op: j.Op, start: time.Now()}
	o.ctx, o.span = s.Tracer.Start(ctx, j.Op, clientKind)
	if !o.span.IsRecording() && !o.span.SpanContext().IsValid() {
		o.ctx = ctx // as startServerSpan: a context holding it tells nothing
	}
	if o.span.IsRecording() {
		o.span.SetName(j.Op + " " + model) // as the GenAI conventions name it
		o.span.SetAttributes(
			semconv.GenAIRequestModel(model),
			semconv.GenAIOperationNameKey.String(j.Op),
			semconv.RPCSystemNameGRPC,
			semconv.RPCMethod("inference.GRPCInferenceService/ModelStreamInfer"),
		)
	}
	return o
}

// response notes one response from upstream. more says whether the
// observation needs to see the later ones: only a recording span counts
// them all (its streamgate.responses); otherwise the first is all it
// uses (time to first token), and the relay spares a paced stream's
// every response a visit to this cold object.
func (o *observation) response() (more bool) {
	if o.responses++; o.responses == 1 {
		o.first = time.Now()
		o.span.AddEvent("first_response")
	}
	return o.span.IsRecording()
}

// end records how the request ended (err nil: success) and ends the
// span. cancelled says that serve cancelled the call upstream. tr is the
// job's translator: a text model's tells the tokens and finish reason.
func (o *observation) end(err error, cancelled bool, tr Translator) {
	now := time.Now()
	m := o.m
	if cancelled {
		reason, _ := errorType(err)
		o.span.AddEvent("cancel", trace.WithAttributes(attribute.String("reason", reason)))
	}
	var in, out int = -1, -1
	var finish string
	if u, ok := tr.(UsageReporter); ok {
		finish, in, out = u.Outcome()
	}
	o.outTokens = out
	if o.span.IsRecording() {
		o.span.SetAttributes(attribute.Int("streamgate.responses", o.responses))
		if finish != "" {
			o.span.SetAttributes(semconv.GenAIResponseFinishReasons(finish))
		}
		if in >= 0 {
			o.span.SetAttributes(semconv.GenAIUsageInputTokens(in))
		}
		if out >= 0 {
			o.span.SetAttributes(semconv.GenAIUsageOutputTokens(out))
		}
	}
	errType := ""
	if err != nil {
		errType, _ = errorType(err)
	}
	m.duration.With(o.model, o.op, errType).Record(o.ctx, now.Sub(o.start).Seconds())
	if err == nil && o.responses > 0 {
		m.ttft.With(o.model, o.op).Record(o.ctx, o.first.Sub(o.start).Seconds())
		if out > 1 {
			m.tpot.With(o.model, o.op).Record(o.ctx, now.Sub(o.first).Seconds()/float64(out-1))
		}
	}
	if err == nil {
		if in >= 0 {
			m.tokens.With(o.model, o.op, "input").Record(o.ctx, float64(in))
		}
		if out >= 0 {
			m.tokens.With(o.model, o.op, "output").Record(o.ctx, float64(out))
		}
	}
	EndSpan(o.span, err)
}

// UsageReporter is implemented by the translators of text models: what
// the model said of a request once it ended. in is -1 when the model did
// not count the prompt.
type UsageReporter interface {
	Outcome() (finishReason string, in, out int)
}
