package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/gateway/store"
	"github.com/streamgate/streamgate/gateway/store/redistest"
)

// TestOpenAINodeSDK runs node/openai.test.mjs, node/responses.test.mjs and
// node/tools.test.mjs,
// the official openai npm package and the Vercel AI SDK against engine +
// upstream + gateway over loopback. It needs
// `npm ci` in cmd/internal/e2e/node first; without node_modules it is skipped, unless
// STREAMGATE_REQUIRE=1 (as in CI), which makes that a failure.
func TestOpenAINodeSDK(t *testing.T) {
	dir, node := nodeTool(t)
	s := startStack(t)
	cmd := exec.CommandContext(t.Context(), node, "--test", "--test-reporter=spec", "openai.test.mjs", "responses.test.mjs", "tools.test.mjs", "structured.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+s.url+"/v1", "OPENAI_API_KEY=unused", "NO_COLOR=1",
		"STREAMGATE_TEXT_MODEL="+s.textModel())
	out, err := cmd.CombinedOutput()
	t.Logf("node --test openai.test.mjs responses.test.mjs tools.test.mjs structured.test.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("node tests failed: %v", err)
	}
	// The aborted stream asked echo_slow for 1000s of work; only the
	// cancellation the abort caused lets the engine go idle.
	waitFor(t, "the aborted request to stop in the engine", func() bool { return s.eng.InFlight() == 0 })
}

// TestAgentSDKs runs node/agents.test.mjs: the Vercel AI SDK and
// LangChain JS (ChatOpenAI), unmodified, against engine + upstream +
// gateway over loopback: plain and streamed text, a tool loop with a
// required tool call, and zod-schema objects, validated under the
// engine's guided decoding on STREAMGATE_TEXT_MODEL.
func TestAgentSDKs(t *testing.T) {
	dir, node := nodeTool(t)
	s := startStack(t)
	cmd := exec.CommandContext(t.Context(), node, "--test", "--test-reporter=spec", "agents.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+s.url+"/v1", "NO_COLOR=1", "STREAMGATE_TEXT_MODEL="+s.textModel())
	out, err := cmd.CombinedOutput()
	t.Logf("node --test agents.test.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("node tests failed: %v", err)
	}
}

// TestOpenAINodeSDKReplicas runs node/responses.replicas.test.mjs, the
// official openai SDK against two gateway replicas (each with its own
// engine) sharing a real Redis, with API keys: background responses cut
// on one and resumed, continued and cancelled on the other, and none of
// it for another key.
func TestOpenAINodeSDKReplicas(t *testing.T) {
	dir, node := nodeTool(t)
	srv := redistest.Start(t)
	st, err := store.Open(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// With --redis the gateways need API keys: the tests use one, and
	// another key to check that a response is its creator's only.
	key, other := addKey(t, st, "node", store.Limit{}), addKey(t, st, "other", store.Limit{})
	shared := func(c *stack.Config) { c.Redis = srv.URL() }
	a := startPageStack(t, shared)
	b := startPageStack(t, shared)
	cmd := exec.CommandContext(t.Context(), node, "--test", "--test-reporter=spec", "responses.replicas.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+a.url+"/v1", "OPENAI_BASE_URL_B="+b.url+"/v1",
		"OPENAI_API_KEY="+key, "OTHER_API_KEY="+other, "NO_COLOR=1", "STREAMGATE_TEXT_MODEL="+a.textModel())
	out, err := cmd.CombinedOutput()
	t.Logf("node --test responses.replicas.test.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("node tests failed: %v", err)
	}
	waitFor(t, "the cancelled request to stop in its engine", func() bool { return a.eng.InFlight() == 0 })
}

// nodeTool is the directory of the node tests and the node binary. Without
// node_modules (run `npm ci` there) or node the test is skipped, unless
// STREAMGATE_REQUIRE=1 (as in CI), which makes that a failure.
func nodeTool(t *testing.T) (dir, node string) {
	t.Helper()
	dir, err := filepath.Abs("node")
	if err != nil {
		t.Fatal(err)
	}
	required := os.Getenv("STREAMGATE_REQUIRE") == "1"
	missing := func(why string) {
		if required {
			t.Fatalf("%s (STREAMGATE_REQUIRE=1)", why)
		}
		t.Skip(why)
	}
	// The last package package.json added: node_modules from before it
	// are as stale as none.
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@langchain", "openai", "package.json")); err != nil {
		missing("no up-to-date node_modules: run `npm ci` in cmd/internal/e2e/node")
	}
	node, err = exec.LookPath("node")
	if err != nil {
		missing("node is not installed")
	}
	return dir, node
}
