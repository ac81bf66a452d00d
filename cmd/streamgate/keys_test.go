package main

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/streamgate/streamgate/gateway/store/redistest"
)

// runKeys runs `streamgate keys args...` and returns its stdout and
// stderr; it fails the test when the exit status is not code (-1: any
// failure).
func runKeys(t *testing.T, bin string, code int, args ...string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"keys"}, args...)...)
	cmd.Env = testEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	got := 0
	if ee := (*exec.ExitError)(nil); err != nil && !errorsAs(err, &ee) {
		t.Fatal(err)
	} else if ee != nil {
		got = ee.ExitCode()
	}
	if got != code && (code != -1 || got == 0) {
		t.Fatalf("keys %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), got, code, out.String(), errb.String())
	}
	return out.String(), errb.String()
}

func errorsAs(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok
}

// keys create prints the secret alone on stdout (a script captures it);
// list never shows it; revoke removes the key; both stores behave alike.
func TestKeysCommand(t *testing.T) {
	bin := buildBinary(t)
	run := func(t *testing.T, where ...string) {
		at := func(sub string, args ...string) []string { return append(append([]string{sub}, where...), args...) }
		out, errOut := runKeys(t, bin, 0, at("create", "--name", "alice", "--rpm", "60", "--tpm", "1000", "--concurrency", "2", "--allowed-models", "echo,stories260k", "--expires", "30d")...)
		secret := strings.TrimSuffix(out, "\n")
		if strings.Count(out, "\n") != 1 || !strings.HasPrefix(secret, "sg-") || strings.ContainsAny(secret, " \t") {
			t.Fatalf("stdout %q: want the secret alone on one line", out)
		}
		if !strings.Contains(errOut, "created key alice") || !strings.Contains(errOut, "rpm 60") || strings.Contains(errOut, secret) {
			t.Errorf("stderr %q", errOut)
		}
		runKeys(t, bin, -1, at("create", "--name", "alice")...) // the name is taken
		runKeys(t, bin, 0, at("create", "--name", "bob")...)
		out, _ = runKeys(t, bin, 0, at("list")...)
		if strings.Contains(out, secret) || !strings.Contains(out, "alice") || !strings.Contains(out, "bob") || !strings.Contains(out, "echo,stories260k") {
			t.Errorf("list:\n%s", out)
		}
		runKeys(t, bin, 0, at("revoke", "alice")...)
		runKeys(t, bin, -1, at("revoke", "alice")...)
		out, _ = runKeys(t, bin, 0, at("list")...)
		if strings.Contains(out, "alice") || !strings.Contains(out, "bob") {
			t.Errorf("list after revoke:\n%s", out)
		}
	}
	t.Run("keys file", func(t *testing.T) {
		run(t, "--keys-file", filepath.Join(t.TempDir(), "keys.json"))
	})
	t.Run("redis", func(t *testing.T) {
		run(t, "--redis", redistest.Start(t).URL())
	})
	t.Run("usage", func(t *testing.T) {
		_, errOut := runKeys(t, bin, -1, "list")
		if !strings.Contains(errOut, "--redis") || !strings.Contains(errOut, "--keys-file") {
			t.Errorf("no store: %q", errOut)
		}
		runKeys(t, bin, -1, "create", "--keys-file", filepath.Join(t.TempDir(), "k.json"), "--name", "x", "--expires", "soon")
		runKeys(t, bin, -1, "create", "--keys-file", filepath.Join(t.TempDir(), "k.json"))
	})
}

// serve --keys-file: requests need a key from the file, which the running
// gateway rereads when `keys` changes it.
func TestServeKeysFile(t *testing.T) {
	bin := buildBinary(t)
	keys := filepath.Join(t.TempDir(), "keys.json")
	addr := freeAddr(t)
	cmd, logs := startProcess(t, bin, "serve", "--http", addr, "--grpc", freeAddr(t), "--keys-file", keys)
	waitHTTP(t, "http://"+addr+"/readyz")
	ask := func(secret string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/completions", strings.NewReader(`{"model":"echo","prompt":"a b","max_tokens":2}`))
		req.Header.Set("Content-Type", "application/json")
		if secret != "" {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := ask(""); st != 401 {
		t.Errorf("no key: %d", st)
	}
	out, _ := runKeys(t, bin, 0, "create", "--keys-file", keys, "--name", "k")
	secret := strings.TrimSpace(out)
	if st := ask(secret); st != 200 {
		t.Errorf("a new key: %d\n%s", st, logs.String())
	}
	runKeys(t, bin, 0, "revoke", "--keys-file", keys, "k")
	if st := ask(secret); st != 401 {
		t.Errorf("a revoked key: %d", st)
	}
	if _, err := os.Stat(keys); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	waitExit(t, cmd, logs)
}
