package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/gateway"
	"github.com/streamgate/streamgate/gateway/store"
	"github.com/streamgate/streamgate/gateway/store/redistest"
	"github.com/streamgate/streamgate/upstream"
)

// The error statuses of openapi.yaml are the server's, in both
// directions. Every response a test of this package reads through
// testStack.do, get or post is checked against the document
// (checkResponse): an error status the operation does not list fails it,
// whatever test met it (only 500, an unexpected failure, falls to
// `default`). And TestOpenAPIErrorStatuses produces every error status the
// document lists, on every operation, each checked against the
// documented shape.

// errorOp is one operation as the error cases call it: its path with
// MODEL where the model goes (and ID, SID for a stored response and a
// resumable stream), the model that takes body, and a body that model
// takes ("" for none). Method and pattern name the operation.
type errorOp struct {
	method, pattern string
	path, model     string
	body            string
	// text is a body for a text model (MODEL, in the path or the body,
	// and TEXT filled in), on the generation routes: echo_slow, whose
	// first response comes later than the upstream idle timeout, 504; the
	// fail model, a model error of the class TEXT names.
	text string
}

func (o errorOp) key() string { return o.method + " " + o.pattern }

// at is o's path for model (the op's own when ""), with the stored
// response id and resumable stream id filled in.
func (o errorOp) at(model, id, sid string) string {
	if model == "" {
		model = o.model
	}
	r := strings.NewReplacer("MODEL", model, "SID", sid, "ID", id)
	return r.Replace(o.path)
}

func (o errorOp) textBody(model, text string) []byte {
	return []byte(strings.NewReplacer("MODEL", model, "TEXT", text).Replace(o.text))
}

func (o errorOp) bodyFor(model string) []byte {
	if o.body == "" {
		return nil
	}
	if model == "" {
		model = o.model
	}
	return []byte(strings.ReplaceAll(o.body, "MODEL", model))
}

const errInferBody = `{"inputs":[{"name":"INPUT0","shape":[2],"datatype":"INT32","data":[1,2]}]}`

// errorOps are the operations that answer errors: every route of the
// gateway but the probes, the metrics and the playground.
var errorOps = []errorOp{
	{method: "GET", pattern: "/v2", path: "/v2"},
	{method: "POST", pattern: "/v2/repository/index", path: "/v2/repository/index", body: `{}`},
	{method: "GET", pattern: "/v2/models/stats", path: "/v2/models/stats"},
	{method: "GET", pattern: "/v2/models/{model}/stats", path: "/v2/models/MODEL/stats", model: "echo"},
	{method: "GET", pattern: "/v2/models/{model}/versions/{version}/stats", path: "/v2/models/MODEL/versions/1/stats", model: "echo"},
	{method: "GET", pattern: "/v2/models/{model}/config", path: "/v2/models/MODEL/config", model: "echo"},
	{method: "GET", pattern: "/v2/models/{model}/versions/{version}/config", path: "/v2/models/MODEL/versions/1/config", model: "echo"},
	{method: "GET", pattern: "/v2/models/{model}", path: "/v2/models/MODEL", model: "echo"},
	{method: "GET", pattern: "/v2/models/{model}/versions/{version}", path: "/v2/models/MODEL/versions/1", model: "echo"},
	{method: "POST", pattern: "/v2/models/{model}/infer", path: "/v2/models/MODEL/infer", model: "identity_int32", body: errInferBody},
	{method: "POST", pattern: "/v2/models/{model}/versions/{version}/infer", path: "/v2/models/MODEL/versions/1/infer", model: "identity_int32", body: errInferBody},
	{method: "POST", pattern: "/v2/models/{model}/generate", path: "/v2/models/MODEL/generate", model: "square_int32", body: `{"IN":1}`, text: `{"text_input":"TEXT"}`},
	{method: "POST", pattern: "/v2/models/{model}/versions/{version}/generate", path: "/v2/models/MODEL/versions/1/generate", model: "square_int32", body: `{"IN":1}`, text: `{"text_input":"TEXT"}`},
	{method: "POST", pattern: "/v2/models/{model}/generate_stream", path: "/v2/models/MODEL/generate_stream", model: "square_int32", body: `{"IN":1}`, text: `{"text_input":"TEXT"}`},
	{method: "POST", pattern: "/v2/models/{model}/versions/{version}/generate_stream", path: "/v2/models/MODEL/versions/1/generate_stream", model: "square_int32", body: `{"IN":1}`, text: `{"text_input":"TEXT"}`},
	{method: "POST", pattern: "/v1/chat/completions", path: "/v1/chat/completions", model: "echo",
		body: `{"model":"MODEL","messages":[{"role":"user","content":"w0 w1"}],"max_tokens":2}`, text: `{"model":"MODEL","messages":[{"role":"user","content":"TEXT"}]}`},
	{method: "POST", pattern: "/v1/completions", path: "/v1/completions", model: "echo",
		body: `{"model":"MODEL","prompt":"w0 w1","max_tokens":2}`, text: `{"model":"MODEL","prompt":"TEXT"}`},
	{method: "POST", pattern: "/v1/responses", path: "/v1/responses", model: "echo",
		body: `{"model":"MODEL","input":"w0 w1","max_output_tokens":2}`, text: `{"model":"MODEL","input":"TEXT"}`},
	{method: "GET", pattern: "/v1/responses/{id}", path: "/v1/responses/ID"},
	{method: "DELETE", pattern: "/v1/responses/{id}", path: "/v1/responses/ID"},
	{method: "POST", pattern: "/v1/responses/{id}/cancel", path: "/v1/responses/ID/cancel"},
	{method: "GET", pattern: "/v1/responses/{id}/input_items", path: "/v1/responses/ID/input_items"},
	{method: "GET", pattern: "/v1/models", path: "/v1/models"},
	{method: "GET", pattern: "/v1/models/{id}", path: "/v1/models/MODEL", model: "echo"},
	{method: "GET", pattern: "/v1/streams/{sid}", path: "/v1/streams/SID"},
	{method: "DELETE", pattern: "/v1/streams/{sid}", path: "/v1/streams/SID"},
}

