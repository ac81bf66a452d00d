package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/streamgate/streamgate/engine/gguf"
	"github.com/streamgate/streamgate/engine/gguf/ggufmodel"
	"github.com/streamgate/streamgate/engine/llama2/tokenizer/hfref"
)

// TestGGUFStructuredOutputs runs node/structured.test.mjs (the openai
// SDK's zod helpers: json_schema, json_object, named and required tool
// calls, a tool loop) and node/agents.test.mjs (the Vercel AI SDK and
// LangChain JS) against a GGUF model with Qwen3's vocabulary (151k
// tokens) and chat template (which renders tools) and random weights:
// only guided decoding makes its answers parse.
func TestGGUFStructuredOutputs(t *testing.T) {
	files := hfref.Load(t, "qwen3")
	v, err := files.Vocab("qwen2")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "Tiny-Qwen3.gguf")
	spec := ggufmodel.Spec{Arch: "qwen3", Type: gguf.Q8_0, Dim: 64, Hidden: 128, Layers: 1, Heads: 2, KVHeads: 1,
		Context: 1024, Seed: 9, Vocab: &v, ChatTemplate: files.Config.ChatTemplate, RopeBase: 1000000, OutputScale: 0.1}
	if err := ggufmodel.Write(path, spec); err != nil {
		t.Fatal(err)
	}
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
