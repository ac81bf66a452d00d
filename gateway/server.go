package gateway

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/streamgate/streamgate/gateway/detach"
	"github.com/streamgate/streamgate/gateway/metrics"
	"github.com/streamgate/streamgate/gateway/openai"
	"github.com/streamgate/streamgate/gateway/playground"
	"github.com/streamgate/streamgate/gateway/resume"
	"github.com/streamgate/streamgate/gateway/sse"
	"github.com/streamgate/streamgate/gateway/store"
	"github.com/streamgate/streamgate/gateway/ws"
	"github.com/streamgate/streamgate/upstream"
	"github.com/streamgate/streamgate/upstream/budget"
)

// Options configures a Server. A nil *Options, and every zero field, means
// the default stated on the field.
type Options struct {
	// Logger receives failures the client is not shown. Default: discard.
	Logger *slog.Logger

	// MaxBodyBytes limits a request body; a larger one gets 413.
	// Default 1 MiB.
	MaxBodyBytes int64

	// BodyTimeout and BodyMinRate bound how long a request body may take
	// to arrive: BodyTimeout, plus one second per BodyMinRate bytes
	// received. A body slower than that gets 408 and its connection is
	// closed, so that clients trickling bodies cannot hold connections.
	// Defaults 10s and 16 KiB/s (a full 1 MiB body may take 74s); a
	// negative BodyTimeout disables the deadline.
	BodyTimeout time.Duration
	BodyMinRate int64

	// MaxStreams limits the inference requests in flight through this
	// gateway (streams, non-streaming requests and WebSocket requests
	// alike); beyond it requests get 503 with Retry-After. Default 4096.
	MaxStreams int

	// MaxStreamsPerConn limits the inference requests in flight from one
	// client: one API key when the request has one (then across all its
	// connections, WebSockets included), otherwise one connection (an
	// HTTP/2 connection carries many); beyond it requests get 429 with
	// Retry-After. WebSocket requests without a key are limited per
	// socket by WebSocket.MaxInFlight instead. HTTP2Config sets HTTP/2's
	// own stream limit to match. Default 64.
	MaxStreamsPerConn int

	// RetryAfter is the Retry-After sent with 429 and 503, rounded up to
	// whole seconds. Default 1s.
	RetryAfter time.Duration

	// SSE configures every event stream (keepalive interval, queue, write
	// timeout). Nil means sse's defaults (keepalive every 15s).
	SSE *sse.Options

	// WebSocket configures /v1/ws sessions. Nil means ws's defaults
	// (64 requests per socket, 1 MiB frames, pings every 30s). ErrorInfo
	// is always set by the gateway.
	WebSocket *ws.Options

	// WebSocketOriginPatterns are more cross-origin hosts allowed to open
	// /v1/ws, as path.Match patterns of the Origin's host[:port]; the
	// origins of CORSOrigins may too. Default: same origin only.
	WebSocketOriginPatterns []string

	// WebSocketSkipOriginCheck accepts sockets from any origin. Default
	// false: cross-origin browser pages are refused.
	WebSocketSkipOriginCheck bool

	// CORSOrigins are the origins whose browser pages may call the
	// gateway: the HTTP routes (CORS) and /v1/ws, as path.Match patterns
	// of the Origin header or of its host[:port]:
	// "https://app.example.com", "*.example.org", "*". Preflights are
	// answered on every route. Default none: no CORS headers, and
	// preflights get 405.
	CORSOrigins []string

	// AllowedHosts are the names (path.Match patterns of the Host
	// header's name, "*" for any) an open gateway answers besides
	// localhost, names under .localhost and IP addresses; any other Host
	// gets 403 host_not_allowed, so that a page whose name rebinds to the
	// gateway's address cannot use it. With Keys the Host is checked only
	// when AllowedHosts is set. Default none.
	AllowedHosts []string

	// ChatTemplate is the default chat template source (Go text/template,
	// see openai.Template), for models whose config carries no Jinja chat
	// template of its own (parameters chat_template, bos_token and
	// eos_token, as Triton's OpenAI frontend reads them; see
	// gateway/chattemplate). Default openai.DefaultTemplate.
	ChatTemplate string

	// ChatTemplates overrides ChatTemplate, and a model's own chat
	// template, per model name, e.g. {"stories260k": openai.RawTemplate}.
	// Default none.
	ChatTemplates map[string]string

	// UnloadedModels names models this deployment knows but upstream may
	// not have loaded (e.g. weights not downloaded), each with a hint for
	// the client, such as how to get the weights. A request for one that
	// upstream does not know gets 404 with code "model_not_loaded" and
	// "The model 'NAME' is known but not loaded: HINT" instead of "does not
	// exist", on /v1 and /v2 alike. Default none.
	UnloadedModels map[string]string

	// ReadyTimeout bounds the upstream ServerReady check of /readyz.
	// Default 2s.
	ReadyTimeout time.Duration

	// StopTimeout is how long the requests and sockets Drain ended (its
	// context done) may take to deliver their last error event, body or
	// close frame before their connections are cut, so that a client that
	// does not read cannot hold Drain. Default 1s.
	StopTimeout time.Duration

	// Now is the clock used for the "created" field of OpenAI responses.
	// Default time.Now.
	Now func() time.Time

	// TracerProvider makes the gateway's spans: one server span per HTTP
	// request and per WebSocket request, one client span per upstream
	// call. Default: none (a no-op provider; a caller's traceparent still
	// travels upstream).
	TracerProvider trace.TracerProvider

	// MeterProvider holds the gateway's instruments (requests, streams,
	// rejections, GenAI latencies and token usage). Default: none (no-op).
	MeterProvider metric.MeterProvider

	// Propagator reads the caller's trace context from request headers.
	// Default: W3C trace context (traceparent, tracestate).
	Propagator propagation.TextMapPropagator

	// Metrics serves GET /metrics: the exposition of MeterProvider's
	// readings (cmd/internal/telemetry builds it). Default: none; /metrics
	// answers 404.
	Metrics http.Handler

	// Resumable says which event streams (and WebSocket requests) are
	// resumable: ResumableOptIn, those that ask (Streamgate-Resumable:
	// true, or "resumable": true in a WebSocket request frame);
	// ResumableAlways, every one; ResumableNever, none (asking is
	// ignored). Default ResumableOptIn.
	Resumable string

	// ResumeGrace is how long a resumable stream's request runs on once
	// its client has left, waiting for a reader, before it is cancelled.
	// Default 30s.
	ResumeGrace time.Duration

	// ResumeTTL is how long a resumable stream's log is kept after its
	// end. Default 10m.
	ResumeTTL time.Duration

	// ResumeLease is how long a replica's lease on a stream it produces
	// lasts unless renewed (every third of it): readers of a stream whose
	// replica died end with stream_lost within about this long. Default
	// 5s.
	ResumeLease time.Duration

	// ResumeFlushInterval is how long a resumable stream's events gather
	// before they go to the store in one write (resume.Options'
	// FlushInterval); negative writes each batch at once. Default 150ms.
	ResumeFlushInterval time.Duration

	// ResumeMemory, when set, bounds the bytes of every resumable
	// stream's events waiting for the store (resume.Options' Memory):
	// the --queue-memory budget the relay queues share.
	ResumeMemory *budget.Budget

	// Store is the state shared with other replicas: resumable stream
	// logs, API keys and per-key limits, stored responses (store.Open).
	// Default: a new in-process store (store.NewMemory). Its owner closes
	// it.
	Store store.Store

	// ResponseTTL is how long a stored response (POST /v1/responses with
	// store, OpenAI's default) can be read, continued and cancelled after
	// it was last written (its end). Default 24h.
	ResponseTTL time.Duration

	// KeyStorage is the bytes of stored responses an API key may keep
	// (their records, until they expire or are deleted), unless the key
	// sets its own (store.Key.Storage); beyond it POST /v1/responses with
	// store gets 400 storage_limit_exceeded. Default DefaultKeyStorage.
	KeyStorage int64

	// StorageCap is the bytes of stored responses the gateway keeps for
	// every key (or, open, every client) together; beyond it POST
	// /v1/responses with store gets 400 storage_limit_exceeded. Default
	// DefaultStorageCap.
	StorageCap int64

	// Keys are the API keys requests must present (Authorization: Bearer,
	// or on /v1/ws the subprotocol streamgate.key.KEY); each key's limits
	// are kept in Store. Default nil: the gateway is open and requests
	// need no key.
	Keys store.Keys

	// Detach, when set, is the listener the gateway's http.Server serves
	// (a detach.Listener around its own): event streams over plaintext
	// HTTP/1.1 then leave net/http once validated, run on a goroutine of
	// their own over the raw connection (package detach), and hand the
	// connection back through Detach when they end, for keep-alive.
	// Default nil: streams stay in net/http's handler goroutine.
	Detach *detach.Listener
}

