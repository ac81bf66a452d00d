package engine_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/streamgate/streamgate/engine"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

func stringParam(s string) *pb.InferParameter {
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: s}}
}

// remoteParent is a sampled span context a client would send, and its
// traceparent.
func remoteParent(traceByte byte) (trace.SpanContext, string) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{traceByte, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
		SpanID:     trace.SpanID{traceByte, 7, 7, 7, 7, 7, 7, 7},
		TraceFlags: trace.FlagsSampled,
		Remote:     true,
	})
	return sc, "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
}

// Each request's span is the child of the trace context it carries: its
// traceparent parameter, or else its stream's gRPC metadata. It has one
// event per streamed response and two children, "queue" and "execute"; a
// cancelled request's span says so.
func TestRequestSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	defer mp.Shutdown(context.Background())
	h := start(t, engine.Options{TracerProvider: tp, MeterProvider: mp})

	streamSC, streamTP := remoteParent(0xaa)
	paramSC, paramTP := remoteParent(0xbb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := h.client.ModelStreamInfer(metadata.AppendToOutgoingContext(ctx, "traceparent", streamTP))
	if err != nil {
		t.Fatal(err)
	}
	withParam := build("echo", "param", true, tensor.NewString("text_input", "hello streaming world"), tensor.NewBool("stream", []int64{1}, []bool{true}))
	withParam.Parameters["traceparent"] = stringParam(paramTP)
	slow := repeatReq("slow", 50, 200, 0, true)
	slow.Parameters["traceparent"] = stringParam(paramTP)
	for _, r := range []*pb.ModelInferRequest{withParam, repeatReq("stream", 2, 0, 0, true), slow} {
		if err := s.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	// The others have ended (3 spans each) and slow runs.
	waitFor(t, "the slow request to run alone", func() bool { return h.srv.InFlight() == 1 && len(rec.Ended()) == 6 })
	if err := s.Send(&pb.ModelInferRequest{ModelName: "repeat_int32", Id: "slow",
		Parameters: map[string]*pb.InferParameter{engine.ParamCancel: boolParam(true)}}); err != nil {
		t.Fatal(err)
	}
	s.CloseSend()
	sent := 0 // the echo request's streamed (non-final) responses
	for _, r := range collect(t, s) {
		if r.GetInferResponse().GetId() == "param" && !isFinal(r) {
			sent++
		}
	}
	waitFor(t, "every span to end", func() bool { return len(rec.Ended()) == 9 })

	byName := map[string][]sdktrace.ReadOnlySpan{}
	requests := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range rec.Ended() {
		byName[sp.Name()] = append(byName[sp.Name()], sp)
		for _, a := range sp.Attributes() {
			if a.Key == "streamgate.request_id" {
				requests[a.Value.AsString()] = sp
			}
		}
	}
	if len(byName["infer repeat_int32"]) != 2 || len(byName["infer echo"]) != 1 || len(byName["queue"]) != 3 || len(byName["execute"]) != 3 {
		t.Fatalf("spans %v, want infer repeat_int32 twice, infer echo, and 3 each of queue, execute", keys(byName))
	}
	for id, parent := range map[string]trace.SpanContext{"param": paramSC, "stream": streamSC, "slow": paramSC} {
		sp := requests[id]
		if sp == nil {
			t.Fatalf("no span for request %s", id)
		}
		if sp.Parent().SpanID() != parent.SpanID() || sp.SpanContext().TraceID() != parent.TraceID() || sp.SpanKind() != trace.SpanKindServer {
			t.Errorf("request %s: span %v (kind %v) under %v, want a server span under %v", id, sp.SpanContext(), sp.SpanKind(), sp.Parent(), parent)
		}
	}
	for _, name := range []string{"queue", "execute"} {
		owners := map[string]bool{}
		for _, sp := range byName[name] {
			for id, req := range requests {
				if sp.Parent().SpanID() == req.SpanContext().SpanID() {
					owners[id] = true
				}
			}
		}
		if len(owners) != 3 {
			t.Errorf("%s spans are children of requests %v, want all three", name, owners)
		}
	}
	events := map[string]int{}
	for id, sp := range requests {
		for _, e := range sp.Events() {
			if e.Name == "response" {
				events[id]++
			}
		}
	}
	// Text models get an event per streamed response; others none.
	if sent == 0 || events["param"] != sent || events["stream"] != 0 || events["slow"] != 0 {
		t.Errorf("response events %v, want param (echo, a text model) %d, none for repeat_int32", events, sent)
	}
	var tokens bool
	for _, a := range requests["param"].Attributes() {
		tokens = tokens || (a.Key == "gen_ai.usage.output_tokens" && a.Value.AsInt64() == 3)
	}
	if !tokens {
		t.Errorf("echo request's span attributes %v, want gen_ai.usage.output_tokens 3", requests["param"].Attributes())
	}
	if st := requests["slow"].Status(); st.Code != codes.Error || st.Description != "cancelled" {
		t.Errorf("cancelled request's status %+v", st)
	}
	if st := requests["param"].Status(); st.Code == codes.Error {
		t.Errorf("completed request's status %+v", st)
	}

	// Metrics: requests by outcome, one queue wait each (repeat_int32).
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if m.Name != "streamgate.engine.requests" {
					continue
				}
				got := map[string]int64{}
				for _, p := range d.DataPoints {
					v, _ := p.Attributes.Value(attribute.Key("outcome"))
					got[v.AsString()] += p.Value
				}
				if got["ok"] != 2 || got["cancelled"] != 1 {
					t.Errorf("requests by outcome %v, want ok 2 (one each model), cancelled 1", got)
				}
			case metricdata.Histogram[float64]:
				if m.Name != "streamgate.engine.queue.wait" {
					continue
				}
				var n uint64
				for _, p := range d.DataPoints {
					n += p.Count
				}
				if len(d.DataPoints) != 2 || n != 3 {
					t.Errorf("queue waits %+v, want 3 in two models' series", d.DataPoints)
				}
			}
		}
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
