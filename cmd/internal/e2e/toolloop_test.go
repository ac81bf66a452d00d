package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/streamgate/streamgate/engine/gguf/ggufmodel"
	"github.com/streamgate/streamgate/engine/llama2"
)

// toolsTemplate is a compact chat template in the Hermes style: it
// lists the tools, renders the assistant's calls as <tool_call>{"name",
// "arguments"}</tool_call> (which tells the gateway to parse Hermes
// calls) and the tool results as <tool_response>. Its plain "role:"
// turns keep a whole tool loop short enough for stories260K's 512
// positions, with room left for the model to end its answer.
const toolsTemplate = `{%- if tools %}Tools:{% for tool in tools %} {{ tool.function.name }}{{ tool.function.parameters.properties | tojson }}{% endfor %}
{% endif %}
{%- for message in messages %}
{%- if message.role == 'assistant' %}assistant: {% if message.content %}{{ message.content }}{% endif %}
{%- for tc in message.tool_calls %}<tool_call>{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}</tool_call>{% endfor %}
{% elif message.role == 'tool' %}tool: <tool_response>{{ message.content }}</tool_response>
{% else %}{{ message.role }}: {{ message.content }}
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}assistant:{% endif %}`

// TestGGUFAgentToolLoop converts the trained stories260K checkpoint into
// a GGUF file (ggufmodel.WriteLlama2C: llama architecture, its
// SentencePiece vocabulary, toolsTemplate), serves it with `serve
// --model`, and runs node/toolloop.test.mjs: an agent's tool loop with
// the official openai SDK (call, tool result, answer), streamed and not,
// on /v1/chat/completions and /v1/responses.
func TestGGUFAgentToolLoop(t *testing.T) {
	dir := storiesDir(t)
	path := filepath.Join(t.TempDir(), "stories260k-tools.gguf")
	if err := ggufmodel.WriteLlama2C(path, filepath.Join(dir, llama2.CheckpointFile), filepath.Join(dir, llama2.TokenizerFile), toolsTemplate); err != nil {
		t.Fatal(err)
	}
	srv := startServe(t, buildStreamgate(t), "--model", path)
	node, nodeBin := nodeTool(t)
	cmd := exec.CommandContext(t.Context(), nodeBin, "--test", "--test-reporter=spec", "toolloop.test.mjs")
	cmd.Dir = node
	cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+srv.url+"/v1", "OPENAI_API_KEY=unused", "NO_COLOR=1",
		"STREAMGATE_TOOLLOOP_MODEL=stories260k-tools")
	out, err := cmd.CombinedOutput()
	t.Logf("node --test toolloop.test.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("node tests failed: %v", err)
	}
}
