package gateway

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/streamgate/streamgate/gateway/core"
	"github.com/streamgate/streamgate/gateway/jobs"
	"github.com/streamgate/streamgate/gateway/openai"
	"github.com/streamgate/streamgate/gateway/sse"
	"github.com/streamgate/streamgate/gateway/ws"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
	"github.com/streamgate/streamgate/upstream"
	"github.com/streamgate/streamgate/upstream/upstreamtest"
)

// cannedRelay starts a canned call that the caller feeds (feed) and
// returns the relay that relays it through tr into out, observed.
func cannedRelay(tb testing.TB, srv *Server, ctx context.Context, tr core.Translator, out core.Sink) (*core.Relay, *upstream.Feed) {
	var feed *upstream.Feed
	j := &core.Job{Req: &pb.ModelInferRequest{ModelName: "m"}, Tr: tr, Op: core.OpGenerate}
	rl, err := srv.core.NewRelay(ctx, j, out, upstreamtest.Client(func(_ context.Context, _ *pb.ModelInferRequest, f *upstream.Feed) error {
		feed = f
		return nil
	}).Start)
	if err != nil {
		tb.Fatal(err)
	}
	return rl, feed
}

func cannedResponse(outs ...*tensor.Tensor) *pb.ModelInferResponse {
	r := &pb.ModelInferResponse{ModelName: "m", ModelVersion: "1", Id: "req-1",
		Parameters: map[string]*pb.InferParameter{
			"triton_final_response": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: false}},
		}}
	tensor.ToResponse(r, outs)
	return r
}

// repeatClient answers every request with resp n times.
func repeatClient(resp *pb.ModelInferResponse, n int) *upstream.Client {
	return upstreamtest.Client(upstreamtest.Replies(func(*pb.ModelInferRequest) ([]*pb.ModelInferResponse, error) {
		rs := make([]*pb.ModelInferResponse, n)
		for i := range rs {
			rs[i] = resp
		}
		return rs, nil
	}))
}

// discardWriter is an http.ResponseWriter that drops the body.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Flush()                      {}

// route is one inference route's relay: a translator and a sink as its
// handler builds them, writing to a discarding writer.
type route struct {
	name  string
	resp  *pb.ModelInferResponse
	newTr func(*Server) core.Translator
	// newSink returns the route's sink; ws sinks append their data
	// frames to frames as the session's send queue does.
	newSink func(srv *Server, frames *[]byte) core.Sink
	// growth is the allocations relaying 1,000 more responses may add:
	// none, but on routes that keep the whole text (the Responses API's
	// done events repeat it), whose buffer grows by doubling.
	growth float64
}

func relayRoutes(tb testing.TB) []route {
	intResp := cannedResponse(
		tensor.NewInt32("OUT", []int64{1}, []int32{42}),
		tensor.NewUint32("IDX", []int64{1}, []uint32{7}),
	)
	textResp := cannedResponse(tensor.NewString("text_output", " word"))
	// The /v1 translators come from their jobs, built by the jobs
	// builder for fakeUpstream's text model.
	chat := func(f core.Form) func(*Server) core.Translator {
		return func(srv *Server) core.Translator {
			return jobTranslator(tb, openai.ParseChat, srv.openai.ChatJob, `{"model":"echo","messages":[{"role":"user","content":"hi"}]}`, f)
		}
	}
	completions := func(srv *Server) core.Translator {
		return jobTranslator(tb, openai.ParseCompletion, srv.openai.CompletionJob, `{"model":"echo","prompt":"hi"}`, core.FormSSE)
	}
	responses := func(srv *Server) core.Translator {
		return jobTranslator(tb, openai.ParseResponses, srv.openai.ResponsesJob, `{"model":"echo","input":"hi","stream":true}`, core.FormSSE)
	}
	events := func(*Server) core.Translator { return jobs.GenerateEvents("abc") }
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	sseSink := func(srv *Server, _ *[]byte) core.Sink {
		return srv.core.NewSSESink(&discardWriter{h: http.Header{}}, r, core.TritonErrors, false)
	}
	wsSink := func(srv *Server, frames *[]byte) core.Sink {
		var seq uint64
		return srv.core.NewWSSink(func(data []byte) error {
			*frames = ws.AppendDataFrame((*frames)[:0], "a1", seq, data)
			seq++
			return nil
		})
	}
	return []route{
		{"generate_stream", intResp, events, sseSink, 0},
		{"chat", textResp, chat(core.FormSSE), sseSink, 0},
		{"completions", textResp, completions, sseSink, 0},
		{"responses", textResp, responses, func(srv *Server, _ *[]byte) core.Sink {
			o := srv.core.NewSSESink(&discardWriter{h: http.Header{}}, r, core.OpenAIErrors, false)
			o.Named = true
			return o
		}, 16},
		{"ws_generate", intResp, events, wsSink, 0},
		{"ws_chat", textResp, chat(core.FormWS), wsSink, 0},
	}
}

