package upstream

import (
	"context"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// traceEngine is a gRPC server that records the trace context it is given
// (gRPC metadata of each RPC, the traceparent parameter of each request)
// and answers every streamed request with an empty final response.
type traceEngine struct {
	pb.UnimplementedGRPCInferenceServiceServer
	inband bool // advertise in-band cancel: requests share streams

	mu       sync.Mutex
	unary    map[string]string // method -> traceparent metadata
	streams  []string          // traceparent metadata of each stream
	requests map[string]string // request id -> traceparent parameter
	// authority is the :authority of each method's latest call.
	authority map[string]string
}

func mdTraceparent(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("traceparent"); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (e *traceEngine) note(method string, ctx context.Context) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.unary[method] = mdTraceparent(ctx)
	e.noteAuthority(method, ctx)
}

// noteAuthority notes ctx's :authority as method's; e.mu held.
func (e *traceEngine) noteAuthority(method string, ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	e.authority[method] = strings.Join(md.Get(":authority"), ",")
}

func (e *traceEngine) ServerMetadata(ctx context.Context, _ *pb.ServerMetadataRequest) (*pb.ServerMetadataResponse, error) {
	e.note("ServerMetadata", ctx)
	md := &pb.ServerMetadataResponse{Name: "trace"}
	if e.inband {
		md.Extensions = []string{cancelExtension}
	}
	return md, nil
}

func (e *traceEngine) ModelMetadata(ctx context.Context, r *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	e.note("ModelMetadata", ctx)
	return &pb.ModelMetadataResponse{Name: r.GetName()}, nil
}

func (e *traceEngine) ModelConfig(ctx context.Context, r *pb.ModelConfigRequest) (*pb.ModelConfigResponse, error) {
	return &pb.ModelConfigResponse{Config: &pb.ModelConfig{Name: r.GetName(),
		ModelTransactionPolicy: &pb.ModelTransactionPolicy{Decoupled: true}}}, nil
}

func (e *traceEngine) ModelStreamInfer(stream pb.GRPCInferenceService_ModelStreamInferServer) error {
	e.mu.Lock()
	e.streams = append(e.streams, mdTraceparent(stream.Context()))
	e.noteAuthority("ModelStreamInfer", stream.Context())
	e.mu.Unlock()
	for {
		r, err := stream.Recv()
		if err != nil {
			return nil
		}
		if r.GetParameters()["streamgate_cancel"].GetBoolParam() {
			continue
		}
		e.mu.Lock()
		e.requests[r.GetId()] = r.GetParameters()["traceparent"].GetStringParam()
		e.mu.Unlock()
		err = stream.Send(&pb.ModelStreamInferResponse{InferResponse: &pb.ModelInferResponse{Id: r.GetId(),
			Parameters: map[string]*pb.InferParameter{"triton_final_response": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}}}}})
		if err != nil {
			return nil
		}
	}
}

func startTraceEngine(t *testing.T, inband bool) (*traceEngine, string) {
	t.Helper()
	return startTraceEngineAt(t, inband, "")
}

// startTraceEngineAt is startTraceEngine on addr (see listen).
func startTraceEngineAt(t *testing.T, inband bool, addr string) (*traceEngine, string) {
	t.Helper()
	lis := listen(t, addr)
	e := &traceEngine{inband: inband, unary: map[string]string{}, requests: map[string]string{}, authority: map[string]string{}}
	srv := grpc.NewServer()
	pb.RegisterGRPCInferenceServiceServer(srv, e)
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})
	return e, listenedAt(addr, lis)
}

// spanContext returns a context with a new sampled span and its
// traceparent.
func spanContext(t *testing.T) (context.Context, string) {
	t.Helper()
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(t.Context(), "caller")
	t.Cleanup(func() { span.End() })
	sc := span.SpanContext()
	return ctx, "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
}

// The trace context of Start's ctx reaches the target: as the request
// parameter traceparent on a shared stream (whose own metadata belongs to
// no request), also as the metadata of a dedicated stream, and as the
// metadata of unary calls.
func TestTraceContextPropagation(t *testing.T) {
	for _, mode := range []CancelMode{CancelInband, CancelStream} {
		t.Run(mode.String(), func(t *testing.T) {
			e, addr := startTraceEngine(t, mode == CancelInband)
			c := newTestClient(t, []string{addr}, &Options{Cancel: mode, HealthInterval: -1})
			ctx, want := spanContext(t)
			cl, err := c.Start(ctx, &pb.ModelInferRequest{ModelName: "m"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := readAll(ctx, cl); err != nil {
				t.Fatal(err)
			}
			untraced, err := c.Start(t.Context(), &pb.ModelInferRequest{ModelName: "m"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := readAll(t.Context(), untraced); err != nil {
				t.Fatal(err)
			}
			if _, err := c.ModelMetadata(ctx, "m", ""); err != nil {
				t.Fatal(err)
			}

			e.mu.Lock()
			defer e.mu.Unlock()
			if got := e.requests[cl.ID()]; got != want {
				t.Errorf("traced request's traceparent parameter %q, want %q", got, want)
			}
			if got := e.requests[untraced.ID()]; got != "" {
				t.Errorf("untraced request carries traceparent %q", got)
			}
			if got := e.unary["ModelMetadata"]; got != want {
				t.Errorf("ModelMetadata metadata traceparent %q, want %q", got, want)
			}
			switch mode {
			case CancelInband: // one shared stream, opened for no request in particular
				if len(e.streams) != 1 || e.streams[0] != "" {
					t.Errorf("stream metadata %q, want one stream without traceparent", e.streams)
				}
			case CancelStream: // a stream per request, carrying its context
				if len(e.streams) != 2 || e.streams[0] != want || e.streams[1] != "" {
					t.Errorf("stream metadata %q, want [%q, \"\"]", e.streams, want)
				}
			}
		})
	}
}

// The client's metrics are observed from Stats.
func TestMetrics(t *testing.T) {
	_, addr := startTraceEngine(t, true)
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	c := newTestClient(t, []string{addr}, &Options{HealthInterval: -1, MeterProvider: mp})
	for range 3 {
		cl, err := c.Start(t.Context(), &pb.ModelInferRequest{ModelName: "m"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := readAll(t.Context(), cl); err != nil {
			t.Fatal(err)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			var pts []metricdata.DataPoint[int64]
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				pts = d.DataPoints
			case metricdata.Gauge[int64]:
				pts = d.DataPoints
			}
			for _, p := range pts {
				key := m.Name
				if v, ok := p.Attributes.Value(attribute.Key("target")); ok {
					key += "{" + v.AsString() + "}"
				}
				if v, ok := p.Attributes.Value(attribute.Key("mode")); ok {
					key += "{" + v.AsString() + "}"
				}
				got[key] = p.Value
			}
		}
	}
	for k, want := range map[string]int64{
		"streamgate.upstream.requests":                     3,
		"streamgate.upstream.in_flight{" + addr + "}":      0,
		"streamgate.upstream.target_healthy{" + addr + "}": 1,
		"streamgate.upstream.streams_open{" + addr + "}":   1,
		"streamgate.upstream.cancels{inband}":              0,
		"streamgate.upstream.retries":                      0,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %d (present %v), want %d", k, v, ok, want)
		}
	}
}