// documentedErrors is every operation's listed error statuses (400 and
// up), by "METHOD pattern".
func (s *spec) documentedErrors() map[string][]int {
	out := map[string][]int{}
	paths := s.doc["paths"].(map[string]any)
	for pattern := range paths {
		item, _ := s.resolve(paths[pattern], nil)
		for _, m := range []string{"get", "put", "post", "delete"} {
			op, _ := item[m].(map[string]any)
			if op == nil {
				continue
			}
			responses, _ := op["responses"].(map[string]any)
			for k := range responses {
				if st, err := strconv.Atoi(k); err == nil && st >= 400 {
					key := strings.ToUpper(m) + " " + pattern
					out[key] = append(out[key], st)
				}
			}
		}
	}
	for _, sts := range out {
		slices.Sort(sts)
	}
	return out
}

// TestOpenAPIErrorStatuses produces every error status openapi.yaml lists
// for every operation, each checked against its documented shape, and
// fails on a listed status no case produces.
func TestOpenAPIErrorStatuses(t *testing.T) {
	sp := loadSpec(t)
	produced := map[string]map[int]bool{}
	// expect sends a request and checks it got want (do has checked the
	// answer against openapi.yaml).
	expect := func(t *testing.T, s *testStack, op string, want int, method, path string, body []byte, h http.Header) {
		t.Helper()
		if h == nil {
			h = http.Header{}
		}
		if body != nil && h.Get("Content-Type") == "" {
			h.Set("Content-Type", "application/json")
		}
		resp, b := s.do(t, method, path, body, h)
		if resp.StatusCode != want {
			t.Errorf("%s (%s %s): %d %s, want %d", op, method, path, resp.StatusCode, b, want)
			return
		}
		if produced[op] == nil {
			produced[op] = map[int]bool{}
		}
		produced[op][want] = true
	}

	// Open gateway: bad input, unknown things, limits, upstream timeout.
	s := newStack(t, &gateway.Options{MaxBodyBytes: 2 << 10, BodyTimeout: 200 * time.Millisecond}, func(c *stack.Config) {
		c.UpstreamOptions = &upstream.Options{ModelIdleTimeouts: map[string]time.Duration{"echo_slow": time.Millisecond}}
	})
	// A stored response (not background) and a resumable stream.
	resp, body := s.post(t, "/v1/responses", `{"model":"echo","input":"w0 w1","max_output_tokens":2}`)
	id := jsonField(t, body, "id")
	if resp.StatusCode != 200 || id == "" {
		t.Fatalf("POST /v1/responses: %d %s", resp.StatusCode, body)
	}
	resp, _ = s.do(t, "POST", "/v2/models/square_int32/generate_stream", []byte(`{"IN":1}`), http.Header{"Content-Type": {"application/json"}, "Streamgate-Resumable": {"true"}})
	sid := resp.Header.Get("Streamgate-Stream-Id")
	if resp.StatusCode != 200 || sid == "" {
		t.Fatalf("resumable stream: %d %v", resp.StatusCode, resp.Header)
	}
	big := []byte(`{"x":"` + strings.Repeat("x", 4<<10) + `"}`)
	for _, o := range errorOps {
		op, path := o.key(), o.at("", id, sid)
		if o.model != "" {
			expect(t, s, op, unknownModelStatus(o), o.method, o.at("no_such_model", id, sid), o.bodyFor("no_such_model"), nil)
		}
		if o.body != "" {
			expect(t, s, op, http.StatusBadRequest, o.method, path, []byte(`{"x":`), nil)
			expect(t, s, op, http.StatusRequestEntityTooLarge, o.method, path, big, nil)
			slowBodyStatus(t, s, op, o.method, path, produced)
			enc, st := "gzip", http.StatusUnsupportedMediaType
			if strings.HasSuffix(o.pattern, "/infer") {
				enc, st = "br", http.StatusNotImplemented // Triton's answer
			}
			expect(t, s, op, st, o.method, path, o.bodyFor(""), http.Header{"Content-Encoding": {enc}})
		}
		if o.text != "" {
			expect(t, s, op, http.StatusGatewayTimeout, o.method, o.at("echo_slow", id, sid), o.textBody("echo_slow", "w0 w1"), nil)
		}
		if strings.HasPrefix(o.pattern, "/v1/responses/") {
			expect(t, s, op, http.StatusNotFound, o.method, o.at("", "resp_no_such", sid), nil, nil)
		}
		if strings.Contains(o.pattern, "{sid}") {
			expect(t, s, op, http.StatusNotFound, o.method, o.at("", id, "no_such_stream"), nil, nil)
		}
	}
	// Bad parameters of the stored responses and streams, a decoupled
	// model on /infer.
	expect(t, s, "GET /v1/responses/{id}", 400, "GET", "/v1/responses/"+id+"?stream=true", nil, nil)
	expect(t, s, "POST /v1/responses/{id}/cancel", 400, "POST", "/v1/responses/"+id+"/cancel", nil, nil)
	expect(t, s, "GET /v1/responses/{id}/input_items", 400, "GET", "/v1/responses/"+id+"/input_items?limit=0", nil, nil)
	expect(t, s, "GET /v1/streams/{sid}", 400, "GET", "/v1/streams/"+sid, nil, http.Header{"Last-Event-Id": {"x"}})
	for _, p := range []string{"/v2/models/repeat_int32/infer", "/v2/models/repeat_int32/versions/1/infer"} {
		pattern := strings.Replace(p, "repeat_int32", "{model}", 1)
		pattern = strings.Replace(pattern, "/1/", "/{version}/", 1)
		expect(t, s, "POST "+pattern, 501, "POST", p, []byte(`{"inputs":[{"name":"IN","shape":[1],"datatype":"INT32","data":[1]}]}`), nil)
	}
	// The WebSocket: not an upgrade, another origin, then draining.
	upgrade := func(origin string) http.Header {
		h := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"},
			"Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}, "Sec-Websocket-Protocol": {"streamgate.v1"}}
		if origin != "" {
			h.Set("Origin", origin)
		}
		return h
	}
	expect(t, s, "GET /v1/ws", http.StatusUpgradeRequired, "GET", "/v1/ws", nil, nil)
	expect(t, s, "GET /v1/ws", http.StatusForbidden, "GET", "/v1/ws", nil, upgrade("http://elsewhere.example"))
	// An open gateway asked for by a name it does not answer (DNS
	// rebinding): every route.
	for _, p := range []string{"/", "/healthz", "/readyz", "/metrics", "/v2/health/live", "/v2/health/ready"} {
		expect(t, s, "GET "+p, http.StatusForbidden, "GET", p, nil, http.Header{"Host": {"rebind.example"}})
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	s.gw.Drain(ctx) // nothing runs: it returns at once
	expect(t, s, "GET /v1/ws", http.StatusServiceUnavailable, "GET", "/v1/ws", nil, upgrade(""))
	expect(t, s, "GET /readyz", http.StatusServiceUnavailable, "GET", "/readyz", nil, nil)
	expect(t, s, "GET /v2/health/ready", http.StatusServiceUnavailable, "GET", "/v2/health/ready", nil, nil)

	// Model errors: the engine's classes the other cases leave out.
	failing := newErrorStack(t, nil)
	for _, o := range errorOps {
		if o.text != "" {
			expect(t, failing, o.key(), http.StatusNotImplemented, o.method, o.at("fail", "", ""), o.textBody("fail", "UNIMPLEMENTED"), nil)
		}
		if strings.HasSuffix(o.pattern, "/infer") {
			body := []byte(`{"inputs":[{"name":"text_input","shape":[1],"datatype":"BYTES","data":["DEADLINE_EXCEEDED"]}]}`)
			expect(t, failing, o.key(), http.StatusGatewayTimeout, o.method, o.at("fail_infer", "", ""), body, nil)
		}
	}

	// A sequence whose engine went away: 409 for its next request.
	holder := engineStack(t)
	lost := gatewayTo(t, holder)
	var next []func()
	for i, o := range errorOps {
		seq := strconv.Itoa(100 + i)
		var start, more string
		switch {
		case strings.HasSuffix(o.pattern, "/infer"):
			start = `{"inputs":[{"name":"INPUT","shape":[1,1],"datatype":"INT32","data":[1]}],"parameters":{"sequence_id":` + seq + `,"sequence_start":true}}`
			more = `{"inputs":[{"name":"INPUT","shape":[1,1],"datatype":"INT32","data":[2]}],"parameters":{"sequence_id":` + seq + `}}`
		case strings.Contains(o.pattern, "/generate"):
			start = `{"INPUT":1,"sequence_id":` + seq + `,"sequence_start":true}`
			more = `{"INPUT":2,"sequence_id":` + seq + `}`
		default:
			continue
		}
		path := o.at("simple_sequence", "", "")
		if resp, b := lost.do(t, o.method, path, []byte(start), http.Header{"Content-Type": {"application/json"}}); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: sequence start: %d %s", o.key(), resp.StatusCode, b)
		}
		next = append(next, func() { expect(t, lost, o.key(), http.StatusConflict, o.method, path, []byte(more), nil) })
	}
	holder.StopNow()
	for _, f := range next {
		f()
	}

	// Upstream unreachable: the probes.
	down := newStack(t, nil, func(c *stack.Config) { c.Engine, c.Upstream = nil, []string{freeAddr(t)} })
	expect(t, down, "GET /v2/health/live", http.StatusServiceUnavailable, "GET", "/v2/health/live", nil, nil)
	for _, p := range []string{"/v2/models/echo/ready", "/v2/models/echo/versions/1/ready"} {
		pattern := strings.Replace(strings.Replace(p, "echo", "{model}", 1), "/1/", "/{version}/", 1)
		expect(t, down, "GET "+pattern, http.StatusServiceUnavailable, "GET", p, nil, nil)
	}

	// API keys: none (401), beyond the key's requests per minute (429),
	// the shared store down (503). The key is checked before the route
	// looks at anything else.
	st := store.NewMemory()
	keyed := newKeyedStack(t, st)
	rd := redistest.Start(t)
	rst, err := store.Open(rd.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer rst.Close()
	// A resumable stream whose first events Redis no longer holds (as
	// after its log passed store.MaxStreamEvents): 410. Its 200 events
	// take several log entries (an entry holds at most 64), of which
	// the last is kept.
	logged := newStack(t, &gateway.Options{Store: rst})
	resp, _ = logged.do(t, "POST", "/v2/models/repeat_int32/generate_stream", []byte(repeatBody(200, 0, 0, 0)),
		http.Header{"Content-Type": {"application/json"}, "Streamgate-Resumable": {"true"}})
	trimmed := resp.Header.Get("Streamgate-Stream-Id")
	rc := redis.NewClient(&redis.Options{Addr: rd.Addr})
	err = rc.XTrimMaxLen(t.Context(), "sg:{"+trimmed+"}:log", 1).Err() // the store's key of the stream's log
	rc.Close()
	if resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("a stream to trim: %d %q %v", resp.StatusCode, trimmed, err)
	}
	expect(t, logged, "GET /v1/streams/{sid}", http.StatusGone, "GET", "/v1/streams/"+trimmed, nil, http.Header{"Last-Event-Id": {"1"}})

	shared := newStack(t, &gateway.Options{Store: rst, Keys: rst})
	sharedKey := addKey(t, rst, "shared", store.Limit{RPM: 1000})
	rd.Stop()
	for i, o := range errorOps {
		op, path := o.key(), o.at("", "resp_x", "sid_x")
		expect(t, keyed, op, http.StatusUnauthorized, o.method, path, o.bodyFor(""), nil)
		once := addKey(t, st, "rpm1-"+strconv.Itoa(i), store.Limit{RPM: 1})
		keyed.do(t, "GET", "/v1/models", nil, bearer(once))
		expect(t, keyed, op, http.StatusTooManyRequests, o.method, path, o.bodyFor(""), bearer(once))
		expect(t, shared, op, http.StatusServiceUnavailable, o.method, path, o.bodyFor(""), bearer(sharedKey))
	}
	for i, p := range []string{"/v2/models/echo/ready", "/v2/models/echo/versions/1/ready"} {
		op := "GET " + strings.Replace(strings.Replace(p, "echo", "{model}", 1), "/1/", "/{version}/", 1)
		expect(t, keyed, op, http.StatusUnauthorized, "GET", p, nil, nil)
		once := addKey(t, st, "rpm1-ready-"+strconv.Itoa(i), store.Limit{RPM: 1})
		keyed.do(t, "GET", "/v1/models", nil, bearer(once))
		expect(t, keyed, op, http.StatusTooManyRequests, "GET", p, nil, bearer(once))
	}
	// Redis back (empty: the key is gone): the store's connection pool
	// recovers and stops redialling.
	rd.Restart()
	waitFor(t, "the store to answer again", func() bool {
		resp, _ := shared.do(t, "GET", "/v1/models", nil, bearer(sharedKey))
		return resp.StatusCode == http.StatusUnauthorized
	})

	// Every listed status was produced.
	for op, sts := range sp.documentedErrors() {
		for _, st := range sts {
			if !produced[op][st] {
				t.Errorf("openapi.yaml lists %d for %s, but no case here produces it", st, op)
			}
		}
	}
}

// unknownModelStatus is what op answers for a model it does not know:
// Triton's statistics say 400, everything else 404.
func unknownModelStatus(o errorOp) int {
	if strings.HasSuffix(o.pattern, "/stats") {
		return http.StatusBadRequest
	}
	return http.StatusNotFound
}

// slowBodyStatus sends method path with a body that never arrives: 408
// once the body deadline has passed, checked against openapi.yaml.
func slowBodyStatus(t *testing.T, s *testStack, op, method, path string, produced map[string]map[int]bool) {
	t.Helper()
	conn := dialRaw(t, s)
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", method, path, s.addr)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Errorf("%s: slow body: %v", op, err)
		return
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	loadSpec(t).checkResponse(t, s.gw.Handler().(chi.Routes), method, path, resp, b)
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("%s: slow body: %d %s, want 408", op, resp.StatusCode, b)
		return
	}
	if produced[op] == nil {
		produced[op] = map[int]bool{}
	}
	produced[op][http.StatusRequestTimeout] = true
}

// jsonField is the string field name of the JSON object body ("" when
// absent).
func jsonField(t *testing.T, body, name string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("not a JSON object: %q", body)
	}
	v, _ := m[name].(string)
	return v
}
