package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/streamgate/streamgate/gateway"
)

func TestChatCompletionsNonStream(t *testing.T) {
	s := newStack(t, &gateway.Options{Now: fixedNow})
	resp, body := s.post(t, "/v1/chat/completions", `{"model":"echo","messages":[{"role":"user","content":"hello big world"}]}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var got struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		Choices []struct {
			Message      struct{ Role, Content string }
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
			TotalTokens      int `json:"total_tokens"`
		}
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got.ID, "chatcmpl-") || got.Object != "chat.completion" || got.Created != 1700000000 ||
		len(got.Choices) != 1 || got.Choices[0].Message.Role != "assistant" ||
		got.Choices[0].Message.Content != "user: hello big world assistant:" || got.Choices[0].FinishReason != "stop" ||
		got.Usage.PromptTokens != 5 || got.Usage.CompletionTokens != 5 || got.Usage.TotalTokens != 10 {
		t.Fatalf("got %s", body)
	}
}

func TestChatCompletionsStreamExactChunks(t *testing.T) {
	s := newStack(t, &gateway.Options{Now: fixedNow, ChatTemplates: map[string]string{"echo": "{{range .Messages}}{{.Content}}{{end}}"}})
	resp, body := s.post(t, "/v1/chat/completions", `{"model":"echo","messages":[{"role":"user","content":"a b c"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":2}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	evs := events(t, body)
	var id string
	if len(evs) > 0 {
		var c struct{ ID string }
		json.Unmarshal([]byte(evs[0]), &c)
		id = c.ID
	}
	head := `{"id":"` + id + `","object":"chat.completion.chunk","created":1700000000,"model":"echo","choices":`
	want := []string{
		head + `[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}`,
		head + `[{"index":0,"delta":{"content":"a"},"logprobs":null,"finish_reason":null}],"usage":null}`,
		head + `[{"index":0,"delta":{"content":" b"},"logprobs":null,"finish_reason":null}],"usage":null}`,
		head + `[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}],"usage":null}`,
		head + `[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`,
		`[DONE]`,
	}
	if strings.Join(evs, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(evs, "\n"), strings.Join(want, "\n"))
	}
}

func TestCompletions(t *testing.T) {
	s := newStack(t, &gateway.Options{Now: fixedNow})
	resp, body := s.post(t, "/v1/completions", `{"model":"echo","prompt":"one two three"}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"object":"text_completion"`) || !strings.Contains(body, `"text":"one two three","logprobs":null,"finish_reason":"stop"`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	resp, body = s.post(t, "/v1/completions", `{"model":"echo","prompt":"one two three","max_tokens":1,"stream":true,"echo":true}`)
	var texts []string
	for _, ev := range events(t, body) {
		if ev == "[DONE]" {
			texts = append(texts, ev)
			continue
		}
		var c struct {
			Choices []struct {
				Text         string
				FinishReason *string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		fr := "null"
		if c.Choices[0].FinishReason != nil {
			fr = *c.Choices[0].FinishReason
		}
		texts = append(texts, fmt.Sprintf("%q/%s", c.Choices[0].Text, fr))
	}
	want := `"one two three"/null "one"/null ""/length [DONE]`
	if resp.StatusCode != 200 || strings.Join(texts, " ") != want {
		t.Fatalf("%d %s, want %s", resp.StatusCode, strings.Join(texts, " "), want)
	}
}

func TestOpenAIErrors(t *testing.T) {
	s := newStack(t, nil)
	cases := []struct {
		path, body string
		status     int
		want       string
	}{
		{"/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, 404,
			`{"error":{"message":"The model 'nope' does not exist","type":"invalid_request_error","param":"model","code":"model_not_found"}}`},
		{"/v1/chat/completions", `{"model":"echo","messages":[{"role":"user","content":"x"}],"n":3}`, 400,
			`{"error":{"message":"Unsupported parameter: 'n' must be 1: this server returns one choice per request.","type":"invalid_request_error","param":"n","code":"unsupported_parameter"}}`},
		{"/v1/chat/completions", `{"model":"echo","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"}`, 400,
			`{"error":{"message":"Unsupported value: 'tool_choice' required needs constrained decoding, which model 'echo' does not offer on this server (its config has no parameter guided_decoding listing json); use 'auto' or 'none'.","type":"invalid_request_error","param":"tool_choice","code":"unsupported_value"}}`},
		{"/v1/completions", `{"model":"echo","prompt":"x","logit_bias":{"5":1}}`, 400,
			`{"error":{"message":"Unsupported parameter: 'logit_bias' is not supported by this server.","type":"invalid_request_error","param":"logit_bias","code":"unsupported_parameter"}}`},
		{"/v1/completions", `{"model":"repeat_int32","prompt":"x"}`, 400,
			`{"error":{"message":"model 'repeat_int32' is not a text model: it needs input text_input and output text_output","type":"invalid_request_error","param":"model","code":"model_not_supported"}}`},
		{"/v1/completions", `{"model":"echo","prompt":"x",}`, 400,
			`{"error":{"message":"We could not parse the JSON body of your request: invalid character '}' looking for beginning of object key string at line 1, column 30 (offset 29).","type":"invalid_request_error","param":null,"code":"invalid_json"}}`},
	}
	for _, tc := range cases {
		resp, body := s.post(t, tc.path, tc.body)
		if resp.StatusCode != tc.status || body != tc.want {
			t.Errorf("POST %s %s\n got %d %s\nwant %d %s", tc.path, tc.body, resp.StatusCode, body, tc.status, tc.want)
		}
	}
}

func TestModels(t *testing.T) {
	s := newStack(t, nil)
	resp, body := s.get(t, "/v1/models")
	if resp.StatusCode != 200 || body != `{"object":"list","data":[{"id":"echo","object":"model","created":0,"owned_by":"streamgate"},{"id":"echo_slow","object":"model","created":0,"owned_by":"streamgate"}]}` {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	resp, body = s.get(t, "/v1/models/echo")
	if resp.StatusCode != 200 || body != `{"id":"echo","object":"model","created":0,"owned_by":"streamgate"}` {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	resp, body = s.get(t, "/v1/models/nope")
	if resp.StatusCode != 404 || !strings.Contains(body, `"code":"model_not_found"`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

// A model the deployment knows but upstream has not loaded gets its hint,
// in each route's error shape, instead of "does not exist".
func TestUnloadedModels(t *testing.T) {
	s := newStack(t, &gateway.Options{UnloadedModels: map[string]string{
		"stories260k": "get its weights with 'streamgate models pull stories260K'",
		"echo":        "never shown: echo is loaded",
	}})
	msg := `The model 'stories260k' is known but not loaded: get its weights with 'streamgate models pull stories260K'`
	openAI := `{"error":{"message":"` + msg + `","type":"invalid_request_error","param":"model","code":"model_not_loaded"}}`
	triton := `{"error":"` + msg + `"}`
	for _, tc := range []struct {
		method, path, body, want string
	}{
		{"POST", "/v1/chat/completions", `{"model":"stories260k","messages":[{"role":"user","content":"x"}]}`, openAI},
		{"POST", "/v1/completions", `{"model":"stories260k","prompt":"x","stream":true}`, openAI},
		{"GET", "/v1/models/stories260k", "", openAI},
		{"POST", "/v2/models/stories260k/generate_stream", `{"text_input":"x"}`, triton},
		{"POST", "/v2/models/stories260k/generate", `{"text_input":"x"}`, triton},
		{"GET", "/v2/models/stories260k", "", triton},
		{"POST", "/v1/completions", `{"model":"nope","prompt":"x"}`,
			`{"error":{"message":"The model 'nope' does not exist","type":"invalid_request_error","param":"model","code":"model_not_found"}}`},
	} {
		var resp *http.Response
		var body string
		if tc.method == "GET" {
			resp, body = s.get(t, tc.path)
		} else {
			resp, body = s.post(t, tc.path, tc.body)
		}
		if resp.StatusCode != 404 || body != tc.want {
			t.Errorf("%s %s %s\n got %d %s\nwant 404 %s", tc.method, tc.path, tc.body, resp.StatusCode, body, tc.want)
		}
	}
	if resp, body := s.post(t, "/v1/completions", `{"model":"echo","prompt":"x"}`); resp.StatusCode != 200 {
		t.Errorf("a loaded model with a hint: %d %s", resp.StatusCode, body)
	}

	c := s.dialWS(t)
	wsSend(t, c, `{"type":"completions","id":"u1","body":{"model":"stories260k","prompt":"x"}}`)
	if _, raw, err := wsRead(t, c); err != nil || string(raw) != `{"type":"error","id":"u1","error":{"code":"model_not_loaded","message":"`+msg+`"}}` {
		t.Errorf("WebSocket: %s %v", raw, err)
	}
	c.Close(websocket.StatusNormalClosure, "")
}

// Model names are matched without regard to case on the OpenAI routes, as
// OpenAI's clients expect of a gateway; a name that is near no model's
// gets the nearest model's name in each route's error shape.
func TestModelNamesAnyCase(t *testing.T) {
	s := newStack(t, &gateway.Options{UnloadedModels: map[string]string{"stories260k": "get its weights"}})
	resp, body := s.post(t, "/v1/chat/completions", `{"model":"ECHO","messages":[{"role":"user","content":"a b"}]}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"model":"echo"`) {
		t.Errorf("ECHO: %d %s", resp.StatusCode, body)
	}
	resp, body = s.get(t, "/v1/models/Echo")
	if resp.StatusCode != 200 || body != `{"id":"echo","object":"model","created":0,"owned_by":"streamgate"}` {
		t.Errorf("GET /v1/models/Echo: %d %s", resp.StatusCode, body)
	}
	for _, tc := range []struct {
		method, path, body, want string
	}{
		{"POST", "/v1/chat/completions", `{"model":"ehco","messages":[{"role":"user","content":"x"}]}`,
			`{"error":{"message":"The model 'ehco' does not exist; did you mean 'echo'?","type":"invalid_request_error","param":"model","code":"model_not_found"}}`},
		{"POST", "/v1/completions", `{"model":"stories260K","prompt":"x"}`,
			`{"error":{"message":"The model 'stories260k' is known but not loaded: get its weights","type":"invalid_request_error","param":"model","code":"model_not_loaded"}}`},
		{"POST", "/v2/models/ehco/generate", `{"text_input":"x"}`, `did you mean 'echo'?"}`},
		{"GET", "/v2/models/Echo", "", `did you mean 'echo'?"}`},
	} {
		var resp *http.Response
		var body string
		if tc.method == "GET" {
			resp, body = s.get(t, tc.path)
		} else {
			resp, body = s.post(t, tc.path, tc.body)
		}
		if resp.StatusCode != 404 || !strings.HasSuffix(body, tc.want) || !strings.HasPrefix(body, `{"error":`) {
			t.Errorf("%s %s %s\n got %d %s\nwant 404 ending %s", tc.method, tc.path, tc.body, resp.StatusCode, body, tc.want)
		}
	}
	c := s.dialWS(t)
	wsSend(t, c, `{"type":"completions","id":"u1","body":{"model":"ehco","prompt":"x"}}`)
	if _, raw, err := wsRead(t, c); err != nil || !strings.Contains(string(raw), `"code":"model_not_found","message":"The model 'ehco' does not exist; did you mean 'echo'?"`) {
		t.Errorf("WebSocket: %s %v", raw, err)
	}
	c.Close(websocket.StatusNormalClosure, "")
}

// delay_ms, streamgate's extension on /v1, paces a model that honours it
// (echo) so that a stream can be watched token by token.
func TestOpenAIDelayMs(t *testing.T) {
	s := newStack(t, nil)
	resp, body := s.post(t, "/v1/chat/completions", `{"model":"echo","messages":[{"role":"user","content":"a b c"}],"stream":true,"delay_ms":5}`)
	if resp.StatusCode != 200 || strings.Count(body, `"content":"`) < 3 || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Errorf("delay_ms 5: %d %s", resp.StatusCode, body)
	}
	resp, body = s.post(t, "/v1/completions", `{"model":"echo","prompt":"a","delay_ms":-1}`)
	if resp.StatusCode != 400 || !strings.Contains(body, `"param":"delay_ms"`) {
		t.Errorf("delay_ms -1: %d %s", resp.StatusCode, body)
	}
}
