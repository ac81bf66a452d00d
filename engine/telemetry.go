package engine

import (
	"context"
	"encoding/binary"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/streamgate/streamgate/engine/backend"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tracectx"
)

// The engine's traces and metrics. A request's span (kind server) is the
// child of the trace context it arrives with: its traceparent parameter
// (a shared stream, where each request has its own) or else its RPC's
// gRPC metadata. It has one event per streamed response of a text model
// (each is a piece of generated text), and two
// children drawn from the call's timings when it ends: "queue" (waiting
// for a model instance) and "execute" (the backend's work). Metrics are
// per model: queue depth and wait, requests by outcome and their duration,
// and what a backend with its own scheduler reports through
// backend.Metrics (llama2: batch size, tokens, KV slots).

// scope is the instrumentation scope of the engine's tracer and meter.
const scope = "github.com/streamgate/streamgate/engine"

// Request outcomes (the "outcome" attribute of streamgate.engine.requests).
const (
	outcomeOK = iota
	outcomeError
	outcomeCancelled
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "error", "cancelled"}

// engineMetrics are the engine's instruments.
type engineMetrics struct {
	queueDepth metric.Int64ObservableGauge
	queueWait  metric.Float64Histogram
	requests   metric.Int64Counter
	duration   metric.Float64Histogram
	batch      metric.Int64Histogram
	tokens     metric.Int64Counter
	kvUsed     metric.Int64Gauge
	kvTotal    metric.Int64Gauge
}

func newEngineMetrics(m metric.Meter) (*engineMetrics, error) {
	var err error
	keep := func(e error) {
		if err == nil {
			err = e
		}
	}
	em := &engineMetrics{}
	em.queueDepth, err = m.Int64ObservableGauge("streamgate.engine.queue.depth", metric.WithUnit("{request}"),
		metric.WithDescription("Requests waiting for a model instance, by model."))
	var e error
	em.queueWait, e = m.Float64Histogram("streamgate.engine.queue.wait", metric.WithUnit("s"),
		metric.WithDescription("Time a request waited for a model instance, by model."))
	keep(e)
	em.requests, e = m.Int64Counter("streamgate.engine.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests that reached a model, by model and outcome (ok, error, cancelled)."))
	keep(e)
	em.duration, e = m.Float64Histogram("streamgate.engine.request.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a request reaching its model to its last response, by model."))
	keep(e)
	em.batch, e = m.Int64Histogram("streamgate.engine.batch.size", metric.WithUnit("{sequence}"),
		metric.WithDescription("Sequences in each batched forward pass, by model (backends with their own scheduler: llama2)."),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64, 128, 256))
	keep(e)
	em.tokens, e = m.Int64Counter("streamgate.engine.tokens", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens processed by forward passes, by model and type (prompt, generated); its rate is tokens/s."))
	keep(e)
	em.kvUsed, e = m.Int64Gauge("streamgate.engine.kv_slots.used", metric.WithUnit("{slot}"),
		metric.WithDescription("KV caches held by sequences, by model."))
	keep(e)
	em.kvTotal, e = m.Int64Gauge("streamgate.engine.kv_slots.limit", metric.WithUnit("{slot}"),
		metric.WithDescription("KV caches a model has (its max_sequences), by model."))
	keep(e)
	return em, err
}

// modelTelemetry is one model's precomputed measurement options, so that
// recording never allocates.
type modelTelemetry struct {
	m         *engineMetrics
	text      bool // a text model: its spans get an event per response
	observe   metric.ObserveOption
	rec       []metric.RecordOption
	outcomes  [numOutcomes][]metric.AddOption
	prompt    []metric.AddOption
	generated []metric.AddOption
}

