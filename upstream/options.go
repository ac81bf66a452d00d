package upstream

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"math"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"

	"github.com/streamgate/streamgate/upstream/budget"
)

// CancelMode says how a request is cancelled upstream.
type CancelMode int

const (
	// CancelAuto uses CancelInband on targets whose ServerMetadata
	// extensions contain "streamgate_cancel" and CancelStream elsewhere.
	CancelAuto CancelMode = iota
	// CancelInband shares streams and cancels a request by sending, on its
	// stream, a request with its id, no inputs and the parameter
	// streamgate_cancel=true. Only streamgate's engine understands it.
	CancelInband
	// CancelStream gives every request a stream of its own and cancels that
	// RPC, which any Triton honours. It gives up multiplexing.
	CancelStream
	// CancelNone shares streams and never tells the target: a cancelled
	// request stops being delivered but runs to its end upstream.
	CancelNone
)

var cancelModeNames = [...]string{"auto", "inband", "stream", "none"}

// String returns "auto", "inband", "stream" or "none".
func (m CancelMode) String() string {
	if m < 0 || int(m) >= len(cancelModeNames) {
		return fmt.Sprintf("CancelMode(%d)", int(m))
	}
	return cancelModeNames[m]
}

// ParseCancelMode parses the names String returns.
func ParseCancelMode(s string) (CancelMode, error) {
	for i, n := range cancelModeNames {
		if s == n {
			return CancelMode(i), nil
		}
	}
	return 0, fmt.Errorf("unknown cancel mode %q (want auto, inband, stream or none)", s)
}

// Defaults of the queue budgets (Options.QueueBytes, Options.Memory).
const (
	DefaultQueueBytes = 64 << 10
	DefaultMemory     = 1 << 30
)

// DefaultHealthTimeout bounds one health check (Options.HealthTimeout):
// long enough that a ServerReady on a saturated machine is still
// answered, short enough that a hung target is found down within seconds.
const DefaultHealthTimeout = 5 * time.Second

