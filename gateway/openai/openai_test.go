package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseChat(t *testing.T) {
	r, err := ParseChat([]byte(`{"model":"echo","messages":[{"role":"system","content":"be brief"},
		{"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}],
		"stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":7,"temperature":0.2,
		"top_p":0.9,"seed":3,"stop":"\n","n":1,"user":"u","logit_bias":{},"tools":[],"presence_penalty":0}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.Model != "echo" || !r.Stream || !r.IncludeUsage || *r.Params.MaxTokens != 7 || *r.Params.Temperature != 0.2 ||
		*r.Params.TopP != 0.9 || *r.Params.Seed != 3 || len(r.Params.Stop) != 1 || r.Messages[1].Content != "hi there" {
		t.Fatalf("got %+v", r)
	}
	r, err = ParseChat([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}],"stop":["a","b"]}`))
	if err != nil || r.Stream || r.Params.MaxTokens != nil || len(r.Params.Stop) != 2 {
		t.Fatalf("got %+v, %v", r, err)
	}
}

// The sampling extras: set when on, unset at their off values.
func TestParseSamplingExtras(t *testing.T) {
	r, err := ParseChat([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}],"top_k":5,"min_p":0.1,
		"repetition_penalty":1.2,"frequency_penalty":0.5,"presence_penalty":-1}`))
	if err != nil {
		t.Fatal(err)
	}
	p := r.Params
	if *p.TopK != 5 || *p.MinP != 0.1 || *p.RepetitionPenalty != 1.2 || *p.FrequencyPenalty != 0.5 || *p.PresencePenalty != -1 {
		t.Fatalf("got %+v", p)
	}
	c, err := ParseCompletion([]byte(`{"model":"m","prompt":"x","top_k":-1,"min_p":0,"repetition_penalty":1,"frequency_penalty":0,"presence_penalty":0}`))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Params; p.TopK != nil || p.MinP != nil || p.RepetitionPenalty != nil || p.FrequencyPenalty != nil || p.PresencePenalty != nil {
		t.Fatalf("off values set: %+v", p)
	}
}

var chatErrors = []struct{ body, param, code, msg string }{
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"n":2}`, "n", "unsupported_parameter", "Unsupported parameter: 'n' must be 1"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"logit_bias":{"1":5}}`, "logit_bias", "unsupported_parameter", "logit_bias"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]}`, "tools[0].function", "missing_required_parameter", "tools[0].function"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"web_search"}]}`, "tools[0].type", "unsupported_parameter", "only function tools"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":{}}`, "tools", "invalid_type", "expected an array"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"a b"}}]}`, "tools[0].function.name", "invalid_value", "does not match"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":[]}}]}`, "tools[0].function.parameters", "invalid_type", "JSON schema"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}]}`, "tools[1].function.name", "invalid_value", "declared twice"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`, "tool_choice", "invalid_value", "only allowed when 'tools'"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"any"}`, "tool_choice", "invalid_value", "'any' is not one of"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, "tool_choice", "invalid_value", "'g' is not among the tools"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"parallel_tool_calls":"yes"}`, "parallel_tool_calls", "invalid_type", "a boolean"},
	{`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{"}}]}]}`, "messages[0].tool_calls[0].function.arguments", "invalid_value", "JSON text"},
	{`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}]}`, "messages[0].tool_calls[0].id", "missing_required_parameter", "id"},
	{`{"model":"m","messages":[{"role":"user","content":"x","tool_calls":[]}]}`, "messages[0].tool_calls", "unknown_parameter", "only assistant messages"},
	{`{"model":"m","messages":[{"role":"tool","content":"x"}]}`, "messages[0].tool_call_id", "missing_required_parameter", "tool_call_id"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"schema":{}}}}`, "response_format.json_schema.name", "invalid_value", "json_schema.name"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema"}}`, "response_format.json_schema", "missing_required_parameter", "json_schema"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":[1]}}}`, "response_format.json_schema.schema", "invalid_type", "schema"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"yaml"}}`, "response_format.type", "invalid_value", "yaml"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true}`, "logprobs", "unsupported_parameter", "logprobs"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"bogus":1}`, "bogus", "unknown_parameter", "Unrecognized request argument supplied: bogus"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"max_token":1}`, "max_token", "unknown_parameter", "Unrecognized request argument supplied: max_token; did you mean 'max_tokens'?"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"Temprature":1}`, "Temprature", "unknown_parameter", "Unrecognized request argument supplied: Temprature; did you mean 'temperature'?"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":"5"}`, "max_tokens", "invalid_type", "Invalid type for 'max_tokens': expected an integer, but got a string instead."},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":3}`, "temperature", "invalid_value", "Invalid value for 'temperature'"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"stop":[1]}`, "stop", "invalid_type", "stop"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}}`, "stream_options", "invalid_value", "only allowed when 'stream' is true"},
	{`{"model":"m","messages":[]}`, "messages", "invalid_value", "at least one message"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"top_k":-2}`, "top_k", "invalid_value", "top_k"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"top_k":1.5}`, "top_k", "invalid_type", "top_k"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"min_p":2}`, "min_p", "invalid_value", "min_p"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"repetition_penalty":0}`, "repetition_penalty", "invalid_value", "greater than 0"},
	{`{"model":"m","messages":[{"role":"user","content":"x"}],"presence_penalty":3}`, "presence_penalty", "invalid_value", "presence_penalty"},
	{`{"model":"m"}`, "messages", "missing_required_parameter", "Missing required parameter: 'messages'."},
	{`{"messages":[{"role":"user","content":"x"}]}`, "model", "missing_required_parameter", "Missing required parameter: 'model'."},
	{`{"model":"m","messages":[{"role":"function","content":"x"}]}`, "messages[0].role", "unsupported_parameter", "function"},
	{`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, "messages[0].content[0].type", "unsupported_parameter", "image_url"},
	{`{"model":"m","messages":[{"role":"user"}]}`, "messages[0].content", "missing_required_parameter", "messages[0].content"},
	{"{\"model\":\"m\",\n\"messages\":[}", "", "invalid_json", "at line 2, column 13"},
	{`[]`, "", "invalid_json", "must be a JSON object"},
	{``, "", "invalid_json", "must be a JSON object"},
}

func TestParseChatErrors(t *testing.T) {
	for _, tc := range chatErrors {
		_, err := ParseChat([]byte(tc.body))
		var re *RequestError
		if !errors.As(err, &re) || re.Param != tc.param || re.Code != tc.code || !strings.Contains(re.Message, tc.msg) {
			t.Errorf("ParseChat(%s) = %#v, want param %q code %q containing %q", tc.body, err, tc.param, tc.code, tc.msg)
		}
	}
}

func TestParseCompletion(t *testing.T) {
	r, err := ParseCompletion([]byte(`{"model":"echo","prompt":["one two"],"echo":true,"best_of":1,"suffix":"","logprobs":null}`))
	if err != nil || r.Prompt != "one two" || !r.Echo || *r.Params.MaxTokens != DefaultCompletionMaxTokens {
		t.Fatalf("got %+v, %v", r, err)
	}
	for _, tc := range []struct{ body, param string }{
		{`{"model":"m","prompt":[1,2]}`, "prompt"},
		{`{"model":"m","prompt":["a","b"]}`, "prompt"},
		{`{"model":"m","prompt":"a","logprobs":2}`, "logprobs"},
		{`{"model":"m","prompt":"a","suffix":"x"}`, "suffix"},
		{`{"model":"m","prompt":"a","best_of":2}`, "best_of"},
		{`{"model":"m","prompt":"a","messages":[]}`, "messages"},
		{`{"model":"m"}`, "prompt"},
	} {
		_, err := ParseCompletion([]byte(tc.body))
		var re *RequestError
		if !errors.As(err, &re) || re.Param != tc.param {
			t.Errorf("ParseCompletion(%s) = %v, want param %q", tc.body, err, tc.param)
		}
	}
}

func TestChunks(t *testing.T) {
	c := &Chunker{ID: "chatcmpl-1", Created: 5, Model: "echo", Chat: true}
	want := []string{
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":5,"model":"echo","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":5,"model":"echo","choices":[{"index":0,"delta":{"content":"hi"},"logprobs":null,"finish_reason":null}]}`,
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":5,"model":"echo","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`,
	}
	got := []string{string(c.Role()), string(c.Delta("hi")), string(c.Finish("stop"))}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("chunk %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
	c.IncludeUsage = true
	if u := string(c.UsageChunk(Usage{1, 2, 3})); u != `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":5,"model":"echo","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}` {
		t.Errorf("usage chunk %s", u)
	}
	if d := string(c.Delta("x")); !strings.HasSuffix(d, `"usage":null}`) {
		t.Errorf("delta with include_usage %s", d)
	}
	tc := &Chunker{ID: "cmpl-1", Created: 5, Model: "echo"}
	if d := string(tc.Delta("a")); d != `{"id":"cmpl-1","object":"text_completion","created":5,"model":"echo","choices":[{"index":0,"text":"a","logprobs":null,"finish_reason":null}]}` {
		t.Errorf("completion delta %s", d)
	}
	if d := string(tc.Finish("length")); d != `{"id":"cmpl-1","object":"text_completion","created":5,"model":"echo","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"length"}]}` {
		t.Errorf("completion finish %s", d)
	}
	if d := string(c.Completion("hello", "stop", Usage{1, 1, 2})); d != `{"id":"chatcmpl-1","object":"chat.completion","created":5,"model":"echo","choices":[{"index":0,"message":{"role":"assistant","content":"hello","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}` {
		t.Errorf("completion %s", d)
	}
	if e := string(ErrorBody("nope", "invalid_request_error", "n", "")); e != `{"error":{"message":"nope","type":"invalid_request_error","param":"n","code":null}}` {
		t.Errorf("error body %s", e)
	}
	if l := string(ModelList(nil)); l != `{"object":"list","data":[]}` {
		t.Errorf("model list %s", l)
	}
}

