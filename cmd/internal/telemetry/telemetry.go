package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	otelruntime "go.opentelemetry.io/contrib/instrumentation/runtime"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// LatencyBuckets are the bucket boundaries of every histogram in seconds:
// sub-millisecond to a minute, for token latencies.
var LatencyBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60,
}

// Options configures New. The zero value exports no spans and serves
// metrics on Telemetry.Metrics only.
type Options struct {
	// ServiceName is the resource's service.name, unless OTEL_SERVICE_NAME
	// or OTEL_RESOURCE_ATTRIBUTES set one (they always win). Default
	// "streamgate".
	ServiceName string

	// FromEnv configures exporters from the standard OTEL_* environment
	// variables (contrib's autoexport): spans are exported when
	// OTEL_TRACES_EXPORTER or an OTLP endpoint
	// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is
	// set, metrics are pushed as well when OTEL_METRICS_EXPORTER or an
	// OTLP endpoint (..._METRICS_ENDPOINT) is set. Default false: the
	// environment is not read (tests).
	FromEnv bool

	// SpanExporter, if set, receives every sampled span (through a batch
	// processor), beside what FromEnv configures. Default none.
	SpanExporter sdktrace.SpanExporter

	// Sampler decides which traces are recorded. Default: the SDK's, which
	// reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG
	// (parentbased_always_on when unset).
	Sampler sdktrace.Sampler

	// Logger receives the errors of a /metrics scrape. Default: discard.
	Logger *slog.Logger
}

// Telemetry is one process's OpenTelemetry: the providers every layer is
// given, the propagator, and the Prometheus handler of /metrics.
// Shutdown flushes and stops it.
type Telemetry struct {
	// Tracer makes the spans. Without an exporter it is a no-op provider:
	// spans cost nothing, and a caller's trace context still passes
	// through (see Propagator).
	Tracer trace.TracerProvider
	// Meter holds every instrument; /metrics reads it, and so does OTLP
	// when configured.
	Meter metric.MeterProvider
	// Propagator reads and writes W3C traceparent/tracestate and baggage.
	Propagator propagation.TextMapPropagator
	// Metrics serves the Prometheus exposition of Meter, the Go runtime
	// and the process (CPU, memory, file descriptors).
	Metrics http.Handler
	// Tracing reports whether spans are exported anywhere.
	Tracing bool

	tp   *sdktrace.TracerProvider // nil when not tracing
	mp   *sdkmetric.MeterProvider
	stop []func(context.Context) error
}

// New builds the providers. Errors come from the OTEL_* environment (an
// unknown exporter or protocol); nothing is left running on error.
func New(ctx context.Context, opts Options) (_ *Telemetry, err error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	name := opts.ServiceName
	if name == "" {
		name = "streamgate"
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(name)),
		resource.WithFromEnv(),
	)
	if err != nil && res == nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	t := &Telemetry{
		Propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}
	defer func() {
		if err != nil {
			t.Shutdown(context.Background())
		}
	}()

	// Traces.
	var exporters []sdktrace.SpanExporter
	if opts.SpanExporter != nil {
		exporters = append(exporters, opts.SpanExporter)
	}
	if opts.FromEnv && anyEnv("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("telemetry: traces: %w", err)
		}
		if autoexport.IsNoneSpanExporter(exp) {
			exp.Shutdown(ctx)
		} else {
			exporters = append(exporters, exp)
		}
	}
	if len(exporters) == 0 {
		t.Tracer = noop.NewTracerProvider()
	} else {
		topts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
		if opts.Sampler != nil {
			topts = append(topts, sdktrace.WithSampler(opts.Sampler))
		}
		for _, exp := range exporters {
			topts = append(topts, sdktrace.WithBatcher(exp))
		}
		t.tp = sdktrace.NewTracerProvider(topts...)
		t.Tracer, t.Tracing = t.tp, true
		t.stop = append(t.stop, t.tp.Shutdown)
	}

	// Metrics: always the Prometheus registry of /metrics, plus OTLP (or
	// whatever OTEL_METRICS_EXPORTER names) when configured.
	reg := prometheus.NewRegistry()
	prom, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		otelprom.WithoutScopeInfo(),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		otelprom.WithProducer(otelruntime.NewProducer()),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	mopts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(prom),
		// Every duration histogram (unit s) of every layer gets buckets
		// suited to token latencies.
		sdkmetric.WithView(sdkmetric.NewView(
			sdkmetric.Instrument{Kind: sdkmetric.InstrumentKindHistogram, Unit: "s"},
			sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: LatencyBuckets}})),
		// Prometheus reserves _count for histograms and summaries
		// (promtool check metrics): Go's usual name instead.
		sdkmetric.WithView(sdkmetric.NewView(sdkmetric.Instrument{Name: "go.goroutine.count"}, sdkmetric.Stream{Name: "go.goroutines"})),
	}
	if opts.FromEnv && anyEnv("OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") {
		rd, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			return nil, fmt.Errorf("telemetry: metrics: %w", err)
		}
		if autoexport.IsNoneMetricReader(rd) {
			rd.Shutdown(ctx)
		} else {
			mopts = append(mopts, sdkmetric.WithReader(rd))
		}
	}
	t.mp = sdkmetric.NewMeterProvider(mopts...)
	t.Meter = t.mp
	t.stop = append(t.stop, t.mp.Shutdown)
	if err := otelruntime.Start(otelruntime.WithMeterProvider(t.mp)); err != nil {
		return nil, fmt.Errorf("telemetry: runtime metrics: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("telemetry: process metrics: %w", err)
	}
	t.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true, // exemplars: the trace of a sampled measurement
	})
	return t, nil
}

// Flush exports the spans and metrics recorded so far.
func (t *Telemetry) Flush(ctx context.Context) error {
	var errs []error
	if t.tp != nil {
		errs = append(errs, t.tp.ForceFlush(ctx))
	}
	if t.mp != nil {
		errs = append(errs, t.mp.ForceFlush(ctx))
	}
	return errors.Join(errs...)
}

// Shutdown flushes what is left and stops the exporters; the providers
// record nothing afterwards. It is idempotent.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for _, stop := range t.stop {
		errs = append(errs, stop(ctx))
	}
	t.stop = nil
	return errors.Join(errs...)
}

// anyEnv reports whether any of the variables is set and not empty.
func anyEnv(keys ...string) bool {
	for _, k := range keys {
		if os.Getenv(k) != "" {
			return true
		}
	}
	return false
}