// jobTranslator is the translator of the job build makes of body, parsed
// by parse, in form f.
func jobTranslator[R any](tb testing.TB, parse func([]byte) (R, error), build func(context.Context, R, core.Form) (*core.Job, error), body string, f core.Form) core.Translator {
	req, err := parse([]byte(body))
	if err != nil {
		tb.Fatal(err)
	}
	j, err := build(context.Background(), req, f)
	if err != nil {
		tb.Fatal(err)
	}
	return j.Tr
}

// relayN relays n responses of rt, each its own batch and flush (as on a
// stream paced by the model), through a fresh translator and sink, from a
// canned call (so upstream's queue and decoding are in it too).
func relayN(tb testing.TB, srv *Server, rt route, n int, frames *[]byte) {
	r, feed := cannedRelay(tb, srv, context.Background(), rt.newTr(srv), rt.newSink(srv, frames))
	msg := upstream.Encode(rt.resp)
	for range n {
		feed.SendEncoded(msg)
		if ended, err := r.Step(); ended {
			tb.Fatal(err)
		}
	}
	feed.End(io.EOF)
	if ended, err := r.Step(); !ended || err != nil {
		tb.Fatalf("ended %v: %v", ended, err)
	}
}

func benchServer() *Server {
	return testServer(nil, fakeUpstream{}, &Options{SSE: &sse.Options{KeepAlive: -1, WriteTimeout: -1}})
}

// BenchmarkRelay measures the gateway's own work per relayed response on
// each route: translate, frame and write one response (one op), each its
// own flush. The stream's setup (sink, translator) is spread over b.N
// responses, so allocs/op is the per-response figure: 0. Upstream's part
// (routing, queue, decode) is upstream's BenchmarkDeliver.
func BenchmarkRelay(b *testing.B) {
	for _, rt := range relayRoutes(b) {
		b.Run(rt.name, func(b *testing.B) {
			srv := benchServer()
			var frames []byte
			b.ReportAllocs()
			relayN(b, srv, rt, b.N, &frames)
		})
	}
}

// BenchmarkRelayPaced is BenchmarkRelay at a paced load's cache
// footprint: 16,384 streams, each op one response to the next stream in
// a shuffled round, so each stream's state (call, queue, relay,
// translator, sink) was last touched 16,383 responses ago, as a
// stream's is 50 ms ago under 1,000 streams of paced tokens. It measures
// the cache misses and pointer chasing per response that BenchmarkRelay's
// one warm stream hides.
func BenchmarkRelayPaced(b *testing.B) {
	const n = 16384
	for _, rt := range relayRoutes(b) {
		if rt.name != "generate_stream" && rt.name != "chat" && rt.name != "ws_generate" {
			continue
		}
		b.Run(rt.name, func(b *testing.B) {
			srv := benchServer()
			type stream struct {
				r    *core.Relay
				feed *upstream.Feed
			}
			ss := make([]stream, n)
			frames := make([][]byte, n)
			for i := range ss {
				ss[i].r, ss[i].feed = cannedRelay(b, srv, context.Background(), rt.newTr(srv), rt.newSink(srv, &frames[i]))
			}
			rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { ss[i], ss[j] = ss[j], ss[i] })
			msg := upstream.Encode(rt.resp)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s := &ss[i]
				s.feed.SendEncoded(msg)
				if ended, err := s.r.Step(); ended {
					b.Fatal(err)
				}
				if i++; i == n {
					i = 0
				}
			}
			b.StopTimer()
			for _, s := range ss {
				s.feed.End(io.EOF)
				if ended, err := s.r.Step(); !ended || err != nil {
					b.Fatalf("ended %v: %v", ended, err)
				}
			}
		})
	}
}