func TestTemplate(t *testing.T) {
	msgs := []ChatMessage{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hello"}}
	got, err := MustParseTemplate("default", DefaultTemplate).Render(msgs)
	if err != nil || got != "system: be brief\nuser: hello\nassistant:" {
		t.Fatalf("default = %q, %v", got, err)
	}
	got, _ = MustParseTemplate("raw", RawTemplate).Render(msgs[1:])
	if got != "hello" {
		t.Fatalf("raw = %q", got)
	}
	if _, err := ParseTemplate("bad", "{{.Nope"); err == nil {
		t.Fatal("bad template parsed")
	}
}

// The default and raw templates, rendered without text/template, render
// what text/template renders.
func TestTemplateDirectMatchesExecute(t *testing.T) {
	for _, msgs := range [][]ChatMessage{
		nil,
		{{Role: "user", Content: ""}},
		{{Role: "system", Content: "<b>&\"{{.x}}\"</b>\n", Name: "n"}, {Role: "user", Content: "é \xff"}, {Role: "assistant"}},
	} {
		for _, src := range []string{DefaultTemplate, RawTemplate} {
			direct := MustParseTemplate("t", src)
			if direct.direct == "" {
				t.Fatalf("%q is rendered through text/template", src)
			}
			slow := &Template{t: direct.t}
			got, err := direct.Render(msgs)
			want, werr := slow.Render(msgs)
			if got != want || err != nil || werr != nil {
				t.Errorf("%q over %+v:\n got %q (%v)\nwant %q (%v)", src, msgs, got, err, want, werr)
			}
		}
	}
}

func FuzzParseChat(f *testing.F) {
	for _, tc := range chatErrors {
		f.Add([]byte(tc.body))
	}
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseChat(body)
		checkParsed(t, r != nil, err)
	})
}