func (o *Options) withDefaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.BodyTimeout == 0 {
		c.BodyTimeout = 10 * time.Second
	}
	if c.BodyMinRate <= 0 {
		c.BodyMinRate = 16 << 10
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = 4096
	}
	if c.MaxStreamsPerConn <= 0 {
		c.MaxStreamsPerConn = 64
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = time.Second
	}
	if c.ChatTemplate == "" {
		c.ChatTemplate = openai.DefaultTemplate
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = 2 * time.Second
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.TracerProvider == nil {
		c.TracerProvider = tracenoop.NewTracerProvider()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = metricnoop.NewMeterProvider()
	}
	if c.Propagator == nil {
		c.Propagator = propagation.TraceContext{}
	}
	if c.Store == nil {
		c.Store = store.NewMemory()
	}
	if c.ResponseTTL <= 0 {
		c.ResponseTTL = DefaultResponseTTL
	}
	if c.KeyStorage <= 0 {
		c.KeyStorage = DefaultKeyStorage
	}
	if c.StorageCap <= 0 {
		c.StorageCap = DefaultStorageCap
	}
	if c.Resumable == "" {
		c.Resumable = ResumableOptIn
	}
	return c
}

// Server is the HTTP edge. Its Handler may serve any number of requests
// concurrently; Drain may be called once, from any goroutine. Each request
// runs in its handler goroutine, except the event streams Options.Detach
// takes from net/http, which run on a goroutine of their own (and one that
// reads their connection) from their handler's return to their end;
// WebSocket sessions end with their socket. Nothing outlives the requests
// that started it.
type Server struct {
	up      *upstream.Client // starts the inference calls
	inspect Inspector        // up, but for tests (canned clients inspect nothing)
	opts    Options
	log     *slog.Logger
	tracer  trace.Tracer
	prop    propagation.TextMapPropagator

	router    chi.Router
	limits    *limiter
	streams   *registry
	draining  atomic.Bool
	metrics   *gatewayMetrics
	templates map[string]*openai.Template
	template  *openai.Template
	jinja     jinjaTemplates // models' own chat templates (chatprompt.go)
	ids       idSource
	resume    *resume.Manager
	running   runningResponses // stored responses running here
}

