package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A real `go test -json` run of a small module: its result lines pass
// through, a failed test's output shows, and the summary names each skip
// reason once with its tests.
func TestSummary(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.21\n")
	write("m_test.go", `package m

import "testing"

func TestPass(t *testing.T) {}
func TestNoRedis(t *testing.T) { t.Skip("redis-server not found: install redis-server") }
func TestNoRedisEither(t *testing.T) { t.Skip("redis-server not found: install redis-server") }
func TestNoWeights(t *testing.T) { t.Log("looked"); t.Skipf("stories260K weights not found in %s", "x") }
func TestBroken(t *testing.T) { t.Error("it broke") }
`)
	cmd := exec.Command("go", "test", "-json", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOPROXY=off", "GOTOOLCHAIN=local")
	raw, _ := cmd.Output() // exits 1: TestBroken fails
	var out bytes.Buffer
	failed, err := run(bytes.NewReader(raw), &out)
	if err != nil || !failed {
		t.Fatalf("run: failed %v, err %v\n%s", failed, err, raw)
	}
	got := out.String()
	for _, want := range []string{
		"it broke",
		"FAIL\texample.com/m",
		"3 tests skipped, for 2 reasons",
		"    2  redis-server not found: install redis-server\n       (example.com/m.TestNoRedis, example.com/m.TestNoRedisEither)\n",
		"    1  looked / stories260K weights not found in x\n       (example.com/m.TestNoWeights)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "TestPass") || strings.Contains(got, "=== RUN") {
		t.Errorf("a passing test's lines show, as plain go test would not:\n%s", got)
	}
}

func TestSummaryNoSkips(t *testing.T) {
	in := `{"Action":"start","Package":"p"}
{"Action":"output","Package":"p","Output":"ok  \tp\t0.1s\n"}
{"Action":"pass","Package":"p"}
`
	var out bytes.Buffer
	failed, err := run(strings.NewReader(in), &out)
	if err != nil || failed || out.String() != "ok  \tp\t0.1s\nno test skipped\n" {
		t.Errorf("failed %v, err %v, output %q", failed, err, out.String())
	}
}
