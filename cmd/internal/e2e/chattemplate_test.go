package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/gateway"
)

// A model whose config carries a Jinja chat template (chat_template, with
// bos_token and eos_token), as Triton's OpenAI frontend reads it: /v1 chat
// completions and the Responses API render their prompt with it, the
// generation prompt on. The echo model streams the prompt's words back, so
// the answer shows the prompt (its newlines become spaces).
func TestModelChatTemplate(t *testing.T) {
	const tmpl = "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>\n{{ m.content | trim }}{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
	const strict = "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{{ m.content }}{% endfor %}"
	s := newStack(t, &gateway.Options{Now: fixedNow}, func(c *stack.Config) {
		c.Engine.Extra = append(c.Engine.Extra,
			echoConfig(t, "echo_tmpl", map[string]string{"chat_template": tmpl, "bos_token": "<s>", "eos_token": "</s>"}),
			echoConfig(t, "echo_strict", map[string]string{"chat_template": strict}),
			echoConfig(t, "echo_broken", map[string]string{"chat_template": "{% for m in messages %}{{ m.content | wordcount }}{% endfor %}"}),
			echoConfig(t, "echo_unparsable", map[string]string{"chat_template": "{% if messages %}no end"}),
		)
	})
	const conv = `[{"role":"system","content":"Be brief."},{"role":"user","content":"  Hi there  "}]`
	want := "<s><|system|> Be brief.</s> <|user|> Hi there</s> <|assistant|>"

	resp, body := s.post(t, "/v1/chat/completions", `{"model":"echo_tmpl","messages":`+conv+`}`)
	var chat struct {
		Choices []struct{ Message struct{ Content string } }
	}
	if err := json.Unmarshal([]byte(body), &chat); err != nil || resp.StatusCode != 200 || len(chat.Choices) != 1 || chat.Choices[0].Message.Content != want {
		t.Fatalf("chat: %d %s\nwant content %q", resp.StatusCode, body, want)
	}
	resp, body = s.post(t, "/v1/responses", `{"model":"echo_tmpl","instructions":"Be brief.","input":"  Hi there  "}`)
	var r struct {
		Output []struct{ Content []struct{ Text string } }
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || resp.StatusCode != 200 || len(r.Output) != 1 || len(r.Output[0].Content) != 1 || r.Output[0].Content[0].Text != want {
		t.Fatalf("responses: %d %s\nwant text %q", resp.StatusCode, body, want)
	}

	for _, tc := range []struct {
		model, status, want string
	}{
		{"echo_strict", "400", `"message":"The chat template of model 'echo_strict' refused the conversation: System role not supported","type":"invalid_request_error","param":"messages","code":"invalid_value"`},
		{"echo_broken", "500", `The chat template of model 'echo_broken' failed: chat template: unsupported filter \"wordcount\"`},
		{"echo_unparsable", "500", `The chat template of model 'echo_unparsable' cannot be used: chat template: at byte`},
	} {
		resp, body := s.post(t, "/v1/chat/completions", `{"model":"`+tc.model+`","messages":`+conv+`}`)
		if got := resp.Status[:3]; got != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %s %s\nwant %s with %s", tc.model, resp.Status, body, tc.status, tc.want)
		}
	}
	// Without chat_template the gateway's own template stays.
	resp, body = s.post(t, "/v1/chat/completions", `{"model":"echo","messages":`+conv+`}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"content":"system: Be brief. user: Hi there assistant:"`) {
		t.Fatalf("echo: %d %s", resp.StatusCode, body)
	}
}

// A model with Qwen 2.5's chat template gets the request's tools, the
// assistant's tool calls and the tool results in its prompt, rendered as
// Hugging Face renders them. The echo model answers the prompt back, so
// the assistant's earlier call, which the template writes as
// <tool_call>{...}</tool_call>, comes back parsed as a tool call (the
// template names the Hermes format), and the rest as content.
func TestModelChatTemplateTools(t *testing.T) {
	src, err := os.ReadFile("../../../gateway/chattemplate/testdata/qwen2.5.jinja")
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, &gateway.Options{Now: fixedNow}, func(c *stack.Config) {
		c.Engine.Extra = append(c.Engine.Extra,
			echoConfig(t, "echo_qwen", map[string]string{"chat_template": string(src), "eos_token": "<|im_end|>"}),
			echoConfig(t, "echo_badparser", map[string]string{"tool_parser": "gorilla"}))
	})
	const tools = `[{"type":"function","function":{"name":"get_weather","description":"The weather in a city.","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`
	const msgs = `[{"role":"user","content":"Weather in Paris?"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"call_9","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},
		{"role":"tool","tool_call_id":"call_9","content":"18C"}]`
	for _, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"model":"echo_qwen","stream":%v,"tools":%s,"messages":%s}`, stream, tools, msgs)
		resp, out := s.post(t, "/v1/chat/completions", body)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
		content, calls, reason := toolAnswer(t, out, stream)
		if reason != "tool_calls" || len(calls) != 1 || calls[0].Function.Name != "get_weather" || calls[0].Function.Arguments != `{"city":"Paris"}` {
			t.Errorf("stream %v: reason %q, calls %+v", stream, reason, calls)
		}
		for _, want := range []string{`"description": "The weather in a city."`, "<tool_response> 18C </tool_response>"} {
			if !strings.Contains(content, want) {
				t.Errorf("stream %v: content %q lacks %q", stream, content, want)
			}
		}
	}
	resp, out := s.post(t, "/v1/chat/completions", `{"model":"echo_badparser","tools":`+tools+`,"messages":[{"role":"user","content":"x"}]}`)
	if resp.StatusCode != 500 || !strings.Contains(out, "The tool_parser 'gorilla' of model 'echo_badparser' is not one of hermes, llama3, mistral.") {
		t.Errorf("bad tool_parser: %d %s", resp.StatusCode, out)
	}
}

type toolCallOut struct {
	Index    int
	ID       string
	Function struct{ Name, Arguments string }
}

// toolAnswer reads a chat completion, whole or streamed, into its content,
// tool calls and finish reason.
func toolAnswer(t *testing.T, body string, stream bool) (content string, calls []toolCallOut, reason string) {
	t.Helper()
	type choice struct {
		Message, Delta struct {
			Content   string
			ToolCalls []toolCallOut `json:"tool_calls"`
		}
		FinishReason string `json:"finish_reason"`
	}
	if !stream {
		var c struct{ Choices []choice }
		if err := json.Unmarshal([]byte(body), &c); err != nil || len(c.Choices) != 1 {
			t.Fatalf("%v: %s", err, body)
		}
		return c.Choices[0].Message.Content, c.Choices[0].Message.ToolCalls, c.Choices[0].FinishReason
	}
	var b strings.Builder
	for _, line := range strings.Split(body, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c struct{ Choices []choice }
		if err := json.Unmarshal([]byte(data), &c); err != nil || len(c.Choices) != 1 {
			t.Fatalf("%v: %s", err, data)
		}
		d := c.Choices[0].Delta
		b.WriteString(d.Content)
		for _, tc := range d.ToolCalls {
			if tc.ID != "" {
				calls = append(calls, tc)
			} else if tc.Index < len(calls) {
				calls[tc.Index].Function.Arguments += tc.Function.Arguments
			}
		}
		if c.Choices[0].FinishReason != "" {
			reason = c.Choices[0].FinishReason
		}
	}
	return b.String(), calls, reason
}
