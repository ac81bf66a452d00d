package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"
	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/engine/backend"
	"github.com/streamgate/streamgate/engine/builtin"
	"github.com/streamgate/streamgate/gateway"
	"github.com/streamgate/streamgate/gateway/openai"
	"github.com/streamgate/streamgate/gateway/sse"
	"github.com/streamgate/streamgate/proto/errclass"
	"github.com/streamgate/streamgate/proto/tensor"
	"google.golang.org/grpc/codes"
)

// The models of the error tests, in a temporary repository beside the
// built-in backends:
//   - fail: a text model (vLLM convention) whose prompt says how it fails:
//     "CODE" (a gRPC code name) at once with an error of that class,
//     "data CODE" after one response, "plain" with an error of no class;
//   - repeat_tiny: repeat_int32 with one instance and room for one waiting
//     request, so that a third is refused with "Exceeds maximum queue
//     size".
var errorModels = map[string]string{
	"fail": `name: "fail" backend: "fail" max_batch_size: 0
model_transaction_policy { decoupled: True }
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
instance_group [ { count: 4 kind: KIND_CPU } ]`,
	// fail_infer is fail for /infer, which takes models that are not
	// decoupled.
	"fail_infer": `name: "fail_infer" backend: "fail" max_batch_size: 0
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]`,
	"repeat_tiny": `name: "repeat_tiny" backend: "repeat" max_batch_size: 0
model_transaction_policy { decoupled: True }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }, { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
  { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { default_queue_policy { max_queue_size: 1 } }`,
}

type failModel struct{}

func (failModel) Execute(ctx context.Context, req *backend.Request, r backend.Responder) (*backend.Response, error) {
	text, err := req.Inputs["text_input"].Strings()
	if err != nil || len(text) != 1 {
		return nil, backend.Errorf(codes.InvalidArgument, "want one text_input")
	}
	prompt := string(text[0])
	if rest, ok := strings.CutPrefix(prompt, "data "); ok {
		if err := r.Send(ctx, &backend.Response{Outputs: []*tensor.Tensor{tensor.NewString("text_output", "x")}}); err != nil {
			return nil, nil
		}
		prompt = rest
	}
	if prompt == "plain" {
		return nil, errors.New("the model broke")
	}
	code, ok := errclass.Parse(prompt)
	if !ok {
		return nil, backend.Errorf(codes.InvalidArgument, "no such code %q", prompt)
	}
	return nil, backend.Errorf(code, "the model failed with %s", prompt)
}

