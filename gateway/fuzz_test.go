package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/streamgate/streamgate/gateway/core"
	"github.com/streamgate/streamgate/gateway/sse"
	"github.com/streamgate/streamgate/gateway/tritonhttp"
	"github.com/streamgate/streamgate/gateway/ws"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
	"github.com/streamgate/streamgate/upstream/upstreamtest"
)

// fakeUpstream answers metadata for repeat_int32 and echo and runs every
// request as a short canned stream, without a network.
type fakeUpstream struct{}

func tm(name, dt string, shape ...int64) *pb.ModelMetadataResponse_TensorMetadata {
	return &pb.ModelMetadataResponse_TensorMetadata{Name: name, Datatype: dt, Shape: shape}
}

var fakeModels = map[string]*pb.ModelMetadataResponse{
	"repeat_int32": {Name: "repeat_int32", Versions: []string{"1"}, Platform: "repeat",
		Inputs:  []*pb.ModelMetadataResponse_TensorMetadata{tm("IN", "INT32", -1), tm("DELAY", "UINT32", -1), tm("WAIT", "UINT32", 1)},
		Outputs: []*pb.ModelMetadataResponse_TensorMetadata{tm("OUT", "INT32", 1), tm("IDX", "UINT32", 1)}},
	"echo": {Name: "echo", Versions: []string{"1"}, Platform: "echo",
		Inputs: []*pb.ModelMetadataResponse_TensorMetadata{tm("text_input", "BYTES", 1), tm("stream", "BOOL", 1),
			tm("sampling_parameters", "BYTES", 1), tm("exclude_input_in_output", "BOOL", 1)},
		Outputs: []*pb.ModelMetadataResponse_TensorMetadata{tm("text_output", "BYTES", -1), tm("finish_reason", "BYTES", 1)}},
}

func (fakeUpstream) ServerLive(context.Context) (bool, error)  { return true, nil }
func (fakeUpstream) ServerReady(context.Context) (bool, error) { return true, nil }
func (fakeUpstream) ServerMetadata(context.Context) (*pb.ServerMetadataResponse, error) {
	return &pb.ServerMetadataResponse{Name: "fake", Version: "0"}, nil
}
func (fakeUpstream) ModelReady(_ context.Context, name, _ string) (bool, error) {
	return fakeModels[name] != nil, nil
}
func (fakeUpstream) ModelMetadata(_ context.Context, name, _ string) (*pb.ModelMetadataResponse, error) {
	if md := fakeModels[name]; md != nil {
		return md, nil
	}
	return nil, status.Errorf(codes.NotFound, "Request for unknown model: '%s' is not found", name)
}

// ModelConfig: echo is a sequence model (for the WebSocket's sequences),
// neither is decoupled (for /infer).
func (fakeUpstream) ModelConfig(_ context.Context, name, _ string) (*pb.ModelConfig, error) {
	if md := fakeModels[name]; md != nil {
		cfg := &pb.ModelConfig{Name: name, Backend: md.GetPlatform()}
		if name == "echo" {
			cfg.SchedulingChoice = &pb.ModelConfig_SequenceBatching{SequenceBatching: &pb.ModelSequenceBatching{}}
		}
		return cfg, nil
	}
	return nil, status.Errorf(codes.NotFound, "Request for unknown model: '%s' is not found", name)
}
func (fakeUpstream) ModelStatistics(_ context.Context, name, _ string) (*pb.ModelStatisticsResponse, error) {
	return &pb.ModelStatisticsResponse{ModelStats: []*pb.ModelStatistics{{Name: name, Version: "1"}}}, nil
}
func (fakeUpstream) RepositoryIndex(context.Context) ([]*pb.RepositoryIndexResponse_ModelIndex, error) {
	return []*pb.RepositoryIndexResponse_ModelIndex{{Name: "echo", State: "READY"}, {Name: "repeat_int32", State: "READY"}}, nil
}

// fakeClient answers echo with two text responses (a UTF-8 character
// split between them) and any other model with one repeat_int32
// response.
var fakeClient = upstreamtest.Client(upstreamtest.Replies(fakeReplies))