func FuzzParseCompletion(f *testing.F) {
	for _, s := range []string{`{"model":"m","prompt":"x"}`, `{"model":"m","prompt":["x"],"max_tokens":1,"stop":["a"]}`, `{"prompt":[1]}`, `{`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseCompletion(body)
		checkParsed(t, r != nil, err)
	})
}

func checkParsed(t *testing.T, ok bool, err error) {
	t.Helper()
	if err == nil {
		if !ok {
			t.Fatal("nil request without error")
		}
		return
	}
	var re *RequestError
	if !errors.As(err, &re) || re.Message == "" {
		t.Fatalf("error %T %v", err, err)
	}
	if !json.Valid(ErrorBody(re.Message, "invalid_request_error", re.Param, re.Code)) {
		t.Fatal("error body is not JSON")
	}
}

// TestChunksMatchMarshal: the hand-written Role and Finish are byte for
// byte the chunks encoding/json makes.
func TestChunksMatchMarshal(t *testing.T) {
	for _, c := range []Chunker{
		{ID: "chatcmpl-1", Created: 1700000000, Model: "echo", Chat: true},
		{ID: "chatcmpl-<&>", Created: -5, Model: "m\u2028\"x\"", Chat: true, IncludeUsage: true},
		{ID: "cmpl-1", Created: 0, Model: "\xff", IncludeUsage: true},
		{ID: "", Created: 1, Model: ""},
	} {
		if c.Chat {
			empty := ""
			want := mustJSON(c.chunk([]chunkChoice{{Delta: &chatDelta{Role: "assistant", Content: &empty}}}))
			if got := c.Role(); string(got) != string(want) {
				t.Errorf("Role\n got %s\nwant %s", got, want)
			}
		}
		for _, reason := range []string{"stop", "length", "<\"x\">"} {
			want := mustJSON(c.chunk([]chunkChoice{{Delta: &chatDelta{}, FinishReason: &reason}}))
			if !c.Chat {
				empty := ""
				want = mustJSON(c.chunk([]chunkChoice{{Text: &empty, FinishReason: &reason}}))
			}
			if got := c.Finish(reason); string(got) != string(want) {
				t.Errorf("Finish(%q)\n got %s\nwant %s", reason, got, want)
			}
			c.Delta("x") // Finish after a delta (the prefixes built in the other order)
		}
	}
}