// newErrorStack is a stack serving a temporary repository of the
// built-in models and the error models; chat messages reach fail as they
// are.
func newErrorStack(t *testing.T, opts *gateway.Options) *testStack {
	t.Helper()
	if opts == nil {
		opts = &gateway.Options{}
	}
	opts.ChatTemplates = map[string]string{"fail": openai.RawTemplate}
	repo := t.TempDir()
	if err := os.CopyFS(repo, builtin.FS); err != nil {
		t.Fatal(err)
	}
	for name, cfg := range errorModels {
		if err := os.MkdirAll(filepath.Join(repo, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, name, "config.pbtxt"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return newStack(t, opts, func(c *stack.Config) {
		backends := builtin.Backends()
		backends["fail"] = func(backend.Config) (backend.Backend, error) { return failModel{}, nil }
		c.Engine.ModelDir, c.Engine.Backends = repo, backends
	})
}

// answer is one HTTP answer, read whole.
type answer struct {
	status     int
	retryAfter string
	ctype      string
	body       string
}

func (s *testStack) ask(t *testing.T, path, body string) answer {
	t.Helper()
	resp, b := s.post(t, path, body)
	return answer{resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"), b}
}

// wsAsk sends one request frame and returns the frames up to its
// terminal one.
func wsAsk(t *testing.T, c *websocket.Conn, frame string) []string {
	t.Helper()
	wsSend(t, c, frame)
	var out []string
	for {
		f, raw, err := wsRead(t, c)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(raw))
		if f.Type != "data" {
			return out
		}
	}
}

// Every class an engine error can have reaches the client as its status
// on every route, in the route's error shape: Triton's JSON on /v2 (an
// event-stream body of one error event on generate_stream, as Triton),
// OpenAI's JSON on /v1, an error frame on the WebSocket. Overload (429,
// 503) carries Retry-After.
func TestEngineErrorsOnEveryRoute(t *testing.T) {
	s := newErrorStack(t, &gateway.Options{SSE: &sse.Options{KeepAlive: -1}})
	c := s.dialWS(t)
	for _, tc := range []struct {
		prompt  string
		status  int
		code    string // the OpenAI and WebSocket error code
		retry   bool
		oaiType string
	}{
		{"INVALID_ARGUMENT", 400, "model_error", false, "invalid_request_error"},
		{"NOT_FOUND", 404, "model_error", false, "invalid_request_error"},
		{"ALREADY_EXISTS", 400, "model_error", false, "invalid_request_error"},
		{"FAILED_PRECONDITION", 400, "model_error", false, "invalid_request_error"},
		{"OUT_OF_RANGE", 400, "model_error", false, "invalid_request_error"},
		{"UNKNOWN", 400, "model_error", false, "invalid_request_error"},
		{"RESOURCE_EXHAUSTED", 429, "too_many_requests", true, "rate_limit_error"},
		{"UNAVAILABLE", 503, "unavailable", true, "server_error"},
		{"CANCELLED", 503, "unavailable", true, "server_error"},
		{"UNIMPLEMENTED", 501, "model_error", false, "server_error"},
		{"DEADLINE_EXCEEDED", 504, "model_error", false, "server_error"},
		{"INTERNAL", 500, "model_error", false, "server_error"},
		{"DATA_LOSS", 500, "model_error", false, "server_error"},
	} {
		msg := "the model failed with " + tc.prompt
		retry := ""
		if tc.retry {
			retry = "1"
		}
		tritonBody := `{"error":"` + msg + `"}`
		oaiBody := `{"error":{"message":"` + msg + `","type":"` + tc.oaiType + `","param":null,"code":"` + tc.code + `"}}`
		for _, q := range []struct {
			path, body  string
			ctype, want string
		}{
			{"/v2/models/fail/generate", `{"text_input":"` + tc.prompt + `"}`, "application/json", tritonBody},
			{"/v2/models/fail/generate_stream", `{"text_input":"` + tc.prompt + `"}`, "text/event-stream; charset=utf-8", "id: 1\ndata: " + tritonBody + "\n\n"},
			{"/v1/completions", `{"model":"fail","prompt":"` + tc.prompt + `"}`, "application/json", oaiBody},
			{"/v1/completions", `{"model":"fail","prompt":"` + tc.prompt + `","stream":true}`, "application/json", oaiBody},
			{"/v1/chat/completions", `{"model":"fail","messages":[{"role":"user","content":"` + tc.prompt + `"}],"stream":true}`, "application/json", oaiBody},
			{"/v1/responses", `{"model":"fail","input":"` + tc.prompt + `"}`, "application/json", oaiBody},
			{"/v1/responses", `{"model":"fail","input":"` + tc.prompt + `","stream":true}`, "application/json", oaiBody},
		} {
			got := s.ask(t, q.path, q.body)
			if got.status != tc.status || got.retryAfter != retry || got.ctype != q.ctype || got.body != q.want {
				t.Errorf("%s %s\n got %d Retry-After %q %s %q\nwant %d Retry-After %q %s %q", q.path, q.body,
					got.status, got.retryAfter, got.ctype, got.body, tc.status, retry, q.ctype, q.want)
			}
		}
		frames := wsAsk(t, c, `{"type":"completions","id":"`+tc.prompt+`","body":{"model":"fail","prompt":"`+tc.prompt+`"}}`)
		want := `{"type":"error","id":"` + tc.prompt + `","error":{"code":"` + tc.code + `","message":"` + msg + `"}}`
		if len(frames) != 1 || frames[0] != want {
			t.Errorf("ws %s: %q, want %s", tc.prompt, frames, want)
		}
	}

	// An error without a class is UNKNOWN, as Triton reports it: 400.
	if got := s.ask(t, "/v2/models/fail/generate", `{"text_input":"plain"}`); got.status != 400 || got.body != `{"error":"the model broke"}` {
		t.Errorf("plain: %+v", got)
	}
	// The engine's own rejections: a bad parameter, a backend's check.
	if got := s.ask(t, "/v2/models/repeat_int32/generate", `{"IN":[1],"DELAY":[0],"WAIT":0,"priority":-1}`); got.status != 400 ||
		got.body != `{"error":"invalid value for 'priority', expected value \u003e= 0."}` {
		t.Errorf("priority: %+v", got)
	}
	if got := s.ask(t, "/v2/models/repeat_int32/generate", `{"IN":[1],"DELAY":[0,0],"WAIT":0}`); got.status != 400 ||
		got.body != `{"error":"expected IN and DELAY shape to match, got [1] and [2]"}` {
		t.Errorf("shape: %+v", got)
	}

	// After data, an error is the last event of a 200 stream, and the
	// WebSocket's error frame follows the data frames.
	got := s.ask(t, "/v1/completions", `{"model":"fail","prompt":"data UNAVAILABLE","stream":true}`)
	evs := events(t, got.body)
	if got.status != 200 || len(evs) != 2 || !strings.Contains(evs[0], `"text":"x"`) ||
		evs[1] != `{"error":{"message":"the model failed with UNAVAILABLE","type":"server_error","param":null,"code":"unavailable"}}` {
		t.Errorf("error after data: %d %q", got.status, evs)
	}
	// A Responses stream ends with response.failed: the Response, failed,
	// with the error and the text so far.
	got = s.ask(t, "/v1/responses", `{"model":"fail","input":"data UNAVAILABLE","stream":true}`)
	nevs := namedEvents(t, got.body)
	if got.status != 200 || len(nevs) != 6 || nevs[4].Data["delta"] != "x" || nevs[5].Name != "response.failed" {
		t.Fatalf("responses error after data: %d %s", got.status, got.body)
	}
	var failed struct{ Response responseObject }
	if err := json.Unmarshal([]byte(nevs[5].Raw), &failed); err != nil {
		t.Fatal(err)
	}
	if r := failed.Response; r.Status != "failed" || r.Error == nil || r.Error.Code != "unavailable" ||
		r.Error.Message != "the model failed with UNAVAILABLE" || r.text() != "x" {
		t.Errorf("response.failed: %s", nevs[5].Raw)
	}
	frames := wsAsk(t, c, `{"type":"completions","id":"d","body":{"model":"fail","prompt":"data RESOURCE_EXHAUSTED"}}`)
	if len(frames) != 2 || !strings.HasPrefix(frames[0], `{"type":"data","id":"d","seq":0,`) ||
		frames[1] != `{"type":"error","id":"d","error":{"code":"too_many_requests","message":"the model failed with RESOURCE_EXHAUSTED"}}` {
		t.Errorf("ws error after data: %q", frames)
	}
	c.Close(websocket.StatusNormalClosure, "")
}

// A model whose queue is full refuses with 503 and Retry-After on every
// route, in the route's shape.
func TestQueueFullOnEveryRoute(t *testing.T) {
	s := newErrorStack(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	long := `{"IN":[1],"DELAY":[60000],"WAIT":60000}` // holds the one instance for a minute
	var running sync.WaitGroup
	defer running.Wait()
	hold := func() <-chan answer {
		ch := make(chan answer, 1)
		running.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v2/models/repeat_tiny/generate", strings.NewReader(long))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				ch <- answer{}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			ch <- answer{resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"), string(b)}
		})
		return ch
	}
	hold()
	waitFor(t, "the first request to hold the instance", func() bool { return s.eng.InFlight() == 1 })
	// Of two more, one waits in the queue and the other is refused.
	first, second := hold(), hold()
	var refused answer
	select {
	case refused = <-first:
	case refused = <-second:
	}
	const msg = "Exceeds maximum queue size"
	if refused.status != 503 || refused.retryAfter != "1" || refused.body != `{"error":"`+msg+`"}` {
		t.Fatalf("refused: %+v", refused)
	}
	// The queue is full now: every route is refused.
	for _, q := range []struct{ path, want string }{
		{"/v2/models/repeat_tiny/generate", `{"error":"` + msg + `"}`},
		{"/v2/models/repeat_tiny/generate_stream", "id: 1\ndata: {\"error\":\"" + msg + "\"}\n\n"},
	} {
		got := s.ask(t, q.path, long)
		if got.status != 503 || got.retryAfter != "1" || got.body != q.want {
			t.Errorf("%s: %+v", q.path, got)
		}
	}
	c := s.dialWS(t)
	frames := wsAsk(t, c, `{"type":"generate","id":"q","model":"repeat_tiny","body":`+long+`}`)
	if want := `{"type":"error","id":"q","error":{"code":"unavailable","message":"` + msg + `"}}`; len(frames) != 1 || frames[0] != want {
		t.Errorf("ws: %q, want %s", frames, want)
	}
	c.Close(websocket.StatusNormalClosure, "")
	cancel()
}

// An engine that is shutting down refuses new requests: 503 with
// Retry-After, while its running request finishes.
func TestEngineShuttingDown(t *testing.T) {
	s := newErrorStack(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream := s.startStream(t, ctx, "/v2/models/echo_slow/generate_stream", longStream)
	defer stream.Body.Close()
	if _, err := sse.NewReader(stream.Body).Next(); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		s.eng.GracefulStop(t.Context()) // waits for the running stream
	}()
	waitFor(t, "the engine to stop taking requests", func() bool {
		ok, _ := s.up.ServerReady(t.Context())
		return !ok
	})
	got := s.ask(t, "/v2/models/square_int32/generate", `{"IN":1}`)
	if got.status != 503 || got.retryAfter != "1" || !strings.HasPrefix(got.body, `{"error":`) {
		t.Errorf("refused: %+v", got)
	}
	cancel()
	stream.Body.Close()
	<-stopped
}