func newModelTelemetry(m *engineMetrics, cfg *pb.ModelConfig) *modelTelemetry {
	model := cfg.GetName()
	set := attribute.NewSet(attribute.String("model", model))
	t := &modelTelemetry{
		m:       m,
		text:    isText(cfg),
		observe: metric.WithAttributeSet(set),
		rec:     []metric.RecordOption{metric.WithAttributeSet(set)},
	}
	for i, name := range outcomeNames {
		t.outcomes[i] = []metric.AddOption{metric.WithAttributes(attribute.String("model", model), attribute.String("outcome", name))}
	}
	t.prompt = []metric.AddOption{metric.WithAttributes(attribute.String("model", model), attribute.String("type", "prompt"))}
	t.generated = []metric.AddOption{metric.WithAttributes(attribute.String("model", model), attribute.String("type", "generated"))}
	return t
}

// Step implements backend.Metrics.
func (t *modelTelemetry) Step(sequences, promptTokens, generatedTokens int) {
	ctx := context.Background()
	t.m.batch.Record(ctx, int64(sequences), t.rec...)
	if promptTokens > 0 {
		t.m.tokens.Add(ctx, int64(promptTokens), t.prompt...)
	}
	if generatedTokens > 0 {
		t.m.tokens.Add(ctx, int64(generatedTokens), t.generated...)
	}
}

// KVSlots implements backend.Metrics.
func (t *modelTelemetry) KVSlots(used, total int) {
	ctx := context.Background()
	t.m.kvUsed.Record(ctx, int64(used), t.rec...)
	t.m.kvTotal.Record(ctx, int64(total), t.rec...)
}

var _ backend.Metrics = (*modelTelemetry)(nil)

// instrumented wraps each factory so that the backends it builds report
// into their model's telemetry (backend.Config.Metrics).
func (s *Server) instrumented(factories map[string]backend.Factory) map[string]backend.Factory {
	out := make(map[string]backend.Factory, len(factories))
	for name, f := range factories {
		out[name] = func(cfg backend.Config) (backend.Backend, error) {
			cfg.Metrics = s.telemetryFor(cfg.Model)
			return f(cfg)
		}
	}
	return out
}

// telemetryFor returns model's telemetry, creating it on first use (New
// builds them all, before serving; afterwards the map is only read).
func (s *Server) telemetryFor(cfg *pb.ModelConfig) *modelTelemetry {
	if t, ok := s.modelTel[cfg.GetName()]; ok {
		return t
	}
	t := newModelTelemetry(s.metrics, cfg)
	s.modelTel[cfg.GetName()] = t
	return t
}

// isText reports whether cfg follows a text convention (a text_output
// output, as vLLM's and TensorRT-LLM's backends and our text models).
func isText(cfg *pb.ModelConfig) bool {
	for _, o := range cfg.GetOutput() {
		if o.GetName() == "text_output" {
			return true
		}
	}
	return false
}

// observeQueues registers the callback that observes every model's queue
// depth (its scheduler's pending requests); the returned function
// unregisters it. Call it once the models are loaded.
func (s *Server) observeQueues(m metric.Meter) (unregister func(), err error) {
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, versions := range s.models {
			n := 0
			for _, mod := range versions {
				n += mod.sched.pending()
			}
			if t := s.modelTel[versions[0].Name]; t != nil {
				o.ObserveInt64(s.metrics.queueDepth, int64(n), t.observe)
			}
		}
		return nil
	}, s.metrics.queueDepth)
	if err != nil {
		return nil, err
	}
	return func() { reg.Unregister() }, nil
}

// extractMetadata returns ctx with the trace context of its incoming gRPC
// metadata, if any.
func (s *Server) extractMetadata(ctx context.Context) context.Context {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		return s.prop.Extract(ctx, tracectx.Metadata(md))
	}
	return ctx
}

// extractParams returns ctx with the trace context of req's parameters,
// if any: on a shared stream each request names its own trace.
func (s *Server) extractParams(ctx context.Context, req *pb.ModelInferRequest) context.Context {
	if len(req.GetParameters()) == 0 {
		return ctx
	}
	return s.prop.Extract(ctx, tracectx.Params{Req: req})
}

// requestTelemetry follows one call through run. Only the call's
// goroutine uses it.
type requestTelemetry struct {
	s         *Server
	t         *modelTelemetry
	span      trace.Span // the request's
	responses int
}