// TestDeltaMatchesMarshal: the hand-written Delta is byte for byte the
// chunk encoding/json makes.
func TestDeltaMatchesMarshal(t *testing.T) {
	for _, c := range []Chunker{
		{ID: "chatcmpl-1", Created: 1700000000, Model: "echo", Chat: true},
		{ID: "cmpl-<&>", Created: -5, Model: "m\u2028\"x\"", IncludeUsage: true},
		{ID: "", Created: 0, Model: "", Chat: true, IncludeUsage: true},
	} {
		for _, text := range []string{"", " hello", "é€𝄞", "bad \xff", "<tag> & \"q\"\n\t\x00"} {
			want := mustJSON(c.chunk([]chunkChoice{{Delta: &chatDelta{Content: &text}}}))
			if !c.Chat {
				want = mustJSON(c.chunk([]chunkChoice{{Text: &text}}))
			}
			if got := c.Delta(text); string(got) != string(want) {
				t.Errorf("Delta(%q)\n got %s\nwant %s", text, got, want)
			}
		}
	}
}

func TestParseResponses(t *testing.T) {
	r, err := ParseResponses([]byte(`{"model":"echo","instructions":"be brief","max_output_tokens":7,"temperature":0.5,"top_p":0.9,
		"stream":true,"stream_options":{"include_obfuscation":false},"metadata":{"k":"v"},"previous_response_id":"resp-1","user":"u",
		"text":{"format":{"type":"text"},"verbosity":"medium"},"tools":[],"tool_choice":"auto","include":[],"parallel_tool_calls":true,
		"truncation":"disabled","top_logprobs":0,"reasoning":{"effort":null},"service_tier":"auto","top_k":4,"seed":-3,
		"input":[{"role":"user","content":"hi"},{"type":"message","role":"assistant","id":"msg-1","status":"completed",
			"content":[{"type":"output_text","text":"hel"},{"type":"output_text","text":"lo"}]},
			{"role":"developer","content":[{"type":"input_text","text":"more"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.Model != "echo" || !r.Stream || !r.Store || r.Background || *r.Instructions != "be brief" || *r.Params.MaxTokens != 7 ||
		*r.Params.Temperature != 0.5 || *r.Params.TopP != 0.9 || *r.Params.TopK != 4 || *r.Params.Seed != -3 || r.Metadata["k"] != "v" ||
		r.PreviousResponseID != "resp-1" || *r.User != "u" || len(r.Input) != 3 || !reflect.DeepEqual(r.Input[1], ChatMessage{Role: "assistant", Content: "hello"}) {
		t.Fatalf("got %+v", r)
	}
	msgs := r.Messages([]ChatMessage{{Role: "user", Content: "before"}})
	if len(msgs) != 5 || !reflect.DeepEqual(msgs[0], ChatMessage{Role: "system", Content: "be brief"}) || msgs[1].Content != "before" {
		t.Fatalf("messages %+v", msgs)
	}
	// A stateless agent sends a response's output back as input: the
	// call items carry the parsed_arguments the SDK's helpers add.
	r, err = ParseResponses([]byte(`{"model":"m","input":[{"type":"function_call","id":"fc-1","status":"completed","call_id":"c",
		"name":"f","arguments":"{\"a\":1}","parsed_arguments":{"a":1}},{"type":"function_call_output","call_id":"c","output":"ok"}]}`))
	if err != nil || !reflect.DeepEqual(r.Input, []ChatMessage{{Role: "assistant", ToolCalls: []ToolCall{{ID: "c", Name: "f", Arguments: `{"a":1}`}}},
		{Role: "tool", Content: "ok", ToolCallID: "c"}}) {
		t.Fatalf("got %+v, %v", r, err)
	}
	r, err = ParseResponses([]byte(`{"model":"m","input":"x","store":false}`))
	if err != nil || r.Store || !reflect.DeepEqual(r.Input[0], ChatMessage{Role: "user", Content: "x"}) || r.Params.MaxTokens != nil {
		t.Fatalf("got %+v, %v", r, err)
	}
}

var responsesErrors = []struct{ body, param, code string }{
	{`{"model":"m","input":"x","tools":[{"type":"web_search"}]}`, "tools[0].type", "unsupported_parameter"},
	{`{"model":"m","input":"x","tools":[{"type":"function","name":"bad name"}]}`, "tools[0].name", "invalid_value"},
	{`{"model":"m","input":"x","tools":[{"type":"function","name":"f","parameters":{},"extra":1}]}`, "tools[0].extra", "unknown_parameter"},
	{`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{"}]}`, "input[0].arguments", "invalid_value"},
	{`{"model":"m","input":[{"type":"function_call_output","output":"x"}]}`, "input[0].call_id", "missing_required_parameter"},
	{`{"model":"m","input":"x","tool_choice":"required"}`, "tool_choice", "invalid_value"},
	{`{"model":"m","input":"x","text":{"format":{"type":"json_schema"}}}`, "text.format.name", "invalid_value"},
	{`{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"a","schema":"x"}}}`, "text.format.schema", "invalid_type"},
	{`{"model":"m","input":"x","text":{"format":{"type":"xml"}}}`, "text.format.type", "invalid_value"},
	{`{"model":"m","input":"x","text":{"verbosity":"low"}}`, "text.verbosity", "unsupported_parameter"},
	{`{"model":"m","input":"x","text":{"other":1}}`, "text.other", "unknown_parameter"},
	{`{"model":"m","input":"x","reasoning":{"effort":"low"}}`, "reasoning", "unsupported_parameter"},
	{`{"model":"m","input":"x","include":["reasoning.encrypted_content"]}`, "include", "unsupported_parameter"},
	{`{"model":"m","input":"x","top_logprobs":2}`, "top_logprobs", "unsupported_parameter"},
	{`{"model":"m","input":"x","conversation":"conv_1"}`, "conversation", "unsupported_parameter"},
	{`{"model":"m","input":"x","prompt":{"id":"p"}}`, "prompt", "unsupported_parameter"},
	{`{"model":"m","input":"x","truncation":"auto"}`, "truncation", "unsupported_parameter"},
	{`{"model":"m","input":"x","background":true,"store":false}`, "background", "invalid_value"},
	{`{"model":"m","input":"x","stream_options":{"include_obfuscation":true}}`, "stream_options", "invalid_value"},
	{`{"model":"m","input":"x","max_output_tokens":0}`, "max_output_tokens", "invalid_value"},
	{`{"model":"m","input":"x","temperature":"hot"}`, "temperature", "invalid_type"},
	{`{"model":"m","input":"x","seed":1.5}`, "seed", "invalid_type"},
	{`{"model":"m","input":"x","metadata":{"k":1}}`, "metadata.k", "invalid_type"},
	{`{"model":"m","input":"x","bogus":1}`, "bogus", "unknown_parameter"},
	{`{"model":"m"}`, "input", "missing_required_parameter"},
	{`{"input":"x"}`, "model", "missing_required_parameter"},
	{`{"model":"m","input":[]}`, "input", "invalid_value"},
	{`{"model":"m","input":5}`, "input", "invalid_type"},
	{`{"model":"m","input":[5]}`, "input[0]", "invalid_type"},
	{`{"model":"m","input":[{"role":"tool","content":"x"}]}`, "input[0].role", "invalid_value"},
	{`{"model":"m","input":[{"content":"x"}]}`, "input[0].role", "missing_required_parameter"},
	{`{"model":"m","input":[{"role":"user"}]}`, "input[0].content", "missing_required_parameter"},
	{`{"model":"m","input":[{"role":"user","content":"x","extra":1}]}`, "input[0].extra", "unknown_parameter"},
	{`{"model":"m","input":[{"type":"item_reference"}]}`, "input[0].id", "missing_required_parameter"},
	{`{"model":"m","input":[{"type":"item_reference","id":"msg-1","role":"user"}]}`, "input[0].role", "unknown_parameter"},
	{`{"model":"m","input":[{"type":"input_file","file_id":"f"}]}`, "input[0].type", "unsupported_parameter"},
	{`{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}`, "input[0].content[0].type", "unsupported_parameter"},
	{`{"model":"m","input":[{"role":"user","content":[{"type":"input_audio"}]}]}`, "input[0].content[0].type", "unsupported_parameter"},
	{`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":5}]}]}`, "input[0].content[0].text", "invalid_type"},
	{`{"model":"m","input":"x",}`, "", "invalid_json"},
}

func TestParseResponsesErrors(t *testing.T) {
	for _, tc := range responsesErrors {
		_, err := ParseResponses([]byte(tc.body))
		var re *RequestError
		if !errors.As(err, &re) || re.Param != tc.param || re.Code != tc.code || (tc.param != "" && !strings.Contains(re.Message, strings.SplitN(tc.param, ".", 2)[0])) {
			t.Errorf("ParseResponses(%s) = %#v, want param %q code %q", tc.body, err, tc.param, tc.code)
		}
	}
}

// FuzzParseResponses: any body is a request or a RequestError naming what
// is wrong, never a panic; a request always has a model and input.
func FuzzParseResponses(f *testing.F) {
	f.Add([]byte(`{"model":"m","input":"x"}`))
	f.Add([]byte(`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"x"}]}],"stream":true,"metadata":{"a":"b"}}`))
	for _, tc := range responsesErrors {
		f.Add([]byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseResponses(body)
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) || re.Message == "" || re.Code == "" {
				t.Fatalf("error %#v", err)
			}
			return
		}
		if r.Model == "" || len(r.Input) == 0 || (r.Background && !r.Store) {
			t.Fatalf("request %+v from %q", r, body)
		}
	})
}

// The Responses events are what encoding/json writes, the delta too.
func TestResponseEvents(t *testing.T) {
	resp := NewResponse("resp-1", 5, &ResponsesRequest{Model: "echo", Store: true})
	r := &Responder{Resp: resp, ItemID: "msg-1"}
	start := r.Start()
	if len(start) != 4 || !strings.HasPrefix(string(start[0]), `{"type":"response.created","sequence_number":0,"response":{"id":"resp-1","object":"response","created_at":5,"status":"in_progress"`) ||
		string(start[3]) != `{"type":"response.content_part.added","sequence_number":3,"item_id":"msg-1","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[],"logprobs":[]}}` {
		t.Fatalf("start %s", start)
	}
	d := r.AppendDelta(nil, []byte("h\"i"))
	want := mustJSON(struct {
		Type           string     `json:"type"`
		SequenceNumber int        `json:"sequence_number"`
		ItemID         string     `json:"item_id"`
		OutputIndex    int        `json:"output_index"`
		ContentIndex   int        `json:"content_index"`
		Delta          string     `json:"delta"`
		Logprobs       []struct{} `json:"logprobs"`
	}{"response.output_text.delta", 4, "msg-1", 0, 0, "h\"i", []struct{}{}})
	if string(d) != string(want) {
		t.Fatalf("delta\n got %s\nwant %s", d, want)
	}
	resp.Finish("msg-1", "h\"i", "length", NewUsage(2, 1))
	end := r.End()
	if len(end) != 4 || r.Seq() != 9 || !strings.HasPrefix(string(end[3]), `{"type":"response.incomplete","sequence_number":8,`) ||
		!strings.Contains(string(end[3]), `"incomplete_details":{"reason":"max_output_tokens"}`) ||
		!strings.Contains(string(end[3]), `"usage":{"input_tokens":2,"input_tokens_details":{"cached_tokens":0},"output_tokens":1,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":3}`) {
		t.Fatalf("end %s", end)
	}
}

var valueCorpus = []string{
	`"plain"`, `""`, `"é"`, `"esc\"aped"`, `"\u00e9\n"`, "\"bad \xff\"", "\"ctl \x01\"", `"a"b"`, `"`, ` "a" `,
	`true`, `false`, `null`, ` true`, `tru`, `0`, `-0`, `12`, `-12`, `007`, `-`, `1.0`, `1e3`, `123456789012345678`,
	`1234567890123456789`, `-9223372036854775808`, `9223372036854775808`, `{}`, `{"a":1,"a":"2"}`, ` {"b" : [1, {"c":null}] } `,
	`[]`, `[{"x":1}]`, `{"a":}`, `{`, "",
}

// The direct readers of values read what encoding/json reads.
func TestValueReadersMatchUnmarshal(t *testing.T) {
	for _, v := range valueCorpus {
		checkValueReaders(t, []byte(v))
	}
}

func FuzzValueReaders(f *testing.F) {
	for _, v := range valueCorpus {
		f.Add([]byte(v))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkValueReaders(t, raw) })
}