func fakeReplies(req *pb.ModelInferRequest) ([]*pb.ModelInferResponse, error) {
	if _, err := tensor.FromRequest(req); err != nil {
		return nil, err
	}
	resp := func(outs ...*tensor.Tensor) *pb.ModelInferResponse {
		r := &pb.ModelInferResponse{ModelName: req.GetModelName(), ModelVersion: "1"}
		tensor.ToResponse(r, outs)
		return r
	}
	if req.GetModelName() == "echo" {
		return []*pb.ModelInferResponse{resp(tensor.NewString("text_output", "h\xc3")), resp(tensor.NewString("text_output", "\xa9!"), tensor.NewString("finish_reason", "stop"))}, nil
	}
	return []*pb.ModelInferResponse{resp(tensor.NewInt32("OUT", []int64{1}, []int32{7}), tensor.NewUint32("IDX", []int64{1}, []uint32{0}))}, nil
}

func fakeServer() *Server {
	return testServer(fakeClient, fakeUpstream{}, &Options{MaxBodyBytes: 4096, SSE: &sse.Options{KeepAlive: -1}})
}

// checkResponse fails unless the recorded response is well formed for its
// content type.
func checkResponse(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	body := rec.Body.Bytes()
	switch ct := rec.Header().Get("Content-Type"); {
	case ct == "application/json":
		if !json.Valid(body) {
			t.Fatalf("%d: invalid JSON %q", rec.Code, body)
		}
	case strings.HasPrefix(ct, "text/event-stream"):
		if rec.Code != http.StatusOK {
			t.Fatalf("event stream with status %d", rec.Code)
		}
		r := sse.NewReader(bytes.NewReader(body))
		for {
			ev, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("bad event stream %q: %v", body, err)
			}
			if ev.Data != "[DONE]" && !json.Valid([]byte(ev.Data)) {
				t.Fatalf("event is not JSON: %q", ev.Data)
			}
		}
	case ct == "application/octet-stream": // Triton's binary tensor data extension
		n, err := strconv.Atoi(rec.Header().Get(tritonhttp.HeaderLength))
		if err != nil || n > len(body) || !json.Valid(body[:n]) {
			t.Fatalf("%d: %s %q with a body of %d bytes: %q", rec.Code, tritonhttp.HeaderLength, rec.Header().Get(tritonhttp.HeaderLength), len(body), body)
		}
	default:
		t.Fatalf("status %d, unexpected Content-Type %q", rec.Code, ct)
	}
	if rec.Code >= 500 {
		t.Fatalf("server error %d: %s", rec.Code, body)
	}
}

func fuzzRoute(f *testing.F, paths []string, seeds []string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	srv := fakeServer()
	h := srv.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, p := range paths {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, p, bytes.NewReader(body))
			h.ServeHTTP(rec, req)
			checkResponse(t, rec)
		}
	})
}

func FuzzGenerateRoutes(f *testing.F) {
	fuzzRoute(f, []string{"/v2/models/repeat_int32/generate", "/v2/models/repeat_int32/generate_stream", "/v2/models/echo/versions/1/generate_stream"}, []string{
		`{"IN":[1,2],"DELAY":[0,0],"WAIT":1}`, `{"id":"x","parameters":{"a":1}}`, `{"text_input":"hi","stream":true}`,
		`{"IN":["a"]}`, `{"triton_x":1}`, `[`, ``, `{"IN":[1],"IN":[2]}`,
	})
}

// FuzzInferRoute drives /infer with any body and
// Inference-Header-Content-Length.
func FuzzInferRoute(f *testing.F) {
	for _, s := range []struct {
		body string
		hl   string
	}{
		{`{"inputs":[{"name":"IN","shape":[1],"datatype":"INT32","data":[1]}]}`, ""},
		{`{"id":"a","inputs":[{"name":"IN","shape":[1],"datatype":"INT32","parameters":{"binary_data_size":4}}],"parameters":{"binary_data_output":true}}` + "\x01\x00\x00\x00", "144"},
		{`{"inputs":[],"outputs":[{"name":"OUT","parameters":{"binary_data":true}},{"name":"IDX"}]}`, "-1"},
		{"\x01\x02", "0"},
		{`{"inputs":[1,]}`, "x"},
	} {
		f.Add([]byte(s.body), s.hl)
	}
	h := fakeServer().Handler()
	f.Fuzz(func(t *testing.T, body []byte, hl string) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/v2/models/repeat_int32/infer", bytes.NewReader(body))
		if hl != "" {
			req.Header.Set(tritonhttp.HeaderLength, hl)
		}
		h.ServeHTTP(rec, req)
		checkResponse(t, rec)
	})
}

