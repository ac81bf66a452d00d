package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/streamgate/streamgate/cmd/internal/cli"
)

// README.md's quick start, as a newcomer runs it: the project's tracked
// files alone (no weights, no node_modules, no build outputs) in a fresh
// folder, built there with the module cache and no network, `serve` on
// free ports, the quick start's curl commands as README.md writes them,
// and `models list`'s offline advice with no weights anywhere.
func TestReadmeQuickStartFreshClone(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed (apt-get install -y git): the fresh clone is made from git's list of tracked files")
	}
	curl := requireTool(t, "curl", "/usr/bin/curl")
	root := moduleRoot(t)
	clone := t.TempDir()
	files, err := exec.Command(git, "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(files), "\x00"), "\x00") {
		st, err := os.Lstat(filepath.Join(root, f))
		if err != nil || !st.Mode().IsRegular() {
			continue // deleted in the working tree, a link, a submodule
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(clone, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		copyFile(t, filepath.Join(root, f), filepath.Join(clone, f))
	}

	// Build as README.md says, offline: GOPROXY=off fails on any module
	// not already in the module cache.
	bin := filepath.Join(t.TempDir(), "streamgate")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/streamgate")
	build.Dir = clone
	build.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=readonly", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build in the fresh clone: %v\n%s", err, out)
	}

	readme, err := os.ReadFile(filepath.Join(clone, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	quick := section(t, string(readme), "## Quick start")
	if !strings.Contains(quick, "go run ./cmd/streamgate serve") {
		t.Fatalf("the quick start no longer starts `go run ./cmd/streamgate serve`:\n%s", quick)
	}
	// The first shell block with curl in it: the three requests.
	var curls []string
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(quick, -1) {
		if strings.Contains(block[1], "curl ") {
			curls = strings.Split(strings.TrimSpace(block[1]), "\n")
			break
		}
	}
	if len(curls) != 3 {
		t.Fatalf("want the quick start's three curl commands, got %q", curls)
	}

	gw := startServe(t, bin) // built-in models only, empty model cache
	want := []struct{ readme, got []string }{
		// README's own words for each answer, then what the answer holds.
		{[]string{`{"model_name":"repeat_int32","model_version":"1","OUT":1,"IDX":0}`, "three events 200 ms apart"},
			[]string{`data: {"model_name":"repeat_int32","model_version":"1","OUT":1,"IDX":0}`, `"OUT":2,"IDX":1`, `"OUT":3,"IDX":2`}},
		{[]string{"one JSON answer"}, []string{`"outputs":[`, `"data":[1,2]`}},
		{[]string{"OpenAI chat chunks, then `data: [DONE]`"}, []string{`"object":"chat.completion.chunk"`, "hello", "there", "data: [DONE]"}},
	}
	for i, line := range curls {
		line = strings.ReplaceAll(line, "localhost:8080", gw.addr)
		args := cli.ShellWords(strings.TrimPrefix(line, "curl "))
		out, err := exec.Command(curl, append([]string{"-sS", "--fail-with-body"}, args...)...).CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", line, err, out)
			continue
		}
		for _, w := range want[i].readme {
			if !strings.Contains(strings.Join(strings.Fields(quick), " "), strings.Join(strings.Fields(w), " ")) {
				t.Errorf("the quick start no longer says %q about %s", w, curls[i])
			}
		}
		for _, w := range want[i].got {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s: the answer lacks %q:\n%s", line, w, out)
			}
		}
	}

	// Offline, with no weights: models list names both of stories260K's
	// files and the folder to put them in.
	cache := t.TempDir()
	list := exec.Command(bin, "models", "list")
	list.Dir = t.TempDir()
	list.Env = append(os.Environ(), "XDG_CACHE_HOME="+cache, "STREAMGATE_MODEL_DIR=")
	out, err := list.CombinedOutput()
	if err != nil {
		t.Fatalf("models list: %v\n%s", err, out)
	}
	for _, w := range []string{"stories260K.bin and tok512.bin", filepath.Join(cache, "streamgate", "models")} {
		if !strings.Contains(string(out), w) {
			t.Errorf("models list without weights lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(string(out), "go-build") {
		t.Errorf("models list names Go's build folders:\n%s", out)
	}
}

// section is the text of markdown section heading (a line of its own)
// up to the next heading of the same level.
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README.md has no %q", heading)
	}
	rest := doc[i+len(heading)+2:]
	if j := strings.Index(rest, "\n"+heading[:strings.IndexByte(heading, ' ')+1]); j >= 0 {
		rest = rest[:j]
	}
	return rest
}
