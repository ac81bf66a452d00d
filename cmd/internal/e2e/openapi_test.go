package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/streamgate/streamgate/gateway/sse"
	"go.yaml.in/yaml/v3"
)

// spec is openapi.yaml, loaded once, with its schemas compiled on demand.
type spec struct {
	doc map[string]any

	mu       sync.Mutex
	compiler *jsonschema.Compiler
	schemas  map[string]*jsonschema.Schema
}

const specURL = "file:///openapi.json"

var (
	specOnce sync.Once
	theSpec  *spec
	specErr  error
)

func loadSpec(t testing.TB) *spec {
	t.Helper()
	specOnce.Do(func() {
		raw, err := os.ReadFile(filepath.Join(moduleRoot(t), "openapi.yaml"))
		if err != nil {
			specErr = err
			return
		}
		var y any
		if err := yaml.Unmarshal(raw, &y); err != nil {
			specErr = err
			return
		}
		// Round-trip through JSON: plain maps and json.Number, as the
		// schema compiler wants.
		j, err := json.Marshal(y)
		if err != nil {
			specErr = err
			return
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
		if err != nil {
			specErr = err
			return
		}
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		if err := c.AddResource(specURL, doc); err != nil {
			specErr = err
			return
		}
		theSpec = &spec{doc: doc.(map[string]any), compiler: c, schemas: map[string]*jsonschema.Schema{}}
	})
	if specErr != nil {
		t.Fatalf("openapi.yaml: %v", specErr)
	}
	return theSpec
}

// pointer escapes JSON pointer tokens into a URL fragment.
func pointer(tokens ...string) string {
	var b strings.Builder
	for _, tok := range tokens {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
		b.WriteString("/" + url.PathEscape(tok))
	}
	return b.String()
}

// lookup follows a JSON pointer (unescaped tokens) through the document.
func (s *spec) lookup(tokens ...string) any {
	var v any = s.doc
	for _, tok := range tokens {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[tok]
	}
	return v
}

// resolve follows a local $ref, returning the target and its tokens.
func (s *spec) resolve(v any, tokens []string) (map[string]any, []string) {
	for range 8 {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, nil
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return m, tokens
		}
		tokens = nil
		for _, tok := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			tokens = append(tokens, strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~"))
		}
		v = s.lookup(tokens...)
	}
	return nil, nil
}

func (s *spec) schema(t testing.TB, tokens ...string) *jsonschema.Schema {
	t.Helper()
	loc := specURL + "#" + pointer(tokens...)
	s.mu.Lock()
	defer s.mu.Unlock()
	if sch, ok := s.schemas[loc]; ok {
		return sch
	}
	sch, err := s.compiler.Compile(loc)
	if err != nil {
		t.Fatalf("compile %s: %v", loc, err)
	}
	s.schemas[loc] = sch
	return sch
}

// operation finds the path item and operation of method and route pattern.
func (s *spec) operation(pattern, method string) (map[string]any, []string) {
	paths, _ := s.doc["paths"].(map[string]any)
	item, tokens := s.resolve(paths[pattern], []string{"paths", pattern})
	if item == nil {
		return nil, nil
	}
	m := strings.ToLower(method)
	op, _ := item[m].(map[string]any)
	if op == nil {
		return nil, nil
	}
	return op, append(tokens, m)
}

func (s *spec) validate(t testing.TB, sch *jsonschema.Schema, what string, data []byte) {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Errorf("%s: not JSON: %q", what, data)
		return
	}
	if err := sch.Validate(inst); err != nil {
		t.Errorf("%s does not match openapi.yaml: %s\n%v", what, data, err)
	}
}

// checkResponse validates a complete response against the operation the
// router matched for it. Responses of no route (404, 405) are skipped.
func (s *spec) checkResponse(t testing.TB, router chi.Routes, method, path string, resp *http.Response, body []byte) {
	t.Helper()
	rctx := chi.NewRouteContext()
	if !router.Match(rctx, method, path) {
		return
	}
	pattern := rctx.RoutePattern()
	op, tokens := s.operation(pattern, method)
	if op == nil {
		t.Errorf("%s %s (route %s) is not in openapi.yaml", method, path, pattern)
		return
	}
	what := fmt.Sprintf("%s %s -> %d", method, path, resp.StatusCode)
	responses, _ := op["responses"].(map[string]any)
	key := strconv.Itoa(resp.StatusCode)
	r := responses[key]
	if r == nil {
		// Every error status the server gives is listed, but 500 (a
		// failure nobody planned): the document names the errors a client
		// must handle.
		if resp.StatusCode >= 400 && resp.StatusCode != http.StatusInternalServerError {
			t.Errorf("%s: openapi.yaml does not list this error status for %s %s", what, method, pattern)
			return
		}
		key, r = "default", responses["default"]
	}
	rm, rtokens := s.resolve(r, append(append([]string{}, tokens...), "responses", key))
	if rm == nil {
		t.Errorf("%s: status not described in openapi.yaml", what)
		return
	}
	content, _ := rm["content"].(map[string]any)
	if len(content) == 0 {
		if len(body) != 0 {
			t.Errorf("%s: body %q but openapi.yaml describes none", what, body)
		}
		return
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	media, _ := content[mt].(map[string]any)
	if media == nil {
		t.Errorf("%s: Content-Type %q not described in openapi.yaml", what, mt)
		return
	}
	mtokens := append(append([]string{}, rtokens...), "content", mt)
	switch {
	case mt == "application/json":
		s.validate(t, s.schema(t, append(mtokens, "schema")...), what, body)
	case media["x-inference-header"] != nil:
		n, err := strconv.Atoi(resp.Header.Get("Inference-Header-Content-Length"))
		if err != nil || n < 0 || n > len(body) {
			t.Errorf("%s: Inference-Header-Content-Length %q does not fit a %d-byte body", what, resp.Header.Get("Inference-Header-Content-Length"), len(body))
			return
		}
		s.validate(t, s.schema(t, append(mtokens, "x-inference-header")...), what+" inference header", body[:n])
	case mt == "text/event-stream":
		sch := s.schema(t, append(mtokens, "schema")...)
		r := sse.NewReader(bytes.NewReader(body))
		for {
			ev, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Errorf("%s: bad event stream: %v", what, err)
				return
			}
			if ev.IsComment {
				continue
			}
			data := []byte(ev.Data)
			if ev.Data == "[DONE]" {
				data = []byte(`"[DONE]"`)
			}
			s.validate(t, sch, what+" event "+ev.ID, data)
		}
	}
}