func FuzzChatCompletionsRoute(f *testing.F) {
	fuzzRoute(f, []string{"/v1/chat/completions"}, []string{
		`{"model":"echo","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"echo","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"repeat_int32","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"nope","messages":[]}`, `{"model":"echo","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"n":2}`,
	})
}

func FuzzCompletionsRoute(f *testing.F) {
	fuzzRoute(f, []string{"/v1/completions"}, []string{
		`{"model":"echo","prompt":"hi"}`, `{"model":"echo","prompt":["hi"],"stream":true,"echo":true,"stop":["x"]}`,
		`{"model":"echo","prompt":"hi","max_tokens":-1}`, `{"model":"echo","prompt":[1,2]}`,
	})
}

func FuzzResponsesRoute(f *testing.F) {
	fuzzRoute(f, []string{"/v1/responses"}, []string{
		`{"model":"echo","input":"hi"}`, `{"model":"echo","input":"hi","stream":true,"max_output_tokens":1}`,
		`{"model":"echo","instructions":"x","input":[{"role":"user","content":[{"type":"input_text","text":"x"}]}],"stream":true}`,
		`{"model":"echo","input":[{"type":"message","role":"assistant","content":"x"}],"text":{"format":{"type":"text"}}}`,
		`{"model":"echo","input":"x","tools":[{"type":"function"}]}`, `{"model":"echo","input":[]}`,
		`{"model":"repeat_int32","input":"x"}`, `{"model":"echo","input":"x","metadata":{"a":"b"},"top_k":3}`,
	})
}

func FuzzWebSocketRequest(f *testing.F) {
	for _, s := range []string{
		`{"type":"generate","id":"a","model":"repeat_int32","body":{"IN":[1],"DELAY":[0],"WAIT":0}}`,
		`{"type":"chat.completions","id":"b","body":{"model":"echo","messages":[{"role":"user","content":"x"}]}}`,
		`{"type":"completions","id":"c","body":{"model":"echo","prompt":"x"}}`,
		`{"type":"responses","id":"r","body":{"model":"echo","input":"x"}}`,
		`{"type":"generate","id":"d","model":"nope"}`, `{"type":"cancel","id":"e"}`,
		`{"type":"sequence.start","id":"f","model":"echo","body":{"text_input":"x"}}`,
		`{"type":"sequence.data","id":"f","body":{"text_input":"x"}}`,
	} {
		f.Add([]byte(s))
	}
	srv := fakeServer()
	upgrade := httptest.NewRequest(http.MethodGet, "/v1/ws", nil)
	f.Fuzz(func(t *testing.T, frame []byte) {
		req, fe := ws.ParseFrame(frame)
		if fe != nil || req.Type == ws.TypeCancel {
			return
		}
		err := ws.Serve(t.Context(), req, func(ctx context.Context, req *ws.Request, emit func([]byte) error) error {
			return srv.ws.Request(ctx, upgrade, req, emit)
		}, func(p []byte) error {
			if !json.Valid(p) {
				t.Errorf("data is not JSON: %q", p)
			}
			return nil
		})
		if err != nil {
			if e := core.Classify(err); e.Status >= 500 || e.Code == "" || e.Msg == "" {
				t.Fatalf("error %v classified as %+v", err, e)
			}
		}
	})
}

// The fake stream splits "é" across two responses; the OpenAI chunks must
// not.
func TestUTF8KeptWhole(t *testing.T) {
	rec := httptest.NewRecorder()
	fakeServer().Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/completions",
		strings.NewReader(`{"model":"echo","prompt":"x","stream":true}`)))
	var evs []string
	r := sse.NewReader(rec.Body)
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev.Data)
	}
	if len(evs) != 4 || !strings.Contains(evs[0], `"text":"h"`) || !strings.Contains(evs[1], `"text":"é!"`) {
		t.Fatalf("events %q", evs)
	}
}
