package core

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
	"github.com/streamgate/streamgate/upstream"
	"github.com/streamgate/streamgate/upstream/upstreamtest"
)

// collected returns the data of instrument name collected from rd (nil when
// absent).
func collected(t testing.TB, rd *sdkmetric.ManualReader, name string) metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m.Data
			}
		}
	}
	return nil
}

// counterValue reads the series of counter name with attributes kv from
// rd; a series not written yet is 0.
func counterValue(t testing.TB, rd *sdkmetric.ManualReader, name string, kv ...attribute.KeyValue) int64 {
	t.Helper()
	want := attribute.NewSet(kv...)
	sum, _ := collected(t, rd, name).(metricdata.Sum[int64])
	for _, dp := range sum.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Value
		}
	}
	return 0
}

// histogramCount is the count of the series of histogram name with
// attributes kv (0 when absent).
func histogramCount(t testing.TB, rd *sdkmetric.ManualReader, name string, kv ...attribute.KeyValue) uint64 {
	t.Helper()
	want := attribute.NewSet(kv...)
	h, _ := collected(t, rd, name).(metricdata.Histogram[float64])
	for _, dp := range h.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Count
		}
	}
	return 0
}

// The token path (a response read through the observed call, its payload
// sent and counted) allocates nothing, with the real metrics SDK and a
// recording span; the request's GenAI metrics are recorded once it ends.
func TestTokenPathDoesNotAllocate(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	defer mp.Shutdown(context.Background())
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	srv := testServer(nil, nil, &Options{MeterProvider: mp, TracerProvider: tp})
	ctx, server := tp.Tracer("test").Start(context.Background(), "server")
	defer server.End()

	resp := cannedResponse(tensor.NewString("text_output", " word"))
	out := srv.NewWSSink(func([]byte) error { return nil })
	rl, feed := cannedRelay(t, srv, ctx, nameEvents{}, out)
	ob := rl.ob
	if !ob.span.IsRecording() {
		t.Fatal("the upstream span does not record")
	}
	defer rl.c.Cancel()
	payload := []byte(`{"text_output":" word"}`)
	msg := upstream.Encode(resp)
	token := func() {
		feed.SendEncoded(msg)
		feed.SendEncoded(msg)
		r, ok, err := rl.recv()
		if r == nil || !ok || err != nil {
			t.Fatalf("recv: %v %v %v", r, ok, err)
		}
		if err := out.send(payload); err != nil {
			t.Fatal(err)
		}
		if _, err := out.flush(true); err != nil { // the batch's end: its events are counted
			t.Fatal(err)
		}
		if r, ok, err := rl.recv(); r == nil || !ok || err != nil {
			t.Fatalf("recv: %v %v %v", r, ok, err)
		}
	}
	token() // the first response: its event and time
	if n := testing.AllocsPerRun(1000, token); n != 0 {
		t.Errorf("%v allocations per two responses, want 0", n)
	}
	ob.end(nil, false, nil)

	model := []attribute.KeyValue{attribute.String(attrModel, "m"), attribute.String(attrOperation, OpGenerate)}
	if n := histogramCount(t, rd, "gen_ai.server.time_to_first_token", model...); n != 1 {
		t.Errorf("time to first token: %d observations, want 1", n)
	}
	if n := histogramCount(t, rd, "gen_ai.server.request.duration", model...); n != 1 {
		t.Errorf("request duration without error.type: %d observations, want 1", n)
	}
	if n := counterValue(t, rd, "streamgate.gateway.stream_events", attribute.String("protocol", "ws")); n < 1000 {
		t.Errorf("%d events counted", n)
	}
}

// A WebSocket request's events are counted once per batch, and those of a
// batch cut short (an error before its flush) when it fails: every payload
// handed to the socket counts once.
func TestWSEventsCountedPerBatch(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	defer mp.Shutdown(context.Background())
	srv := testServer(nil, nil, &Options{MeterProvider: mp})
	out := srv.NewWSSink(func([]byte) error { return nil })
	count := func() int64 {
		return counterValue(t, rd, "streamgate.gateway.stream_events", attribute.String("protocol", "ws"))
	}
	for range 3 {
		if err := out.send([]byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := out.flush(true); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 3 {
		t.Fatalf("%d events counted after a batch of 3, want 3", n)
	}
	_ = out.send([]byte(`{}`))
	out.fail(ErrClientGone)
	if n := count(); n != 4 {
		t.Fatalf("%d events counted after a failed batch, want 4", n)
	}
}

// cannedRelay starts a canned call that the caller feeds (feed) and
// returns the relayer that relays it through tr into out, observed.
func cannedRelay(tb testing.TB, srv *Server, ctx context.Context, tr Translator, out Sink) (*relayer, *upstream.Feed) {
	var feed *upstream.Feed
	j := &Job{Req: &pb.ModelInferRequest{ModelName: "m"}, Tr: tr, Op: OpGenerate}
	rl, err := srv.NewRelay(ctx, j, out, upstreamtest.Client(func(_ context.Context, _ *pb.ModelInferRequest, f *upstream.Feed) error {
		feed = f
		return nil
	}).Start)
	if err != nil {
		tb.Fatal(err)
	}
	return &rl.r, feed
}

func cannedResponse(outs ...*tensor.Tensor) *pb.ModelInferResponse {
	r := &pb.ModelInferResponse{ModelName: "m", ModelVersion: "1", Id: "req-1",
		Parameters: map[string]*pb.InferParameter{
			"triton_final_response": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: false}},
		}}
	tensor.ToResponse(r, outs)
	return r
}

// streamgate.gateway.draining is 1 from the first Drain on, once however
// often Drain is called: the drain-stuck alert watches it.
func TestDrainingGauge(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	defer mp.Shutdown(context.Background())
	srv := New(nil, nil, &Options{MeterProvider: mp})
	if n := counterValue(t, rd, "streamgate.gateway.draining"); n != 0 {
		t.Fatalf("draining %d before Drain", n)
	}
	for range 2 {
		if err := srv.Drain(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := counterValue(t, rd, "streamgate.gateway.draining"); n != 1 {
			t.Fatalf("draining %d after Drain, want 1", n)
		}
	}
}