// Options configures a Client. The zero value of every field means its
// default; a nil *Options means all defaults.
type Options struct {
	// MaxStreamsPerTarget caps the pooled ModelStreamInfer streams opened
	// to one target. Default 64. Streams of CancelStream requests are not
	// pooled and not counted.
	MaxStreamsPerTarget int

	// MaxRequestsPerStream caps the requests in flight on one pooled
	// stream. Default 256, so one target carries up to 16384 requests with
	// the default stream cap. Start fails with KindRejected beyond that.
	MaxRequestsPerStream int

	// StreamFill is how many requests every open pooled stream of a
	// target carries before another opens (while below
	// MaxStreamsPerTarget). Default a quarter of MaxRequestsPerStream (64
	// by default); 1 opens a stream whenever every open one is busy.
	// Paced requests (tokens tens of milliseconds apart) then share a few
	// streams, each read of which returns the responses of many requests,
	// rather than spreading over the whole pool, where each response
	// costs a read and a wake-up of its own.
	StreamFill int

	// QueueBytes is the memory each request may hold, of its own, for
	// responses waiting for its consumer (kept as their wire bytes, about
	// 100 bytes for a token; see respQueue). Beyond it a request borrows
	// from Memory. Default 64 KiB: 10,000 streams may hold 640 MiB of
	// their own at most, on top of Memory.
	QueueBytes int

	// Memory is the budget that requests beyond their QueueBytes borrow
	// from, shared with whatever else it is given to (the gateway gives
	// the same one to its WebSocket send queues). A request whose queue
	// must grow when Memory is spent fails with KindBudget and is
	// cancelled upstream. Default: a budget of DefaultMemory of its own.
	Memory *budget.Budget

	// StallTimeout is how long a consumer may take no response while
	// responses wait for it before its request fails with KindTooSlow and
	// is cancelled upstream (checked when a response arrives). A consumer
	// that is slow but makes progress never fails for it. Default 30s;
	// negative disables the check.
	StallTimeout time.Duration

	// Cancel is the cancellation mode. Default CancelAuto.
	Cancel CancelMode

	// HealthInterval is how often each target is checked with ServerReady.
	// A target that is not ready has its streams drained. Default 2s;
	// negative disables health checks: a target ejected because its
	// streams failed is then re-admitted when a stream to it delivers a
	// response.
	HealthInterval time.Duration

	// HealthTimeout bounds one ServerReady check. Default 5s, whatever
	// HealthInterval: a check that misses it is an unanswered check, and
	// a target that answers a trivial RPC within a few seconds is up even
	// when its machine is saturated. The periodic checks never overlap:
	// the next one starts HealthInterval after the last has ended.
	HealthTimeout time.Duration

	// IdleStreamTimeout closes a pooled stream that has carried no request
	// for this long. Default 60s; negative keeps idle streams open.
	IdleStreamTimeout time.Duration

	// MetadataTTL is how long ServerMetadata, ModelMetadata and ModelConfig
	// answers are cached per target. Default 30s; negative disables caching
	// (concurrent identical lookups are still shared). Whatever the TTL,
	// the last answer of every metadata call (RepositoryIndex included) is
	// kept and served while its target is ejected, or when asking it again
	// fails because the target is unavailable or does not answer within
	// MetadataTimeout: a stopped target's models stay listed.
	MetadataTTL time.Duration

	// MetadataTimeout bounds one ServerMetadata, ModelMetadata,
	// ModelConfig or RepositoryIndex call to a target. Default 5s.
	MetadataTimeout time.Duration

	// IdleTimeout ends a request for which the target has sent nothing
	// (no response, not even its first) for this long, with
	// KindIdleTimeout, and cancels it upstream: a hung target cannot hold
	// a request forever. Silence is checked every quarter of the timeout,
	// so a request ends between 1 and 1.25 times IdleTimeout after its
	// last response. Default 60s; negative disables it.
	IdleTimeout time.Duration

	// ModelIdleTimeouts overrides IdleTimeout per model name, e.g. a long
	// time to first token for a large model on a CPU; a negative value
	// disables it for that model. Default none.
	ModelIdleTimeouts map[string]time.Duration

	// ResolveInterval is how often a "dns:///host:port" target is resolved
	// again to follow replicas coming and going. Default 30s.
	ResolveInterval time.Duration

	// KeepaliveTime is how long a connection to a target with open
	// streams may read nothing before the client pings it, and
	// KeepaliveTimeout how long the ping may go unanswered before the
	// connection is closed (its requests then fail over or end with
	// KindUnavailable): a silent target is found within their sum.
	//
	// Default 10s when health checks run more often than that (the
	// default), otherwise 6m; grpc raises anything below 10s to 10s.
	// Negative disables keepalive pings. KeepaliveTimeout default 5s.
	//
	// Triton's ping policy (grpc core's defaults: at most one ping per 5m
	// while the server sends no data, GOAWAY "too_many_pings" after two
	// strikes) forgives every ping once the server sends data. A health
	// check every HealthInterval (under 10s) is such data, and grpc pings
	// only a connection that read nothing for KeepaliveTime, so a target
	// that answers its health checks is never pinged at all; only a silent
	// one is. Without frequent health checks, idle pooled streams would be
	// pinged every KeepaliveTime, hence the 6m default then. streamgate's
	// engine allows a ping every 10s, with or without streams.
	KeepaliveTime    time.Duration
	KeepaliveTimeout time.Duration

	// StreamBackoff is the longest wait before a target whose last stream
	// broke gets a new one; waits start at a tenth of it and double.
	// Default 1s.
	StreamBackoff time.Duration

	// MaxMessageBytes limits one message in either direction. Default
	// math.MaxInt32, as Triton.
	MaxMessageBytes int

	// Transport carries the pooled ModelStreamInfer streams: TransportH2
	// on an HTTP/2 connection of each stream's own, read without grpc-go
	// (see h2Stream), or TransportGRPC on the target's grpc-go
	// connection. Default ("") TransportH2. DialOptions need
	// TransportGRPC (New refuses them otherwise): only grpc-go's
	// connection honours them.
	//
	// Health checks, metadata, every unary call and the dedicated streams
	// of CancelStream stay on grpc-go either way. TransportH2 keeps the
	// keepalive above on its own connections, with one difference: while
	// a target sends nothing on a stream, its connection is pinged once
	// and then at most every 5 minutes, within grpc core's ping policy;
	// a target that still closes one with GOAWAY "too_many_pings" has
	// both periods doubled for its new connections, as gRPC clients do.
	Transport string

	// TLS, if set, secures every target's connection with it (mutual TLS
	// when it has a client certificate). With no ServerName, a target's
	// certificate must name the host it was dialled by: for a
	// dns:///host:port target that is host, not the replica's address.
	// Nil means plaintext (insecure transport credentials).
	TLS *tls.Config

	// DialOptions are appended to the client's own (transport
	// credentials, keepalive, message limits, reconnect backoff), so they
	// can override any of them. They need Transport TransportGRPC: New
	// refuses them with TransportH2, whose connections cannot honour
	// them.
	DialOptions []grpc.DialOption

	// Logger receives stream breaks, ejections and re-admissions. Default:
	// discard.
	Logger *slog.Logger

	// MeterProvider receives the client's metrics (requests in flight and
	// streams per target, target health, retries, cancels by mode, queue
	// overflows, requests behind, queue memory and dropped responses),
	// observed from Stats at each collection. Default: none (no-op).
	MeterProvider metric.MeterProvider

	// Propagator writes the trace context of Start's ctx into each request
	// (as parameters) and of a call's ctx into gRPC metadata (dedicated
	// streams, unary calls). Default: W3C trace context (traceparent,
	// tracestate).
	Propagator propagation.TextMapPropagator
}

