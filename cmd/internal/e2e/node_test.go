package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestOpenAINodeSDK runs node/openai.test.mjs and node/responses.test.mjs,
// the official openai npm package and the Vercel AI SDK against engine +
// upstream + gateway over loopback. It needs
// `npm ci` in cmd/internal/e2e/node first; without node_modules it is skipped, unless
// STREAMGATE_REQUIRE_NODE=1 (as in CI), which makes that a failure.
func TestOpenAINodeSDK(t *testing.T) {
	dir, err := filepath.Abs("node")
	if err != nil {
		t.Fatal(err)
	}
	required := os.Getenv("STREAMGATE_REQUIRE_NODE") == "1"
	missing := func(why string) {
		if required {
			t.Fatalf("%s (STREAMGATE_REQUIRE_NODE=1)", why)
		}
		t.Skip(why)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err != nil {
		missing("no node_modules: run `npm ci` in cmd/internal/e2e/node")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not installed")
	}

	s := newStack(t, nil)
	cmd := exec.CommandContext(t.Context(), node, "--test", "--test-reporter=spec", "openai.test.mjs", "responses.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+s.url+"/v1", "OPENAI_API_KEY=unused", "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	t.Logf("node --test openai.test.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("node tests failed: %v", err)
	}
	// The aborted stream asked echo_slow for 1000s of work; only the
	// cancellation the abort caused lets the engine go idle.
	waitFor(t, "the aborted request to stop in the engine", func() bool { return s.eng.InFlight() == 0 })
}
