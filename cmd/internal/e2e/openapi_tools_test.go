package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The tools of openapi.yaml's users, from npm (cmd/internal/e2e/openapi,
// `npm ci` there): Redocly's linter, swagger-parser's validator and the
// TypeScript client generator, and oapi-codegen for Go. Without
// node_modules the tests are skipped, unless STREAMGATE_REQUIRE=1
// (as in CI), which makes that a failure.

// openAPITools is the npm folder of the OpenAPI tools and the node binary.
func openAPITools(t *testing.T) (dir, node string) {
	t.Helper()
	dir, err := filepath.Abs("openapi")
	if err != nil {
		t.Fatal(err)
	}
	missing := func(why string) {
		if os.Getenv("STREAMGATE_REQUIRE") == "1" {
			t.Fatalf("%s (STREAMGATE_REQUIRE=1)", why)
		}
		t.Skip(why)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@redocly", "cli", "package.json")); err != nil {
		missing("no node_modules: run `npm ci` in cmd/internal/e2e/openapi")
	}
	node, err = exec.LookPath("node")
	if err != nil {
		missing("node is not installed")
	}
	return dir, node
}

// runTool runs a command in dir and returns its standard output, failing
// the test when it fails.
func runTool(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"NO_COLOR=1", "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true"}, env...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// openapi.yaml passes Redocly's recommended rules (the places where a
// rule does not fit are listed with their reasons in
// openapi/.redocly.lint-ignore.yaml) with no error and no warning, and
// swagger-parser's validation.
func TestOpenAPITools(t *testing.T) {
	dir, node := openAPITools(t)
	t.Run("redocly lint", func(t *testing.T) {
		// From the folder of redocly.yaml, which names openapi.yaml.
		out := runTool(t, dir, nil, node, filepath.Join("node_modules", "@redocly", "cli", "bin", "cli.js"), "lint", "--format=json")
		var report struct {
			Totals struct{ Errors, Warnings, Ignored int }
		}
		if err := json.Unmarshal([]byte(out), &report); err != nil {
			t.Fatalf("redocly lint printed no report: %v\n%s", err, out)
		}
		if report.Totals.Errors != 0 || report.Totals.Warnings != 0 {
			t.Errorf("redocly lint: %d errors, %d warnings:\n%s", report.Totals.Errors, report.Totals.Warnings, out)
		}
		t.Logf("redocly lint: no problem (%d ignored by .redocly.lint-ignore.yaml)", report.Totals.Ignored)
	})
	t.Run("swagger-parser validate", func(t *testing.T) {
		t.Log(runTool(t, dir, nil, node, "validate.mjs", filepath.Join(moduleRoot(t), "openapi.yaml")))
	})
}

// Clients generated from openapi.yaml compile and work against a real
// `streamgate serve` with API keys: a TypeScript client (openapi-typescript
// types, openapi-fetch calls, strict tsc) and a Go client (oapi-codegen
// types and client). Each runs a non-streaming chat completion, a Triton
// infer, a stored Response retrieval and keyed requests (openapi/client.ts,
// openapi/goclient/main.go).
func TestOpenAPIClients(t *testing.T) {
	if testing.Short() {
		t.Skip("builds streamgate and generated clients")
	}
	dir, node := openAPITools(t)
	spec := filepath.Join(moduleRoot(t), "openapi.yaml")
	bin := buildStreamgate(t)
	keys := filepath.Join(t.TempDir(), "keys.json")
	key := strings.TrimSpace(runTool(t, t.TempDir(), nil, bin, "keys", "create", "--keys-file", keys, "--name", "openapi-clients", "--rpm", "1000"))
	if key == "" || strings.ContainsAny(key, " \n") {
		t.Fatalf("keys create printed %q", key)
	}
	srv := startServe(t, bin, "--keys-file", keys)
	env := []string{"STREAMGATE_URL=" + srv.url, "STREAMGATE_API_KEY=" + key, "STREAMGATE_TEXT_MODEL=echo"}

	// The two clients run side by side; the group ends when both have.
	t.Run("clients", func(t *testing.T) {
		t.Run("typescript", func(t *testing.T) {
			t.Parallel()
			runTypeScriptClient(t, dir, node, spec, env)
		})
		t.Run("go", func(t *testing.T) {
			t.Parallel()
			runGoClient(t, dir, spec, env)
		})
	})

	// Both clients' requests were counted against the key: the server saw
	// keyed traffic, not an open gateway.
	resp, err := http.Get(srv.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v1/models without a key: %d, want 401", resp.StatusCode)
	}
}

// runTypeScriptClient generates openapi-typescript's types of spec beside
// a copy of client.ts, compiles them with strict tsc and runs the result
// with env.
func runTypeScriptClient(t *testing.T, dir, node, spec string, env []string) {
	tmp := t.TempDir()
	for _, f := range []string{"client.ts", "tsconfig.json"} {
		copyFile(t, filepath.Join(dir, f), filepath.Join(tmp, f))
	}
	if err := os.WriteFile(filepath.Join(tmp, "package.json"), []byte(`{"type":"module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(tmp, "node_modules")); err != nil {
		t.Fatal(err)
	}
	// Generated in tmp, away from redocly.yaml (which the generator
	// would read as its configuration).
	runTool(t, tmp, nil, node, filepath.Join("node_modules", "openapi-typescript", "bin", "cli.js"), spec, "-o", "api.d.ts")
	runTool(t, tmp, nil, node, filepath.Join("node_modules", "typescript", "bin", "tsc"), "-p", ".", "--outDir", "out")
	t.Log(runTool(t, tmp, env, node, filepath.Join("out", "client.js")))
}

// runGoClient generates oapi-codegen's client of spec in a copy of the
// goclient module and runs the module with env.
func runGoClient(t *testing.T, dir, spec string, env []string) {
	tmp := t.TempDir()
	for _, f := range []string{"go.mod", "go.sum", "main.go"} {
		copyFile(t, filepath.Join(dir, "goclient", f), filepath.Join(tmp, f))
	}
	if err := os.Mkdir(filepath.Join(tmp, "client"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The generator's version is goclient/go.mod's tool line: its
	// dependencies stay out of streamgate's go.mod.
	gen := []string{"GOWORK=off"}
	runTool(t, tmp, gen, "go", "tool", "oapi-codegen", "-generate", "types,client", "-package", "client", "-o", filepath.Join("client", "client.gen.go"), spec)
	t.Log(runTool(t, tmp, append(env, gen...), "go", "run", "."))
}

// startServe runs `streamgate serve args...` on free ports, with the
// built-in models only, and waits until it is ready.
func startServe(t *testing.T, bin string, args ...string) *sgProcess {
	t.Helper()
	return startServeModels(t, bin, "", args...)
}

// startServeModels is startServe with STREAMGATE_MODEL_DIR=modelDir, so
// that serve also serves the weights it finds there.
func startServeModels(t *testing.T, bin, modelDir string, args ...string) *sgProcess {
	t.Helper()
	addr := freeAddr(t)
	p := &sgProcess{addr: addr, url: "http://" + addr}
	p.process = startStreamgate(t, bin, "serve", modelDir, append([]string{"serve", "--http", addr, "--grpc", freeAddr(t)}, args...)...)
	p.waitReady(t)
	return p
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
