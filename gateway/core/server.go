package core

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/go-chi/chi/v5"
	"github.com/streamgate/streamgate/gateway/detach"
	"github.com/streamgate/streamgate/gateway/metrics"
	"github.com/streamgate/streamgate/gateway/openai"
	"github.com/streamgate/streamgate/gateway/resume"
	"github.com/streamgate/streamgate/gateway/sse"
	"github.com/streamgate/streamgate/gateway/store"
	"github.com/streamgate/streamgate/gateway/ws"
	"github.com/streamgate/streamgate/upstream"
	"github.com/streamgate/streamgate/upstream/budget"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
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
	// lasts unless renewed (every third of it). A reader says stream_lost
	// only once the lease has stayed gone for a whole lease (a hung Redis
	// must not make a live producer look dead), so readers of a stream
	// whose replica died end with stream_lost within about twice this
	// long. Default 5s.
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
	// HTTP/1.1 then leave net/http once validated, run over the raw
	// connection (package detach) with no goroutine of their own but the
	// one that reads it, and hand the connection back through Detach when
	// they end, for keep-alive.
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

// Server is the core every API surface builds on: the options, the
// upstream client, admission (limits, keys, drain), the shared state
// (resumable streams, ids) and the instruments. Its methods run a
// request's life (Serve, Begin), read and check requests (ReadBody,
// Authenticate) and answer errors (Handle, WriteJSON's callers).
type Server struct {
	Up      *upstream.Client // starts the inference calls
	Inspect Inspector        // up, but for tests (canned clients inspect nothing)
	Opts    Options
	Log     *slog.Logger
	Tracer  trace.Tracer
	prop    propagation.TextMapPropagator
	// propKeys are the headers prop reads, in canonical form: a request
	// with none of them has no trace context to extract.
	propKeys []string

	limits   *limiter
	streams  *registry // what Drain ends: every running request, socket and stream
	draining atomic.Bool
	metrics  *gatewayMetrics
	IDs      IDSource
	Resume   *resume.Manager
}

// New returns the core of a gateway in front of up, with inspect
// answering the /v2 and /v1/models questions (up itself in production;
// in tests, whose canned clients start calls but know no models, a
// stand-in).
func New(up *upstream.Client, inspect Inspector, opts *Options) *Server {
	o := opts.withDefaults()
	s := &Server{
		Up:      up,
		Inspect: inspect,
		Opts:    o,
		Log:     slog.New(requestIDHandler{o.Logger.Handler()}),
		limits:  newLimiter(o.MaxStreams, o.MaxStreamsPerConn),
		streams: newRegistry(),
		Tracer:  o.TracerProvider.Tracer(scope),
		prop:    o.Propagator,
		metrics: newGatewayMetrics(metrics.New(o.MeterProvider.Meter(scope))),
		IDs:     newIDSource(),
	}
	s.propKeys = canonicalKeys(o.Propagator.Fields())
	s.Resume = resume.New(o.Store, &resume.Options{
		Grace: o.ResumeGrace, TTL: o.ResumeTTL, Lease: o.ResumeLease, Logger: o.Logger,
		FlushInterval: o.ResumeFlushInterval, Memory: o.ResumeMemory,
		StoreError: func(op string) { s.metrics.StoreErrs.With(op).Inc() },
	})
	return s
}

// TopHandler is the router, and after it what a request's handler left to
// run at the top of its goroutine's stack (runShallow). It gives the
// router the request's statusWriter, which instrument completes.
type TopHandler struct{ chi.Router }

// ServeHTTP routes r, then runs what its handler left to run (runShallow).
func (h TopHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	growStack(0)
	sw := &statusWriter{ResponseWriter: w, top: r}
	h.Router.ServeHTTP(sw, r)
	if sw.rest != nil {
		sw.rest()
	}
}

// canonicalKeys is keys as net/http keys its header map.
func canonicalKeys(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = http.CanonicalHeaderKey(k)
	}
	return out
}

// growStack grows the calling goroutine's stack to what a request's
// handler reaches anyway, 8 KB, while it is still shallow: every request
// passes the trace propagator's header reads (startServerSpan) at about
// 4 KB deep, and a stack grown there is copied frame by frame, a dozen of
// them, on every request (each connection handed back by a detached
// stream is a new goroutine with a new stack). Grown here, the copy holds
// net/http's few frames. The frame is sized so that the stack doubles
// once, not twice: to 8 KB, not 16.
//
//go:noinline
func growStack(i int) byte {
	var pad [3 << 10]byte
	pad[i&(len(pad)-1)] = byte(i)
	return pad[(i+1)&(len(pad)-1)]
}

// PathErrors is the error format of the API r's path belongs to, for
// answers given before a route is known: OpenAI's under /v1, else
// Triton's.
func PathErrors(r *http.Request) ErrorFormat {
	if isOpenAIPath(r.URL.Path) {
		return OpenAIErrors
	}
	return TritonErrors
}

// isOpenAIPath reports whether path belongs to the OpenAI API (/v1).
func isOpenAIPath(path string) bool {
	return path == "/v1" || strings.HasPrefix(path, "/v1/")
}

// Defaults of Options.ResponseTTL, KeyStorage and StorageCap.
const (
	DefaultResponseTTL = 24 * time.Hour
	DefaultKeyStorage  = 64 << 20
	DefaultStorageCap  = 1 << 30
)

// Draining says whether Drain has been called: new requests are refused.
func (s *Server) Draining() bool { return s.draining.Load() }

// AddStream registers e with what Drain ends; ok is false once the
// gateway drains (e is not added). remove takes it out at its end.
func (s *Server) AddStream(e *LiveStream) (remove func(), ok bool) { return s.streams.Add(e) }

// CountSocket counts an open WebSocket until done is called.
func (s *Server) CountSocket() (done func()) {
	g := s.metrics.Sockets.With()
	g.Inc()
	return g.Dec
}

// NewWSSink returns the sink of a WebSocket request whose payloads go
// out through emit (as data frames), counted as the route's events.
func (s *Server) NewWSSink(emit func([]byte) error) *WSSink {
	return &WSSink{Emit: emit, Events: s.metrics.Events.With("ws")}
}
