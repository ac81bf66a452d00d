package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/streamgate/streamgate/gateway/openai"
	"github.com/streamgate/streamgate/gateway/sse"
	"github.com/streamgate/streamgate/gateway/textmodel"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// cannedCall returns resp n times, then io.EOF, never waiting.
type cannedCall struct {
	resp *pb.ModelInferResponse
	n    int
}

func (c *cannedCall) RecvTick(context.Context, <-chan time.Time) (*pb.ModelInferResponse, error) {
	r, _, err := c.TryRecv()
	return r, err
}

func (c *cannedCall) TryRecv() (*pb.ModelInferResponse, bool, error) {
	if c.n == 0 {
		return nil, true, io.EOF
	}
	c.n--
	return c.resp, true, nil
}

func (c *cannedCall) Cancel() {}

// discardWriter is an http.ResponseWriter that drops the body.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Flush()                      {}

func cannedResponse(outs ...*tensor.Tensor) *pb.ModelInferResponse {
	r := &pb.ModelInferResponse{ModelName: "m", ModelVersion: "1", Id: "req-1",
		Parameters: map[string]*pb.InferParameter{
			"triton_final_response": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: false}},
		}}
	tensor.ToResponse(r, outs)
	return r
}

// benchRelaySSE relays perStream responses per iteration through relay
// with a fresh translator from newTr; allocs/op and B/op are per stream,
// the resp metrics per response.
func benchRelaySSE(b *testing.B, resp *pb.ModelInferResponse, newTr func() translator) {
	const perStream = 100
	ctx := context.Background()
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	srv := newServer(nil, nil, &Options{SSE: &sse.Options{KeepAlive: -1, WriteTimeout: -1}})
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	for b.Loop() {
		out := srv.newSSESink(w, r, tritonErrors, false)
		// One flush per response, as on a paced stream.
		c := &cannedCall{resp: resp, n: perStream}
		if err := relay(ctx, &oneAtATime{c}, newTr(), out); err != nil {
			b.Fatal(err)
		}
	}
}

// oneAtATime hides responses from TryRecv so that every response is its
// own batch and flush, as on a stream paced by the model.
type oneAtATime struct{ call }

func (o *oneAtATime) TryRecv() (*pb.ModelInferResponse, bool, error) { return nil, false, nil }

// BenchmarkRelaySSE measures the gateway's own work per relayed response
// on the SSE path: translate and frame 100 responses (one stream per op).
func BenchmarkRelaySSE(b *testing.B) {
	b.Run("generate", func(b *testing.B) {
		resp := cannedResponse(
			tensor.NewInt32("OUT", []int64{1}, []int32{42}),
			tensor.NewUint32("IDX", []int64{1}, []uint32{7}),
		)
		benchRelaySSE(b, resp, func() translator { return &generateEvents{id: "abc"} })
	})
	b.Run("chat", func(b *testing.B) {
		resp := cannedResponse(tensor.NewString("text_output", " word"))
		md := &pb.ModelMetadataResponse{Name: "m",
			Inputs: []*pb.ModelMetadataResponse_TensorMetadata{
				{Name: "text_input", Datatype: "BYTES", Shape: []int64{1}},
				{Name: "sampling_parameters", Datatype: "BYTES", Shape: []int64{1}},
			},
			Outputs: []*pb.ModelMetadataResponse_TensorMetadata{{Name: "text_output", Datatype: "BYTES", Shape: []int64{1}}},
		}
		ad, err := textmodel.Select(md)
		if err != nil {
			b.Fatal(err)
		}
		benchRelaySSE(b, resp, func() translator {
			return &textEvents{ad: ad, stream: true, ch: &openai.Chunker{ID: "chatcmpl-1", Created: 1, Model: "m", Chat: true}}
		})
	})
}

// BenchmarkInferRoute measures the gateway's own work for one /infer
// request with the binary extension, handler to body, over a canned call
// (no network): read, parse, admit, relay one response, write it.
func BenchmarkInferRoute(b *testing.B) {
	header := `{"id":"1","inputs":[{"name":"IN","shape":[4],"datatype":"INT32","parameters":{"binary_data_size":16}}],"outputs":[{"name":"OUT","parameters":{"binary_data":true}}]}`
	body := append([]byte(header), make([]byte, 16)...)
	resp := cannedResponse(tensor.NewInt32("OUT", []int64{4}, []int32{1, 2, 3, 4}))
	start := func(context.Context, *pb.ModelInferRequest) (call, error) { return &cannedCall{resp: resp, n: 1}, nil }
	h := newServer(start, fakeUpstream{}, nil).Handler()
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/v2/models/repeat_int32/infer", bytes.NewReader(body))
		r.Header.Set("Inference-Header-Content-Length", strconv.Itoa(len(header)))
		clear(w.h)
		h.ServeHTTP(w, r)
		if w.h.Get("Inference-Header-Content-Length") == "" {
			b.Fatalf("no binary answer: %v", w.h)
		}
	}
}

// BenchmarkRequestTelemetry measures what tracing adds to one request
// through the gateway (HTTP handler, server span, upstream span, GenAI
// metrics on the real SDK; canned upstream, one response): off is the
// no-op tracer a process without OTEL_* variables gets, on samples every
// request into a batch processor whose exporter discards.
func BenchmarkRequestTelemetry(b *testing.B) {
	body := `{"IN":[1],"DELAY":[0],"WAIT":0}`
	for _, traced := range []bool{false, true} {
		name := "off"
		opts := &Options{SSE: &sse.Options{KeepAlive: -1}}
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		opts.MeterProvider = mp
		var tp *sdktrace.TracerProvider
		if traced {
			name = "on"
			tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
			opts.TracerProvider = tp
		}
		b.Run(name, func(b *testing.B) {
			h := newServer(fakeStart, fakeUpstream{}, opts).Handler()
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest(http.MethodPost, "/v2/models/repeat_int32/generate_stream", strings.NewReader(body))
				r.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
		})
		if tp != nil {
			tp.Shutdown(context.Background())
		}
		mp.Shutdown(context.Background())
	}
}