// New returns a gateway in front of up. It panics if a chat template in
// opts does not parse (a wiring error).
func New(up *upstream.Client, opts *Options) *Server {
	return newServer(up, up, opts)
}

// newServer is New with inspect answering the /v2 and /v1/models
// questions instead of up (tests: upstreamtest's canned clients start
// calls but know no models).
func newServer(up *upstream.Client, inspect Inspector, opts *Options) *Server {
	o := opts.withDefaults()
	s := &Server{
		up:        up,
		inspect:   inspect,
		opts:      o,
		log:       slog.New(requestIDHandler{o.Logger.Handler()}),
		limits:    newLimiter(o.MaxStreams, o.MaxStreamsPerConn),
		streams:   newRegistry(),
		tracer:    o.TracerProvider.Tracer(scope),
		prop:      o.Propagator,
		metrics:   newGatewayMetrics(metrics.New(o.MeterProvider.Meter(scope))),
		template:  openai.MustParseTemplate("default", o.ChatTemplate),
		templates: map[string]*openai.Template{},
		ids:       newIDSource(),
		running:   runningResponses{m: map[string]*runningResponse{}},
	}
	s.resume = resume.New(o.Store, &resume.Options{
		Grace: o.ResumeGrace, TTL: o.ResumeTTL, Lease: o.ResumeLease, Logger: o.Logger,
		FlushInterval: o.ResumeFlushInterval, Memory: o.ResumeMemory,
		StoreError: func(op string) { s.metrics.storeErrs.With(op).Inc() },
	})
	for model, src := range o.ChatTemplates {
		s.templates[model] = openai.MustParseTemplate(model, src)
	}
	s.router = s.routes()
	return s
}

