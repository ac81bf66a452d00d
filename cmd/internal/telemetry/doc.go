// Package telemetry sets up OpenTelemetry for one streamgate process, the
// standard way: New builds the TracerProvider, MeterProvider and
// propagator that cmd/internal/stack hands to every layer (the gateway,
// the upstream client and the engine take them in their Options and
// never touch OTel's globals), and the /metrics handler (the OTel
// Prometheus exporter, with Go runtime and process metrics).
//
// Exporters come from the standard environment variables through
// contrib's autoexport (OTEL_TRACES_EXPORTER, OTEL_METRICS_EXPORTER,
// OTEL_EXPORTER_OTLP_ENDPOINT and its per-signal forms,
// OTEL_EXPORTER_OTLP_PROTOCOL), the sampler from OTEL_TRACES_SAMPLER(_ARG)
// as the SDK reads it, and the resource from OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES. With none of them set nothing is exported
// and the tracer is a no-op.
//
// LogHandler puts trace_id and span_id on every slog line written with a
// request's context.
package telemetry
