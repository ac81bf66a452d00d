package telemetry

import "github.com/streamgate/streamgate/cmd/internal/cli"

// RegisterEnv declares on fs, in the group "Telemetry", the standard
// OTEL_* variables that New reads with FromEnv, for help and the
// configuration reference.
func RegisterEnv(fs *cli.FlagSet) {
	fs.Group("Telemetry (OpenTelemetry)")
	for _, v := range [...][2]string{
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "export spans, and push metrics, over OTLP to this collector (e.g. http://localhost:4318); unset with the variables below unset: nothing is exported, /metrics still serves every metric"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTLP endpoint of spans alone"},
		{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTLP endpoint of metrics alone"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf (default) or grpc"},
		{"OTEL_TRACES_EXPORTER", "otlp, console or none"},
		{"OTEL_METRICS_EXPORTER", "otlp, console, none, or prometheus (a listener of its own on OTEL_EXPORTER_PROMETHEUS_PORT)"},
		{"OTEL_TRACES_SAMPLER", "which traces are recorded, e.g. parentbased_traceidratio (default parentbased_always_on)"},
		{"OTEL_TRACES_SAMPLER_ARG", "the sampler's argument, e.g. 0.01"},
		{"OTEL_SERVICE_NAME", "the service.name of the spans and metrics (default streamgate for serve, streamgate-gateway, streamgate-engine)"},
		{"OTEL_RESOURCE_ATTRIBUTES", "more resource attributes, key=value,... (service.name among them wins over the default)"},
	} {
		fs.Env(v[0], v[1])
	}
}