// Handler returns the gateway's HTTP handler (all routes of openapi.yaml).
// Serve it without a server-wide WriteTimeout: streams set their own
// deadlines.
func (s *Server) Handler() http.Handler { return topHandler{s.router} }

// topHandler is the router, and after it what a request's handler left to
// run at the top of its goroutine's stack (runShallow). It gives the
// router the request's statusWriter, which instrument completes.
type topHandler struct{ chi.Router }

func (h topHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w, top: r}
	h.Router.ServeHTTP(sw, r)
	if sw.rest != nil {
		sw.rest()
	}
}

func (s *Server) routes() chi.Router {
	r := chi.NewRouter()
	r.Use(s.instrument, s.guard, s.cors)
	r.NotFound(s.noRoute)
	r.MethodNotAllowed(s.noRoute)

	r.Method(http.MethodGet, "/", playground.Handler())
	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	r.Get("/metrics", s.metricsHandler)

	triton := func(h handlerFunc) http.HandlerFunc { return s.handle(tritonErrors, h) }
	openAI := func(h handlerFunc) http.HandlerFunc { return s.handle(openAIErrors, h) }
	r.Get("/v2", triton(s.serverMetadata))
	r.Get("/v2/health/live", s.serverLive)
	r.Get("/v2/health/ready", s.serverReady)
	r.Post("/v2/repository/index", triton(s.repositoryIndex))
	r.Get("/v2/models/stats", triton(s.modelStats))
	for _, base := range []string{"/v2/models/{model}", "/v2/models/{model}/versions/{version}"} {
		r.Get(base, triton(s.modelMetadata))
		r.Get(base+"/ready", triton(s.modelReady))
		r.Post(base+"/generate", triton(s.generate))
		r.Post(base+"/generate_stream", triton(s.generateStream))
		r.Post(base+"/infer", triton(s.infer))
		r.Get(base+"/config", triton(s.modelConfigJSON))
		r.Get(base+"/stats", triton(s.modelStats))
	}

	r.Post("/v1/chat/completions", openAI(s.chatCompletions))
	r.Post("/v1/completions", openAI(s.completions))
	r.Post("/v1/responses", openAI(s.createResponse))
	r.Get("/v1/responses/{id}", openAI(s.getResponse))
	r.Delete("/v1/responses/{id}", openAI(s.deleteResponse))
	r.Post("/v1/responses/{id}/cancel", openAI(s.cancelResponse))
	r.Get("/v1/responses/{id}/input_items", openAI(s.responseInputItems))
	r.Get("/v1/models", openAI(s.listModels))
	r.Get("/v1/models/{id}", openAI(s.getModel))
	r.Get("/v1/ws", s.handleOpen(tritonErrors, s.websocket))
	r.Get("/v1/streams/{sid}", tokenQuery(openAI(s.getStream)))
	r.Delete("/v1/streams/{sid}", openAI(s.deleteStream))
	return r
}

// noRoute answers a request that no route takes, in the error format of
// the API its path belongs to (OpenAI's under /v1, Triton's elsewhere):
// 405 with Allow when the path has routes for other methods, else 404.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if s.router.Match(chi.NewRouteContext(), m, path) {
			allowed = append(allowed, m)
		}
	}
	e := &httpError{Status: http.StatusNotFound, Code: "not_found",
		Msg: "no route for " + r.Method + " " + r.URL.Path + s.routeHint(r.Method, r.URL.Path)}
	if len(allowed) > 0 {
		list := strings.Join(allowed, ", ")
		w.Header().Set("Allow", list)
		e.Status, e.Code = http.StatusMethodNotAllowed, "method_not_allowed"
		e.Msg = "method " + r.Method + " is not allowed on " + r.URL.Path + " (allowed: " + list + ")"
	}
	writeJSON(w, e.Status, pathErrors(r)(e))
}

// pathErrors is the error format of the API r's path belongs to, for
// answers given before a route is known: OpenAI's under /v1, else
// Triton's.
func pathErrors(r *http.Request) errorFormat {
	if isOpenAIPath(r.URL.Path) {
		return openAIErrors
	}
	return tritonErrors
}

// isOpenAIPath reports whether path belongs to the OpenAI API (/v1).
func isOpenAIPath(path string) bool {
	return path == "/v1" || strings.HasPrefix(path, "/v1/")
}