// TestRelayAllocatesNothingPerResponse: relaying 1,100 responses allocates
// no more than relaying 100, on every route (but for the doubling of a
// buffer that keeps the whole text, where the protocol repeats it).
func TestRelayAllocatesNothingPerResponse(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops sync.Pool items at random: allocation counts mean nothing")
	}
	srv := benchServer()
	for _, rt := range relayRoutes(t) {
		var frames []byte
		relayN(t, srv, rt, 10, &frames) // warm the metric series
		few := testing.AllocsPerRun(20, func() { relayN(t, srv, rt, 100, &frames) })
		many := testing.AllocsPerRun(20, func() { relayN(t, srv, rt, 1100, &frames) })
		if many > few+rt.growth {
			t.Errorf("%s: %v allocations for 100 responses, %v for 1,100: %.3f per response",
				rt.name, few, many, (many-few)/1000)
		}
	}
}

// BenchmarkInferRoute measures the gateway's own work for one /infer
// request with the binary extension, handler to body, over a canned call
// (no network): read, parse, admit, relay one response, write it.
func BenchmarkInferRoute(b *testing.B) {
	header := `{"id":"1","inputs":[{"name":"IN","shape":[4],"datatype":"INT32","parameters":{"binary_data_size":16}}],"outputs":[{"name":"OUT","parameters":{"binary_data":true}}]}`
	body := append([]byte(header), make([]byte, 16)...)
	resp := cannedResponse(tensor.NewInt32("OUT", []int64{4}, []int32{1, 2, 3, 4}))
	h := testServer(repeatClient(resp, 1), fakeUpstream{}, nil).Handler()
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
			h := testServer(fakeClient, fakeUpstream{}, opts).Handler()
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

// BenchmarkRequest measures what the gateway allocates per request (one
// op) on its way in and out, around a canned call of 100 responses: the
// routing, the body's parsing, the job, the sink. It is what the relay
// preset's garbage comes from now that relaying allocates nothing.
func BenchmarkRequest(b *testing.B) {
	resp := cannedResponse(
		tensor.NewInt32("OUT", []int64{1}, []int32{42}),
		tensor.NewUint32("IDX", []int64{1}, []uint32{7}),
	)
	srv := testServer(repeatClient(resp, 100), fakeUpstream{}, &Options{MaxBodyBytes: 1 << 20, SSE: &sse.Options{KeepAlive: -1, WriteTimeout: -1}})
	h := srv.Handler()
	in := make([]string, 100)
	for i := range in {
		in[i] = "7"
	}
	body := `{"IN":[` + strings.Join(in, ",") + `],"DELAY":[` + strings.Join(in, ",") + `],"WAIT":0}`
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/v2/models/repeat_int32/generate_stream", strings.NewReader(body))
		clear(w.h)
		h.ServeHTTP(w, r)
	}
}

// BenchmarkChatRequest is BenchmarkRequest for a streamed chat completion
// (one op: one request of 100 responses, as the relay preset's chat run
// sends): the OpenAI body's parsing, the chat template, the text model's
// request, the chunks and the event stream's headers.
func BenchmarkChatRequest(b *testing.B) {
	resp := cannedResponse(tensor.NewString("text_output", " word"))
	srv := testServer(repeatClient(resp, 100), fakeUpstream{}, &Options{MaxBodyBytes: 1 << 20, SSE: &sse.Options{KeepAlive: -1, WriteTimeout: -1}})
	h := srv.Handler()
	body := `{"max_tokens":100,"messages":[{"content":"` + strings.Repeat("word ", 97) + `word","role":"user"}],"model":"echo","stream":true}`
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		clear(w.h)
		h.ServeHTTP(w, r)
		if w.h.Get("Content-Type") != "text/event-stream; charset=utf-8" {
			b.Fatalf("not an event stream: %v", w.h)
		}
	}
}

// BenchmarkJob measures what a streamed request's own route costs before
// anything goes upstream (one op: one request): its body's parsing and
// its job (the model's lookup, a chat's template and text model request,
// the translator), for the latency preset's bodies: a chat of 18 words
// and a generate_stream of repeat_int32.
func BenchmarkJob(b *testing.B) {
	srv := benchServer()
	b.Run("chat", func(b *testing.B) {
		body := []byte(`{"max_tokens":20,"messages":[{"content":"` + strings.Repeat("word ", 17) + `word","role":"user"}],"model":"echo","stream":true}`)
		b.ReportAllocs()
		for b.Loop() {
			cr, err := openai.ParseChat(body)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := srv.openai.ChatJob(context.Background(), cr, core.FormSSE); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("generate_stream", func(b *testing.B) {
		in := strings.Repeat("7,", 19) + "7"
		body := []byte(`{"IN":[` + in + `],"DELAY":[` + in + `],"WAIT":0}`)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := srv.openai.GenerateJob(context.Background(), "repeat_int32", "", body, core.FormSSE); err != nil {
				b.Fatal(err)
			}
		}
	})
}
