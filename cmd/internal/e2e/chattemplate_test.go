package e2e

import (
	"encoding/json"
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
