package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/streamgate/streamgate/cmd/internal/otlptest"
	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/cmd/internal/telemetry"
	"github.com/streamgate/streamgate/gateway"
	"github.com/streamgate/streamgate/gateway/ws"
)

// clientTrace is the trace context a client sends: a new trace id and the
// id of the client's own span.
type clientTrace struct{ traceID, spanID string }

func newClientTrace() clientTrace {
	var b [24]byte
	rand.Read(b[:])
	return clientTrace{hex.EncodeToString(b[:16]), hex.EncodeToString(b[16:])}
}

func (c clientTrace) header() string { return "00-" + c.traceID + "-" + c.spanID + "-01" }

// post sends body to url as the client of trace c would; the caller
// closes the response.
func (c clientTrace) post(t *testing.T, ctx context.Context, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("traceparent", c.header())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// tracedStack is a stack whose telemetry is configured the standard way,
// from OTEL_* variables, exporting over OTLP/gRPC to a receiver, with its
// log (JSON, debug level) kept.
func tracedStack(t *testing.T) (*testStack, *otlptest.Receiver, *telemetry.Telemetry, *syncBuffer) {
	t.Helper()
	rcv := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.Endpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_SERVICE_NAME", "streamgate-e2e")
	tel, err := telemetry.New(t.Context(), telemetry.Options{FromEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	if !tel.Tracing {
		t.Fatal("OTEL_EXPORTER_OTLP_ENDPOINT set, yet no traces are exported")
	}
	logs := &syncBuffer{}
	s := newStack(t, &gateway.Options{}, func(cfg *stack.Config) {
		cfg.Telemetry = tel
		cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	// After the stack (cleanups run last first): nothing records any more.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tel.Shutdown(ctx)
	})
	return s, rcv, tel, logs
}

// spanChain waits until trace ct has a chain of spans named names, each
// the child of the one before and the first the child of the client's
// span, and returns them. Other spans of the trace are allowed.
func spanChain(t *testing.T, rcv *otlptest.Receiver, tel *telemetry.Telemetry, ct clientTrace, names ...string) []otlptest.Span {
	t.Helper()
	var chain []otlptest.Span
	find := func() bool {
		if err := tel.Flush(t.Context()); err != nil {
			t.Fatalf("flush: %v", err)
		}
		spans := rcv.Spans(ct.traceID)
		chain = chain[:0]
		parent := ct.spanID
		for _, name := range names {
			var found *otlptest.Span
			for i, s := range spans {
				if s.Name == name && s.ParentID == parent {
					found = &spans[i]
				}
			}
			if found == nil {
				return false
			}
			chain = append(chain, *found)
			parent = found.SpanID
		}
		return true
	}
	deadline := time.Now().Add(waitHang)
	for !find() {
		if time.Now().After(deadline) {
			var got []string
			for _, s := range rcv.Spans(ct.traceID) {
				got = append(got, s.Name+" "+s.SpanID+"<-"+s.ParentID)
			}
			t.Fatalf("trace %s: no chain %q under the client's span %s; spans:\n%s", ct.traceID, names, ct.spanID, strings.Join(got, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return chain
}

// checkEngineSpans checks the gateway → upstream → engine chain: kinds,
// service, and the engine span's queue and execute children.
func checkChain(t *testing.T, rcv *otlptest.Receiver, chain []otlptest.Span) {
	t.Helper()
	kinds := map[string]tracepb.Span_SpanKind{}
	for _, s := range chain {
		kinds[s.Name] = s.Kind
		if s.Service != "streamgate-e2e" {
			t.Errorf("span %s from service %q, want OTEL_SERVICE_NAME's streamgate-e2e", s.Name, s.Service)
		}
	}
	n := len(chain)
	up, eng := chain[n-2], chain[n-1]
	if up.Kind != tracepb.Span_SPAN_KIND_CLIENT || eng.Kind != tracepb.Span_SPAN_KIND_SERVER || chain[0].Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("span kinds %v, want server ... client (upstream), server (engine)", kinds)
	}
	children := map[string]bool{}
	for _, s := range rcv.Spans(eng.TraceID) {
		if s.ParentID == eng.SpanID {
			children[s.Name] = true
		}
	}
	if !children["queue"] || !children["execute"] {
		t.Errorf("engine span %s has children %v, want queue and execute", eng.Name, children)
	}
}

// One client traceparent, one trace: the gateway's server span continues
// it, the upstream span is its child and the engine's span the upstream
// span's, over real loopback gRPC, for an SSE stream, an OpenAI request, a
// WebSocket request and a cancelled request; the spans reach a real
// OTLP/gRPC endpoint configured by OTEL_* variables, and the request's log
// lines carry its trace and span ids.
func TestTraceFromClientToEngine(t *testing.T) {
	s, rcv, tel, logs := tracedStack(t)
	do := func(ct clientTrace, path, body string) string {
		resp := ct.post(t, t.Context(), s.url+path, body)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}

	t.Run("sse", func(t *testing.T) {
		ct := newClientTrace()
		do(ct, "/v2/models/repeat_int32/generate_stream", repeatBody(3, 1, 0, 0))
		chain := spanChain(t, rcv, tel, ct, "POST /v2/models/{model}/generate_stream", "generate repeat_int32", "infer repeat_int32")
		checkChain(t, rcv, chain)
		if got := chain[0].Attrs["http.route"]; got != "/v2/models/{model}/generate_stream" {
			t.Errorf("server span http.route %q", got)
		}
		if got := chain[1].Attrs["streamgate.responses"]; got != "3" {
			t.Errorf("upstream span counts %s responses, want 3", got)
		}
	})

	t.Run("openai", func(t *testing.T) {
		ct := newClientTrace()
		do(ct, "/v1/chat/completions", `{"model":"echo","messages":[{"role":"user","content":"a b c"}],"stream":true}`)
		chain := spanChain(t, rcv, tel, ct, "POST /v1/chat/completions", "chat echo", "infer echo")
		checkChain(t, rcv, chain)
		up := chain[1]
		if up.Attrs["gen_ai.request.model"] != "echo" || up.Attrs["gen_ai.operation.name"] != "chat" || len(up.Events) == 0 || up.Events[0] != "first_response" {
			t.Errorf("upstream span attributes %v, events %v", up.Attrs, up.Events)
		}

		// The gateway's log line of the request names its trace and its
		// server span.
		var found bool
		for _, line := range strings.Split(logs.String(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "request" || rec["route"] != "/v1/chat/completions" {
				continue
			}
			if rec["trace_id"] == ct.traceID {
				found = true
				if rec["span_id"] != chain[0].SpanID {
					t.Errorf("log line %s: span_id is not the server span's %s", line, chain[0].SpanID)
				}
			}
		}
		if !found {
			t.Errorf("no request log line with trace_id %s in:\n%s", ct.traceID, tail(logs.String(), 4<<10))
		}
	})

	// The Responses API's x-request-id is on its server span and its log
	// line too.
	t.Run("responses", func(t *testing.T) {
		ct := newClientTrace()
		resp := ct.post(t, t.Context(), s.url+"/v1/responses", `{"model":"echo","input":"a b"}`)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		id := resp.Header.Get("X-Request-Id")
		if resp.StatusCode != http.StatusOK || id == "" {
			t.Fatalf("POST /v1/responses: %d, x-request-id %q", resp.StatusCode, id)
		}
		chain := spanChain(t, rcv, tel, ct, "POST /v1/responses", "chat echo", "infer echo")
		if got := chain[0].Attrs["http.response.header.x-request-id"]; !strings.Contains(got, `"`+id+`"`) {
			t.Errorf("server span's http.response.header.x-request-id %s, want %s", got, id)
		}
		var found bool
		for _, line := range strings.Split(logs.String(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "request" && rec["route"] == "/v1/responses" && rec["request_id"] == id {
				found = rec["trace_id"] == ct.traceID
			}
		}
		if !found {
			t.Errorf("no request log line with request_id %s and trace_id %s in:\n%s", id, ct.traceID, tail(logs.String(), 4<<10))
		}
	})

	t.Run("websocket", func(t *testing.T) {
		ct := newClientTrace()
		c, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(s.url, "http")+"/v1/ws", &websocket.DialOptions{
			Subprotocols: []string{ws.Subprotocol},
			HTTPHeader:   http.Header{"Traceparent": {ct.header()}},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		wsSend(t, c, `{"type":"chat.completions","id":"a1","body":{"model":"echo","messages":[{"role":"user","content":"x"}],"stream":true}}`)
		for {
			f, _, err := wsRead(t, c)
			if err != nil {
				t.Fatal(err)
			}
			if f.Type == "done" {
				break
			}
			if f.Type == "error" {
				t.Fatalf("error frame %+v", f.Error)
			}
		}
		c.Close(websocket.StatusNormalClosure, "") // the socket's span ends with it
		chain := spanChain(t, rcv, tel, ct, "GET /v1/ws", "WS chat.completions", "chat echo", "infer echo")
		checkChain(t, rcv, chain)
		if got := chain[0].Attrs["http.response.status_code"]; got != "101" {
			t.Errorf("socket span status code %s, want 101", got)
		}
	})

	t.Run("cancelled", func(t *testing.T) {
		ct := newClientTrace()
		ctx, abort := context.WithCancel(t.Context())
		defer abort()
		resp := ct.post(t, ctx, s.url+"/v1/chat/completions",
			`{"model":"echo_slow","messages":[{"role":"user","content":"`+words(5000)+`"}],"stream":true}`)
		if _, err := newSSEReader(resp.Body).next(); err != nil { // the stream runs
			t.Fatal(err)
		}
		abort()
		resp.Body.Close()
		chain := spanChain(t, rcv, tel, ct, "POST /v1/chat/completions", "chat echo_slow", "infer echo_slow")
		checkChain(t, rcv, chain)
		up, eng := chain[1], chain[2]
		if up.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || up.Attrs["error.type"] != "cancelled" || !hasEvent(up, "cancel") {
			t.Errorf("upstream span of a cancelled request: status %v, attributes %v, events %v; want cancelled", up.Status, up.Attrs, up.Events)
		}
		if eng.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || eng.Status.GetMessage() != "cancelled" || !hasEvent(eng, "cancelled") {
			t.Errorf("engine span of a cancelled request: status %v, events %v; want cancelled", eng.Status, eng.Events)
		}
	})

	// The same endpoint received the metrics (OTLP push beside /metrics).
	if err := tel.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := rcv.Metrics()
	for _, name := range []string{"gen_ai.server.time_to_first_token", "streamgate.gateway.http_requests", "streamgate.upstream.requests", "streamgate.engine.queue.wait", "go.goroutines"} {
		if got[name] == 0 {
			t.Errorf("no %s data points over OTLP; got %v", name, got)
		}
	}
}

func hasEvent(s otlptest.Span, name string) bool {
	for _, e := range s.Events {
		if e == name {
			return true
		}
	}
	return false
}
