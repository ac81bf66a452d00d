// Package metrics declares instruments on an OpenTelemetry Meter and
// records into them without allocating. The process's MeterProvider (set
// up in cmd/internal/telemetry) decides where they go: /metrics through
// the OTel Prometheus exporter, and OTLP when configured.
//
// Start with New(meter), then declare each instrument once, at startup,
// with Counter, Gauge or Histogram; pick a series with With(label
// values...) and record with Inc, Add, Dec or Record from any goroutine.
//
// # Adding an instrument
//
// One line where the gateway declares its set (newGatewayMetrics in
// gateway/core/telemetry.go), one field to hold it, and the call where it happens:
//
//	resumes: r.Counter("streamgate.gateway.resumes", "{stream}", "Streams resumed from their log, by protocol.", "protocol"),
//
//	s.metrics.resumes.With("sse").Inc()
//
// Names are OpenTelemetry's: dotted, with the unit apart (UCUM: "s",
// "By", or a {annotation} for counts). The Prometheus exporter writes
// them with underscores, the unit as a suffix ("_seconds", "_bytes";
// annotations are dropped) and "_total" on counters, so the line above is
// streamgate_gateway_resumes_total{protocol="sse"} on /metrics.
//
// # Cost
//
// With resolves label values to a series through a small map (it
// allocates the first time it meets a combination): on a hot path, call
// it once per request and keep the value, as the sinks do for their
// event counters. A Counter's or Gauge's series is a running total that
// the SDK reads when it collects (observable instruments): Inc, Add and
// Dec are one atomic add, about 30 ns against the SDK's 400 for its own
// counter's lookup of the series. Inc, Add, Dec and Record never allocate
// (the tests check it with testing.AllocsPerRun against the real SDK). Label values
// must come from a bounded set (routes, protocols, reasons, model names
// that upstream knows), never from raw client input.
package metrics
