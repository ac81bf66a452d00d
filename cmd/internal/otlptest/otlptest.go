// Package otlptest is an OTLP/gRPC receiver of traces and metrics for
// tests, built on the official service definitions
// (go.opentelemetry.io/proto/otlp): point an exporter at
// Receiver.Endpoint (OTEL_EXPORTER_OTLP_ENDPOINT with
// OTEL_EXPORTER_OTLP_PROTOCOL=grpc) and read back what arrived with Spans
// and Metrics.
// The OpenTelemetry Collector is not packaged for Debian; this speaks the
// same wire protocol on a loopback port.
package otlptest

import (
	"context"
	"encoding/hex"
	"net"
	"strconv"
	"sync"
	"testing"

	collectormetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Span is one received span, with its resource's service.name.
type Span struct {
	Service  string
	TraceID  string // hex
	SpanID   string // hex
	ParentID string // hex, "" for a root
	Name     string
	Kind     tracepb.Span_SpanKind
	Status   *tracepb.Status
	Attrs    map[string]string // attributes in their string form
	Events   []string          // event names, in order
}

// Receiver is a running OTLP/gRPC endpoint for traces and metrics. Its
// methods are safe for concurrent use.
type Receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	// Endpoint is its URL, http://127.0.0.1:PORT.
	Endpoint string

	metrics metricsService

	mu      sync.Mutex
	spans   []Span
	metricN map[string]int // metric name -> data points received
}

type metricsService struct {
	collectormetrics.UnimplementedMetricsServiceServer
	r *Receiver
}

// Start serves a receiver on a free loopback port until the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{Endpoint: "http://" + lis.Addr().String(), metricN: map[string]int{}}
	r.metrics.r = r
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, r)
	collectormetrics.RegisterMetricsServiceServer(srv, &r.metrics)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return r
}

// Export implements the OTLP trace service.
func (r *Receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s := Span{
					Service: service,
					TraceID: hex.EncodeToString(sp.GetTraceId()),
					SpanID:  hex.EncodeToString(sp.GetSpanId()),
					Name:    sp.GetName(),
					Kind:    sp.GetKind(),
					Status:  sp.GetStatus(),
					Attrs:   attrs(sp.GetAttributes()),
				}
				if len(sp.GetParentSpanId()) > 0 {
					s.ParentID = hex.EncodeToString(sp.GetParentSpanId())
				}
				for _, e := range sp.GetEvents() {
					s.Events = append(s.Events, e.GetName())
				}
				r.spans = append(r.spans, s)
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// Export implements the OTLP metrics service.
func (m *metricsService) Export(_ context.Context, req *collectormetrics.ExportMetricsServiceRequest) (*collectormetrics.ExportMetricsServiceResponse, error) {
	r := m.r
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, mt := range sm.GetMetrics() {
				n := len(mt.GetSum().GetDataPoints()) + len(mt.GetGauge().GetDataPoints()) + len(mt.GetHistogram().GetDataPoints())
				r.metricN[mt.GetName()] += n
			}
		}
	}
	return &collectormetrics.ExportMetricsServiceResponse{}, nil
}

// Metrics returns how many data points of each metric name were received
// so far.
func (r *Receiver) Metrics() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.metricN))
	for k, v := range r.metricN {
		out[k] = v
	}
	return out
}

// Spans returns the spans received so far of trace traceID (hex), or
// every span when traceID is "".
func (r *Receiver) Spans(traceID string) []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Span
	for _, s := range r.spans {
		if traceID == "" || s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = strconv.FormatInt(x.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = strconv.FormatBool(x.BoolValue)
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}