// checkWSFrame validates one server frame of /v1/ws.
func (s *spec) checkWSFrame(t testing.TB, frame []byte) {
	t.Helper()
	s.validate(t, s.schema(t, "paths", "/v1/ws", "get", "x-websocket", "serverFrames"), "WebSocket frame", frame)
}

// checkWSClientFrame validates one client frame the tests send.
func (s *spec) checkWSClientFrame(t testing.TB, frame []byte) {
	t.Helper()
	s.validate(t, s.schema(t, "paths", "/v1/ws", "get", "x-websocket", "clientFrames"), "WebSocket client frame", frame)
}

// Every router route is in openapi.yaml and every documented operation is
// routed.
func TestOpenAPIMatchesRouter(t *testing.T) {
	sp := loadSpec(t)
	s := newStack(t, nil)
	routed := map[string]bool{}
	err := chi.Walk(s.gw.Handler().(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routed[method+" "+route] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for path := range sp.doc["paths"].(map[string]any) {
		item, _ := sp.resolve(sp.doc["paths"].(map[string]any)[path], nil)
		for _, m := range []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"} {
			if item[m] != nil {
				documented[strings.ToUpper(m)+" "+path] = true
			}
		}
	}
	var missing, extra []string
	for r := range routed {
		if !documented[r] {
			missing = append(missing, r)
		}
	}
	for d := range documented {
		if !routed[d] {
			extra = append(extra, d)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("routes missing from openapi.yaml: %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("openapi.yaml operations with no route: %v", extra)
	}
	if len(routed) < 19 {
		t.Errorf("only %d routes walked", len(routed))
	}
}

// The spec's own examples and the frames and bodies the tests send are
// valid under its request schemas.
func TestOpenAPIRequestSchemas(t *testing.T) {
	sp := loadSpec(t)
	for _, tc := range []struct {
		schema string
		body   string
	}{
		{"ChatCompletionRequest", `{"model":"echo","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":2,"stop":["a"]}`},
		{"CompletionRequest", `{"model":"echo","prompt":["x"],"echo":true,"max_tokens":1,"n":1}`},
		{"GenerateRequest", `{"id":"a","IN":[1,2],"WAIT":0,"parameters":{"delay_ms":5}}`},
		{"InferRequest", `{"id":"1","inputs":[{"name":"INPUT0","shape":[3],"datatype":"INT32","parameters":{"binary_data_size":12}}],"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}}]}`},
		{"InferRequest", `{"inputs":[{"name":"X","shape":[2,2],"datatype":"FP32","data":[[1,2],[3,4.5]]}],"parameters":{"sequence_id":"s","priority":1,"binary_data_output":true}}`},
		{"RepositoryIndexRequest", `{"ready":false}`},
		{"WsClientFrame", `{"type":"cancel","id":"a1"}`},
	} {
		sp.validate(t, sp.schema(t, "components", "schemas", tc.schema), tc.schema, []byte(tc.body))
	}
	schemas := sp.doc["components"].(map[string]any)["schemas"].(map[string]any)
	for name, v := range schemas {
		examples, _ := v.(map[string]any)["examples"].([]any)
		for i, ex := range examples {
			b, _ := json.Marshal(ex)
			sp.validate(t, sp.schema(t, "components", "schemas", name), fmt.Sprintf("%s example %d", name, i), b)
		}
	}
	sch := sp.schema(t, "components", "schemas", "ChatCompletionRequest")
	inst, _ := jsonschema.UnmarshalJSON(strings.NewReader(`{"model":"echo","messages":[{"role":"user","content":"x"}],"n":2}`))
	if sch.Validate(inst) == nil {
		t.Error("n=2 validates against ChatCompletionRequest")
	}
}