// begin starts c's span, a child of ctx's trace context, sets c.tel and
// returns the context the call runs in.
func (s *Server) begin(ctx context.Context, c *call) context.Context {
	rt := &requestTelemetry{s: s, t: s.modelTel[c.model.Name]}
	if rt.t == nil { // a model whose backend was built outside New
		rt.t = newModelTelemetry(s.metrics, c.model.Config)
	}
	ctx, rt.span = s.tracer.Start(ctx, "infer", trace.WithSpanKind(trace.SpanKindServer))
	if rt.span.IsRecording() {
		rt.span.SetName("infer " + c.model.Name)
		rt.span.SetAttributes(
			semconv.RPCSystemNameGRPC,
			attribute.String("streamgate.model", c.model.Name),
			attribute.String("streamgate.model_version", c.model.Version),
			attribute.String("streamgate.request_id", c.req.ID),
		)
	}
	c.tel = rt
	return ctx
}

// response notes one data response sent: for a text model, an event on
// the request's span (the tokens as they are generated).
func (rt *requestTelemetry) response() {
	rt.responses++
	if rt.t.text && rt.span.IsRecording() {
		rt.span.AddEvent("response", trace.WithAttributes(attribute.Int("streamgate.response.index", rt.responses-1)))
	}
}

// end records how the call ended, from its timings t: err (nil for
// success), cancelled when its context ended first, final its last
// response (nil if none). The queue and execute spans are drawn from t.
func (rt *requestTelemetry) end(ctx context.Context, t timings, err error, cancelled bool, final *pb.ModelStreamInferResponse) {
	m := rt.t
	now := time.Now()
	queued := now
	if !t.started.IsZero() {
		queued = t.started
	}
	m.m.queueWait.Record(ctx, queued.Sub(t.arrived).Seconds(), m.rec...)
	outcome := outcomeOK
	switch {
	case cancelled:
		outcome = outcomeCancelled
	case err != nil:
		outcome = outcomeError
	}
	m.m.requests.Add(ctx, 1, m.outcomes[outcome]...)
	m.m.duration.Record(ctx, now.Sub(t.arrived).Seconds(), m.rec...)
	span := rt.span
	if !span.IsRecording() {
		span.End()
		return
	}
	tracer := rt.s.tracer
	_, q := tracer.Start(ctx, "queue", trace.WithTimestamp(t.arrived))
	q.End(trace.WithTimestamp(queued))
	if !t.computeStart.IsZero() {
		done := t.computed
		if done.IsZero() {
			done = now
		}
		_, x := tracer.Start(ctx, "execute", trace.WithTimestamp(t.computeStart))
		x.End(trace.WithTimestamp(done))
	}
	span.SetAttributes(attribute.Int("streamgate.responses", rt.responses))
	if in, ok := countOutput(final, "num_input_tokens"); ok {
		span.SetAttributes(semconv.GenAIUsageInputTokens(in))
	}
	if out, ok := countOutput(final, "num_output_tokens"); ok {
		span.SetAttributes(semconv.GenAIUsageOutputTokens(out))
	}
	switch {
	case cancelled:
		span.AddEvent("cancelled")
		span.SetAttributes(semconv.ErrorTypeKey.String("cancelled"))
		span.SetStatus(codes.Error, "cancelled")
	case err != nil:
		span.SetAttributes(semconv.ErrorTypeKey.String(classOf(err, grpccodes.Unknown).String()))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// countOutput reads a one-element UINT32 output of r (a text model's
// token counts).
func countOutput(r *pb.ModelStreamInferResponse, name string) (int, bool) {
	ir := r.GetInferResponse()
	for i, o := range ir.GetOutputs() {
		if o.GetName() != name || o.GetDatatype() != "UINT32" {
			continue
		}
		if v := o.GetContents().GetUintContents(); len(v) == 1 {
			return int(v[0]), true
		}
		if raw := ir.GetRawOutputContents(); i < len(raw) && len(raw[i]) == 4 {
			return int(binary.LittleEndian.Uint32(raw[i])), true
		}
	}
	return 0, false
}
