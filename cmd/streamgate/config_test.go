package main

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/streamgate/streamgate/cmd/internal/cli"
)

var update = flag.Bool("update", false, "rewrite README.md's Configuration section from the flag definitions")

const (
	configBegin = "<!-- BEGIN configuration reference: generated from the flag definitions by `go test ./cmd/streamgate -run TestConfigurationReference -update`; do not edit -->\n"
	configEnd   = "<!-- END configuration reference -->\n"
)

// README.md's Configuration section is the reference of every flag and
// variable, as the flag definitions make it: a flag added, removed or
// changed anywhere fails this test until the section is regenerated.
func TestConfigurationReference(t *testing.T) {
	var ref bytes.Buffer
	if err := cli.WriteMarkdown(&ref, commands(), 2); err != nil {
		t.Fatal(err)
	}
	want := configBegin + ref.String() + configEnd
	path := "README.md" // cmd/streamgate/README.md; the top-level README links to it
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(readme), configBegin)
	_, after, ok2 := strings.Cut(rest, configEnd)
	if !ok1 || !ok2 {
		t.Fatalf("README.md has no Configuration section between the lines\n%s...\n%s", configBegin, configEnd)
	}
	got := configBegin + rest[:len(rest)-len(after)]
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(before+want+after), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Log("README.md's Configuration section rewritten")
		return
	}
	t.Errorf("README.md's Configuration section differs from the flag definitions (- README, + flags):\n%s\nRegenerate it with: go test ./cmd/streamgate -run TestConfigurationReference -update",
		lineDiff(got, want))
}

// lineDiff is a minimal line diff of a and b: the lines only a has
// (-) and only b has (+), in order, around the longest common
// subsequence.
func lineDiff(a, b string) string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	lcs := make([][]int, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out strings.Builder
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			i, j = i+1, j+1
		case i < len(x) && (j == len(y) || lcs[i+1][j] >= lcs[i][j+1]):
			out.WriteString("- " + x[i] + "\n")
			i++
		default:
			out.WriteString("+ " + y[j] + "\n")
			j++
		}
	}
	return out.String()
}

// `streamgate keys` runs beside the server whose keys it manages (the same
// shell, the same container): none of its flags may share a STREAMGATE_
// variable with another command's flag of a different meaning, or a value
// set for the server would reach the key (STREAMGATE_MODELS, a model
// directory for serve, once limited keys create to a model of that name).
func TestKeysVariablesDistinct(t *testing.T) {
	var ref bytes.Buffer
	if err := cli.WriteMarkdown(&ref, commands(), 2); err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for line := range strings.Lines(ref.String()) {
		_, rest, ok := strings.Cut(line, "`"+cli.EnvPrefix)
		if !ok || !strings.HasPrefix(line, "|") {
			continue
		}
		name, _, _ := strings.Cut(rest, "`")
		rows[name] = append(rows[name], line)
	}
	if len(rows) == 0 {
		t.Fatal("no variables found in the reference")
	}
	for name, lines := range rows {
		if len(lines) < 2 {
			continue
		}
		for _, l := range lines {
			if cols := strings.Split(l, " | "); len(cols) > 1 && strings.Contains(cols[1], "keys") {
				t.Errorf("%s%s names flags of different commands, one of them keys:\n%s", cli.EnvPrefix, name, strings.Join(lines, ""))
				break
			}
		}
	}
}