func checkValueReaders(t *testing.T, raw []byte) {
	t.Helper()
	var ws string
	werr := json.Unmarshal(raw, &ws)
	if s, ok := unquote(raw); ok != (werr == nil) || (ok && s != ws) {
		t.Fatalf("unquote(%q) = %q %v, json: %q %v", raw, s, ok, ws, werr)
	}
	var wb bool
	werr = json.Unmarshal(raw, &wb)
	if b, ok := unmarshalBool(raw); ok != (werr == nil) || b != wb {
		t.Fatalf("unmarshalBool(%q) = %v %v, json: %v %v", raw, b, ok, wb, werr)
	}
	if v, ok := smallInt(raw); ok {
		var n json.Number
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&n); err != nil || dec.More() {
			t.Fatalf("smallInt(%q) = %d, not one JSON number: %v", raw, v, err)
		}
		if wv, err := n.Int64(); err != nil || wv != v {
			t.Fatalf("smallInt(%q) = %d, json: %d %v", raw, v, wv, err)
		}
	}
	if !json.Valid(raw) { // objectMap reads values from valid bodies
		return
	}
	var wm map[string]json.RawMessage
	werr = json.Unmarshal(raw, &wm)
	m, ok := objectMap(raw)
	if ok != (werr == nil) || (m == nil) != (wm == nil) || len(m) != len(wm) {
		t.Fatalf("objectMap(%q) = %q %v, json: %q %v", raw, m, ok, wm, werr)
	}
	for k, v := range wm {
		if !bytes.Equal(m[k], v) {
			t.Fatalf("objectMap(%q)[%q] = %q, json: %q", raw, k, m[k], v)
		}
	}
}