// idleTimeout is the idle timeout of model's requests; 0 means none.
func (o *Options) idleTimeout(model string) time.Duration {
	d, ok := o.ModelIdleTimeouts[model]
	if !ok {
		d = o.IdleTimeout
	}
	return max(d, 0)
}

// withDefaults returns a copy of o (nil allowed) with defaults filled in.
func (o *Options) withDefaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.MaxStreamsPerTarget <= 0 {
		c.MaxStreamsPerTarget = 64
	}
	if c.MaxRequestsPerStream <= 0 {
		c.MaxRequestsPerStream = 256
	}
	if c.StreamFill <= 0 {
		c.StreamFill = max(1, c.MaxRequestsPerStream/4)
	}
	c.StreamFill = min(c.StreamFill, c.MaxRequestsPerStream)
	if c.QueueBytes <= 0 {
		c.QueueBytes = DefaultQueueBytes
	}
	if c.Memory == nil {
		c.Memory = budget.New(DefaultMemory)
	}
	def(&c.StallTimeout, 30*time.Second)
	def(&c.HealthInterval, 2*time.Second)
	def(&c.HealthTimeout, DefaultHealthTimeout)
	def(&c.IdleStreamTimeout, 60*time.Second)
	def(&c.MetadataTTL, 30*time.Second)
	def(&c.MetadataTimeout, 5*time.Second)
	def(&c.IdleTimeout, 60*time.Second)
	def(&c.ResolveInterval, 30*time.Second)
	if c.HealthInterval > 0 && c.HealthInterval < 10*time.Second {
		def(&c.KeepaliveTime, 10*time.Second)
	} else {
		def(&c.KeepaliveTime, 6*time.Minute)
	}
	def(&c.KeepaliveTimeout, 5*time.Second)
	def(&c.StreamBackoff, time.Second)
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = math.MaxInt32
	}
	if c.Transport == "" {
		c.Transport = TransportH2
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MeterProvider == nil {
		c.MeterProvider = noop.NewMeterProvider()
	}
	if c.Propagator == nil {
		c.Propagator = propagation.TraceContext{}
	}
	return c
}
