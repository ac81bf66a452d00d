package e2e

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/gateway"
	"github.com/streamgate/streamgate/gateway/sse"
	"github.com/streamgate/streamgate/gateway/store/redistest"
)

// responseObject is the part of a Response object the tests check.
type responseObject struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	CreatedAt         int64  `json:"created_at"`
	Status            string `json:"status"`
	Model             string `json:"model"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Output []struct {
		Type    string `json:"type"`
		ID      string `json:"id"`
		Status  string `json:"status"`
		Role    string `json:"role"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
	Usage *struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
	Metadata map[string]string `json:"metadata"`
}

func (r responseObject) text() string {
	var b strings.Builder
	for _, o := range r.Output {
		for _, c := range o.Content {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// namedEvent is one event of a Responses stream.
type namedEvent struct {
	Name, ID string
	Data     map[string]any
	Raw      string
}

func namedEvents(t testing.TB, body string) []namedEvent {
	t.Helper()
	var out []namedEvent
	for _, ev := range sseEvents(t, body) {
		e := namedEvent{Name: ev.Name, ID: ev.ID, Raw: ev.Data}
		if err := json.Unmarshal([]byte(ev.Data), &e.Data); err != nil {
			t.Fatalf("event %q: %v", ev.Data, err)
		}
		out = append(out, e)
	}
	return out
}

// checkEventOrder checks a Responses stream: each event named by its
// type, sequence numbers 0, 1, 2..., the opening events, deltas, the
// closing events and exactly one terminal event, last.
func checkEventOrder(t *testing.T, evs []namedEvent, terminal string) (deltas []string) {
	t.Helper()
	var names []string
	for i, e := range evs {
		if e.Name != e.Data["type"] {
			t.Errorf("event %d named %q has type %v", i, e.Name, e.Data["type"])
		}
		if n, ok := e.Data["sequence_number"].(float64); !ok || int(n) != i {
			t.Errorf("event %d (%s) has sequence_number %v", i, e.Name, e.Data["sequence_number"])
		}
		if e.Name == "response.output_text.delta" {
			deltas = append(deltas, e.Data["delta"].(string))
			continue
		}
		names = append(names, e.Name)
	}
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.done", "response.content_part.done", "response.output_item.done", terminal}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("events (deltas left out):\n got %v\nwant %v", names, want)
	}
	if len(evs) > 0 && evs[len(evs)-1].Name != terminal {
		t.Errorf("last event %s, want %s", evs[len(evs)-1].Name, terminal)
	}
	return deltas
}

func TestResponsesNonStream(t *testing.T) {
	s := newStack(t, &gateway.Options{Now: fixedNow})
	resp, body := s.post(t, "/v1/responses", `{"model":"echo","input":"hello big world","metadata":{"k":"v"}}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	id := resp.Header.Get("X-Request-Id")
	if !strings.HasPrefix(id, "req-") {
		t.Errorf("x-request-id %q", id)
	}
	waitFor(t, "the request's log line to name its x-request-id", func() bool {
		return strings.Contains(s.logs.String(), "route=/v1/responses status=200") && strings.Contains(s.logs.String(), "request_id="+id)
	})
	if ms, err := strconv.Atoi(resp.Header.Get("Openai-Processing-Ms")); err != nil || ms < 0 {
		t.Errorf("openai-processing-ms %q", resp.Header.Get("Openai-Processing-Ms"))
	}
	var r responseObject
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.ID, "resp-") || r.Object != "response" || r.CreatedAt != 1700000000 || r.Status != "completed" ||
		r.Model != "echo" || len(r.Output) != 1 || r.Output[0].Type != "message" || r.Output[0].Role != "assistant" ||
		r.Output[0].Status != "completed" || r.text() != "user: hello big world assistant:" || r.Metadata["k"] != "v" ||
		r.Usage == nil || r.Usage.InputTokens != 5 || r.Usage.OutputTokens != 5 || r.Usage.TotalTokens != 10 {
		t.Fatalf("got %s", body)
	}

	// Instructions come first, as a system message; the output limit
	// makes the response incomplete.
	_, body = s.post(t, "/v1/responses", `{"model":"echo","instructions":"be brief","max_output_tokens":3,
		"input":[{"role":"user","content":[{"type":"input_text","text":"one two"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"three"}]}]}`)
	r = responseObject{}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	if r.Status != "incomplete" || r.IncompleteDetails == nil || r.IncompleteDetails.Reason != "max_output_tokens" ||
		r.text() != "system: be brief" || r.Output[0].Status != "incomplete" || r.Usage.OutputTokens != 3 {
		t.Fatalf("got %s", body)
	}
}

func TestResponsesStream(t *testing.T) {
	s := newStack(t, &gateway.Options{Now: fixedNow})
	resp, body := s.post(t, "/v1/responses", `{"model":"echo","input":"one two three","stream":true}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if resp.Header.Get("X-Request-Id") == "" || resp.Header.Get("Openai-Processing-Ms") != "" {
		t.Errorf("stream headers: x-request-id %q, openai-processing-ms %q", resp.Header.Get("X-Request-Id"), resp.Header.Get("Openai-Processing-Ms"))
	}
	if strings.Contains(body, "[DONE]") {
		t.Errorf("a Responses stream ends without [DONE]: %s", body)
	}
	evs := namedEvents(t, body)
	deltas := checkEventOrder(t, evs, "response.completed")
	want := "user: one two three assistant:"
	if strings.Join(deltas, "") != want {
		t.Errorf("deltas %q, want %q", deltas, want)
	}
	var final struct{ Response responseObject }
	if err := json.Unmarshal([]byte(evs[len(evs)-1].Raw), &final); err != nil {
		t.Fatal(err)
	}
	if r := final.Response; r.Status != "completed" || r.text() != want || r.Usage == nil || r.Usage.TotalTokens != 10 {
		t.Errorf("response.completed: %s", evs[len(evs)-1].Raw)
	}
	var created struct{ Response responseObject }
	if err := json.Unmarshal([]byte(evs[0].Raw), &created); err != nil {
		t.Fatal(err)
	}
	if created.Response.ID != final.Response.ID || created.Response.Status != "in_progress" || created.Response.Usage != nil {
		t.Errorf("response.created: %s", evs[0].Raw)
	}

	_, body = s.post(t, "/v1/responses", `{"model":"echo","input":"one two three","stream":true,"max_output_tokens":1}`)
	evs = namedEvents(t, body)
	if deltas := checkEventOrder(t, evs, "response.incomplete"); strings.Join(deltas, "") != "user:" {
		t.Errorf("incomplete deltas %q", deltas)
	}
}

// On the WebSocket a responses frame gets the same events as data frames,
// then the done frame.
func TestResponsesWebSocket(t *testing.T) {
	s := newStack(t, nil)
	c := s.dialWS(t)
	defer c.Close(websocket.StatusNormalClosure, "")
	frames := wsAsk(t, c, `{"type":"responses","id":"r1","body":{"model":"echo","input":"a b"}}`)
	var evs []namedEvent
	for _, f := range frames[:len(frames)-1] {
		var d struct {
			Data map[string]any `json:"data"`
		}
		if err := json.Unmarshal([]byte(f), &d); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, namedEvent{Name: d.Data["type"].(string), Data: d.Data})
	}
	if deltas := checkEventOrder(t, evs, "response.completed"); strings.Join(deltas, "") != "user: a b assistant:" {
		t.Errorf("deltas %q", deltas)
	}
	if last := frames[len(frames)-1]; last != `{"type":"done","id":"r1","reason":"final"}` {
		t.Errorf("last frame %s", last)
	}
}

// What a text model cannot honour is refused naming the field, in
// OpenAI's shape; so are unknown routes and wrong methods under /v1.
func TestResponsesErrors(t *testing.T) {
	s := newStack(t, nil)
	for _, tc := range []struct {
		body, param, code string
	}{
		{`{"model":"echo","input":"x","tools":[{"type":"web_search"}]}`, "tools[0].type", "unsupported_parameter"},
		{`{"model":"echo","input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":"required"}`, "tool_choice", "unsupported_value"},
		{`{"model":"echo","input":"x","text":{"format":{"type":"json_schema","name":"x","schema":{}}}}`, "text.format", "unsupported_value"},
		{`{"model":"echo","input":"x","text":{"format":{"type":"json_object"}}}`, "text.format", "unsupported_value"},
		{`{"model":"echo","input":"x","reasoning":{"effort":"high"}}`, "reasoning", "unsupported_parameter"},
		{`{"model":"echo","input":[{"role":"user","content":[{"type":"input_image","image_url":"http://x"}]}]}`, "input[0].content[0].type", "unsupported_parameter"},
		{`{"model":"echo","input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]}`, "input[0].content[0].type", "unsupported_parameter"},
		{`{"model":"echo","input":[{"type":"item_reference","id":"x"}]}`, "input[0].id", "not_found"},
		{`{"model":"echo","input":[{"role":"user","content":"x"},{"type":"item_reference","id":"msg-0123"}]}`, "input[1].id", "not_found"},
		{`{"model":"echo","input":[{"type":"input_file","file_id":"f"}]}`, "input[0].type", "unsupported_parameter"},
		{`{"model":"echo","input":[{"type":"function_call_output","output":"x"}]}`, "input[0].call_id", "missing_required_parameter"},
		{`{"model":"echo","input":"x","background":true,"store":false}`, "background", "invalid_value"},
		{`{"model":"echo"}`, "input", "missing_required_parameter"},
		{`{"model":"nope","input":"x"}`, "model", "model_not_found"},
		{`{"model":"echo","input":"x","max_output_tokens":0}`, "max_output_tokens", "invalid_value"},
		{`{"model":"echo","input":"x","frobnicate":1}`, "frobnicate", "unknown_parameter"},
	} {
		resp, body := s.post(t, "/v1/responses", tc.body)
		var e struct {
			Error struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Param   *string `json:"param"`
				Code    *string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || resp.Header.Get("X-Request-Id") == "" ||
			e.Error.Param == nil || *e.Error.Param != tc.param || e.Error.Code == nil || *e.Error.Code != tc.code ||
			!strings.Contains(e.Error.Message, strings.Split(tc.param, "[")[0]) {
			t.Errorf("%s: %d %s, want param %s code %s", tc.body, resp.StatusCode, body, tc.param, tc.code)
		}
	}

	for _, tc := range []struct {
		method, path string
		status       int
		want         string
	}{
		{http.MethodPost, "/v1/nope", 404, `{"error":{"message":"no route for POST /v1/nope","type":"invalid_request_error","param":null,"code":"not_found"}}`},
		{http.MethodGet, "/v1/responses", 405, `{"error":{"message":"method GET is not allowed on /v1/responses (allowed: POST)","type":"invalid_request_error","param":null,"code":"method_not_allowed"}}`},
	} {
		resp, body := s.do(t, tc.method, tc.path, nil, nil)
		if resp.StatusCode != tc.status || string(body) != tc.want || resp.Header.Get("X-Request-Id") == "" {
			t.Errorf("%s %s: %d %s (x-request-id %q), want %d %s", tc.method, tc.path, resp.StatusCode, body,
				resp.Header.Get("X-Request-Id"), tc.status, tc.want)
		}
	}
}

// getResponse reads stored response id.
func (s *testStack) getResponse(t *testing.T, id string) (int, responseObject) {
	t.Helper()
	resp, body := s.do(t, http.MethodGet, "/v1/responses/"+id, nil, nil)
	var r responseObject
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, r
}

func (s *testStack) createResponse(t *testing.T, body string) responseObject {
	t.Helper()
	resp, b := s.post(t, "/v1/responses", body)
	var r responseObject
	if resp.StatusCode != 200 || json.Unmarshal([]byte(b), &r) != nil {
		t.Fatalf("POST /v1/responses %s: %d %s", body, resp.StatusCode, b)
	}
	return r
}

// A stored response is read back, lists its input, is continued with
// previous_response_id and deleted; store false keeps nothing.
func TestResponsesStored(t *testing.T) {
	s := newStack(t, nil)
	first := s.createResponse(t, `{"model":"echo","input":"one two"}`)
	st, got := s.getResponse(t, first.ID)
	if st != 200 || got.ID != first.ID || got.Status != "completed" || got.text() != first.text() || got.Usage.TotalTokens != first.Usage.TotalTokens {
		t.Fatalf("GET: %d %+v, want %+v", st, got, first)
	}
	resp, body := s.do(t, http.MethodGet, "/v1/responses/"+first.ID+"/input_items", nil, nil)
	var items struct {
		Data []struct {
			Role    string
			Content []struct{ Type, Text string }
		}
	}
	if resp.StatusCode != 200 || json.Unmarshal(body, &items) != nil || len(items.Data) != 1 || items.Data[0].Role != "user" ||
		items.Data[0].Content[0].Type != "input_text" || items.Data[0].Content[0].Text != "one two" {
		t.Fatalf("input_items: %d %s", resp.StatusCode, body)
	}

	// The conversation goes on: the first input and answer come before
	// the new input; instructions are the new request's only.
	next := s.createResponse(t, `{"model":"echo","input":"three","instructions":"x","previous_response_id":"`+first.ID+`"}`)
	if want := "system: x user: one two assistant: user: one two assistant: user: three assistant:"; next.text() != want {
		t.Errorf("continued: %q, want %q", next.text(), want)
	}
	resp, sbody := s.post(t, "/v1/responses", `{"model":"echo","input":"x","previous_response_id":"resp-nope"}`)
	if resp.StatusCode != 404 || sbody != `{"error":{"message":"Previous response with id 'resp-nope' not found.","type":"invalid_request_error","param":"previous_response_id","code":"response_not_found"}}` {
		t.Errorf("unknown previous: %d %s", resp.StatusCode, sbody)
	}

	resp, sbody = s.post(t, "/v1/responses/"+first.ID+"/cancel", "")
	if resp.StatusCode != 400 || !strings.Contains(sbody, "background") {
		t.Errorf("cancel of a foreground response: %d %s", resp.StatusCode, sbody)
	}
	resp, body = s.do(t, http.MethodDelete, "/v1/responses/"+first.ID, nil, nil)
	if resp.StatusCode != 200 || string(body) != `{"id":"`+first.ID+`","object":"response","deleted":true}` {
		t.Errorf("DELETE: %d %s", resp.StatusCode, body)
	}
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		resp, body = s.do(t, m, "/v1/responses/"+first.ID, nil, nil)
		if resp.StatusCode != 404 || string(body) != `{"error":{"message":"Response with id '`+first.ID+`' not found.","type":"invalid_request_error","param":null,"code":"response_not_found"}}` {
			t.Errorf("%s after delete: %d %s", m, resp.StatusCode, body)
		}
	}
	unstored := s.createResponse(t, `{"model":"echo","input":"x","store":false}`)
	if st, _ := s.getResponse(t, unstored.ID); st != 404 {
		t.Errorf("store false: GET %d", st)
	}
}

// A background response answers queued at once and runs to its end; one
// whose streaming client leaves runs on to the same text; a cancel stops
// it upstream and stores it cancelled.
func TestResponsesBackground(t *testing.T) {
	s := newStack(t, nil)
	q := s.createResponse(t, `{"model":"echo","input":"one two three","background":true}`)
	if q.Status != "queued" || q.Output == nil || len(q.Output) != 0 {
		t.Fatalf("background answer: %+v", q)
	}
	var done responseObject
	waitFor(t, "the background response to complete", func() bool {
		_, done = s.getResponse(t, q.ID)
		return done.Status == "completed"
	})
	if done.text() != "user: one two three assistant:" {
		t.Errorf("background text %q", done.text())
	}
	// Answered at once, it still logged its events.
	_, body := s.do(t, http.MethodGet, "/v1/responses/"+q.ID+"?stream=true", nil, nil)
	evs := namedEvents(t, string(body))
	if deltas := checkEventOrder(t, evs, "response.completed"); strings.Join(deltas, "") != done.text() {
		t.Errorf("logged deltas %q", deltas)
	}
	var created struct{ Response responseObject }
	if err := json.Unmarshal([]byte(evs[0].Raw), &created); err != nil || created.Response.Status != "queued" {
		t.Errorf("response.created of a background response: %s", evs[0].Raw)
	}

	// A streaming client that leaves after five deltas: the response
	// runs on to the text an uninterrupted run gives.
	input := words(40)
	first := s.createResponse(t, `{"model":"echo_slow","input":"`+input+`"}`)
	whole := first.text()
	c := httpClient(t)
	resp := post(t, t.Context(), c, s.url+"/v1/responses", `{"model":"echo_slow","input":"`+input+`","background":true,"stream":true}`)
	id, seen, last := readDeltas(t, resp, 5)
	resp.Body.Close()

	// Its stream read again after the last event seen: the events that
	// follow, numbered on, to the end; the text joins up.
	resp, body = s.do(t, http.MethodGet, "/v1/responses/"+id+"?stream=true&starting_after="+strconv.Itoa(last), nil, nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("GET ?stream=true: %d %s", resp.StatusCode, body)
	}
	evs = namedEvents(t, string(body))
	text := seen
	for i, e := range evs {
		if n := int(e.Data["sequence_number"].(float64)); n != last+1+i || e.Name != e.Data["type"] {
			t.Errorf("event %d after %d: %s with sequence_number %d", i, last, e.Name, n)
		}
		if e.Name == "response.output_text.delta" {
			text += e.Data["delta"].(string)
		}
	}
	if len(evs) == 0 || evs[len(evs)-1].Name != "response.completed" || text != whole {
		t.Errorf("resumed: %q ending %v, want %q", text, evs, whole)
	}
	_, done = s.getResponse(t, id)
	if done.Status != "completed" || done.text() != whole {
		t.Errorf("left background response: %s %q, want %q", done.Status, done.text(), whole)
	}
	// From the start; and what is not a background response's stream.
	_, body = s.do(t, http.MethodGet, "/v1/responses/"+id+"?stream=true", nil, nil)
	if evs := namedEvents(t, string(body)); len(evs) == 0 || evs[0].Name != "response.created" || evs[len(evs)-1].Name != "response.completed" {
		t.Errorf("read from the start: %s", body)
	}
	for _, q := range []string{"/v1/responses/" + first.ID + "?stream=true", "/v1/responses/" + id + "?stream=yes",
		"/v1/responses/" + id + "?starting_after=3", "/v1/responses/" + id + "?stream=true&starting_after=-1"} {
		if resp, body := s.do(t, http.MethodGet, q, nil, nil); resp.StatusCode != 400 && resp.StatusCode != 404 {
			t.Errorf("GET %s: %d %s", q, resp.StatusCode, body)
		}
	}

	// Cancel: 10000 words at 20ms each only end by cancellation.
	long := s.createResponse(t, `{"model":"echo_slow","input":"`+words(10000)+`","background":true}`)
	waitFor(t, "the long response to run", func() bool { return s.eng.InFlight() == 1 })
	resp2, cbody := s.post(t, "/v1/responses/"+long.ID+"/cancel", "")
	var cancelled responseObject
	if resp2.StatusCode != 200 || json.Unmarshal([]byte(cbody), &cancelled) != nil || cancelled.Status != "cancelled" {
		t.Fatalf("cancel: %d %s", resp2.StatusCode, cbody)
	}
	waitFor(t, "the cancelled request to stop in the engine", func() bool { return s.eng.InFlight() == 0 })
	if st, got := s.getResponse(t, long.ID); st != 200 || got.Status != "cancelled" {
		t.Errorf("after cancel: %d %+v", st, got)
	}

	// Deleting a running response stops it, and its end does not bring
	// it back.
	long = s.createResponse(t, `{"model":"echo_slow","input":"`+words(10000)+`","background":true}`)
	waitFor(t, "the long response to run", func() bool { return s.eng.InFlight() == 1 })
	if resp, body := s.do(t, http.MethodDelete, "/v1/responses/"+long.ID, nil, nil); resp.StatusCode != 200 {
		t.Fatalf("DELETE of a running response: %d %s", resp.StatusCode, body)
	}
	waitFor(t, "the deleted request to stop in the engine", func() bool { return s.eng.InFlight() == 0 })
	if st, _ := s.getResponse(t, long.ID); st != 404 {
		t.Errorf("GET after DELETE of a running response: %d", st)
	}
}

// Two gateway replicas sharing a real Redis: a response stored by one is
// read, continued, resumed, cancelled and deleted through the other.
func TestResponsesAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	// Open gateways (API keys are TestOpenAINodeSDKReplicas' part).
	shared := func(c *stack.Config) { c.Redis, c.NoKeys = srv.URL(), true }
	a := newStack(t, nil, shared)
	b := newStack(t, nil, shared)
	first := a.createResponse(t, `{"model":"echo","input":"one two"}`)
	if st, got := b.getResponse(t, first.ID); st != 200 || got.Status != "completed" || got.text() != first.text() {
		t.Fatalf("GET on the other replica: %d %+v", st, got)
	}
	next := b.createResponse(t, `{"model":"echo","input":"three","previous_response_id":"`+first.ID+`"}`)
	if want := "user: one two assistant: user: one two assistant: user: three assistant:"; next.text() != want {
		t.Errorf("continued on the other replica: %q, want %q", next.text(), want)
	}
	bg := b.createResponse(t, `{"model":"echo","input":"four five","background":true}`)
	var done responseObject
	waitFor(t, "the background response to complete", func() bool {
		_, done = a.getResponse(t, bg.ID)
		return done.Status == "completed"
	})
	if done.text() != "user: four five assistant:" {
		t.Errorf("background response read on the other replica: %q", done.text())
	}
	// A background stream cut on one replica is read on to its end on
	// the other; a background response running on one is cancelled
	// through the other, and stops in its engine.
	input := words(40)
	whole := a.createResponse(t, `{"model":"echo_slow","input":"`+input+`","store":false}`).text()
	resp := post(t, t.Context(), httpClient(t), a.url+"/v1/responses", `{"model":"echo_slow","input":"`+input+`","background":true,"stream":true}`)
	id, text, last := readDeltas(t, resp, 5)
	resp.Body.Close()
	_, body := b.do(t, http.MethodGet, "/v1/responses/"+id+"?stream=true&starting_after="+strconv.Itoa(last), nil, nil)
	for _, e := range namedEvents(t, string(body)) {
		if e.Name == "response.output_text.delta" {
			text += e.Data["delta"].(string)
		}
	}
	if text != whole {
		t.Errorf("resumed on the other replica: %q, want %q", text, whole)
	}
	long := a.createResponse(t, `{"model":"echo_slow","input":"`+words(10000)+`","background":true}`)
	waitFor(t, "the long response to run", func() bool { return a.eng.InFlight() == 1 })
	resp2, cbody := b.post(t, "/v1/responses/"+long.ID+"/cancel", "")
	var cancelled responseObject
	if resp2.StatusCode != 200 || json.Unmarshal([]byte(cbody), &cancelled) != nil || cancelled.Status != "cancelled" {
		t.Fatalf("cancel on the other replica: %d %s", resp2.StatusCode, cbody)
	}
	waitFor(t, "the cancelled request to stop in its engine", func() bool { return a.eng.InFlight() == 0 })

	if resp, body := b.do(t, http.MethodDelete, "/v1/responses/"+first.ID, nil, nil); resp.StatusCode != 200 {
		t.Fatalf("DELETE on the other replica: %d %s", resp.StatusCode, body)
	}
	if st, _ := a.getResponse(t, first.ID); st != 404 {
		t.Errorf("GET after DELETE on the other replica: %d", st)
	}
}

// readDeltas reads a Responses stream until n deltas have come: the
// response's id, their text and the sequence_number of the last event
// read.
func readDeltas(t *testing.T, resp *http.Response, n int) (id, text string, last int) {
	t.Helper()
	r := sse.NewReader(resp.Body)
	for deltas := 0; deltas < n; {
		ev, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Type           string
			SequenceNumber int `json:"sequence_number"`
			Delta          string
			Response       responseObject
		}
		if ev.IsComment || json.Unmarshal([]byte(ev.Data), &e) != nil {
			continue
		}
		last = e.SequenceNumber
		switch e.Type {
		case "response.created":
			id = e.Response.ID
		case "response.output_text.delta":
			deltas++
			text += e.Delta
		}
	}
	return id, text, last
}
