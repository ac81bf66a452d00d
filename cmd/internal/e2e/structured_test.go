package e2e

import (
	"os"
	"os/exec"
	"testing"
)

// TestGGUFStructuredOutputs runs node/structured.test.mjs (the openai
// SDK's zod helpers: json_schema, json_object, named and required tool
// calls, a tool loop) and node/agents.test.mjs (the Vercel AI SDK and
// LangChain JS) against a GGUF model with Qwen3's vocabulary (151k
// tokens) and chat template (which renders tools) and random weights:
// only guided decoding makes its answers parse.
func TestGGUFStructuredOutputs(t *testing.T) {
	path, _ := tinyQwen3(t, 1024, 9)
	srv := startServe(t, buildStreamgate(t), "--model", path)
	dir, node := nodeTool(t)
	cmd := exec.CommandContext(t.Context(), node, "--test", "--test-reporter=spec", "structured.test.mjs", "agents.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+srv.url+"/v1", "OPENAI_API_KEY=unused", "NO_COLOR=1",
		"STREAMGATE_TEXT_MODEL=tiny-qwen3", "STREAMGATE_STRUCTURED_SEEDS=1")
	out, err := cmd.CombinedOutput()
	t.Logf("node --test structured.test.mjs agents.test.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("node tests failed: %v", err)
	}
}
