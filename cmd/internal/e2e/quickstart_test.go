package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
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

	// The playground of the fresh build, in headless Chromium, with the
	// weights' folder given by STREAMGATE_MODEL_DIR: stories260k answers
	// a chat token by token, first on an open gateway, then on one with
	// API keys, where the page asks for a key in words until one is
	// entered.
	t.Run("playground", func(t *testing.T) {
		requireTool(t, "chromium", "/usr/bin/chromium")
		models := storiesDir(t)
		browser := startChromium(t)
		t.Run("open", func(t *testing.T) {
			gw := startServeModels(t, bin, models)
			p := &playground{t: t, page: browser.openPage(t)}
			p.page.load(t, gw.url+"/", `[...document.getElementById("model").options].some((o) => o.value === "stories260k")`)
			p.js(playgroundHelpers, nil)
			walkStories(p)
		})
		t.Run("keys", func(t *testing.T) {
			keys := filepath.Join(t.TempDir(), "keys.json")
			key := strings.TrimSpace(runTool(t, t.TempDir(), nil, bin, "keys", "create", "--keys-file", keys, "--name", "newcomer"))
			gw := startServeModels(t, bin, models, "--keys-file", keys)
			p := &playground{t: t, page: browser.openPage(t)}
			const asks = "This gateway needs an API key: enter it in the API key box above."
			p.page.load(t, gw.url+"/", `document.getElementById("model-info").textContent === `+strconv.Quote(asks))
			p.js(playgroundHelpers, nil)
			var ids []string
			if p.js("pgt.send()", &ids); len(ids) != 0 {
				t.Errorf("Send without a key started %v", ids)
			}
			var info string
			if p.js(`document.getElementById("model-info").textContent`, &info); info != asks {
				t.Errorf("after Send without a key the page says %q", info)
			}
			p.set("api-key", key)
			waitFor(t, "the models to load with the key", func() bool {
				var ok bool
				p.js(`[...document.getElementById("model").options].some((o) => o.value === "stories260k")`, &ok)
				return ok
			})
			walkStories(p)
		})
	})
}

// walkStories sends stories260k a chat from the playground, paced by
// delay_ms, over fetch, WebSocket and EventSource, and checks that each
// answer streams: text on the card and several arrivals (a rate and a
// chart), not one batch.
func walkStories(p *playground) {
	t := p.t
	t.Helper()
	p.set("model", "stories260k")
	p.set("prompt", "Once upon a time")
	p.set("max-tokens", "8")
	// 100 ms apart: the page would have to stall for most of a second to
	// see the 8 tokens as one batch.
	p.set("delay-ms", "100")
	if b := p.body(); !strings.Contains(b, `"delay_ms": 100`) || !strings.Contains(b, `"model": "stories260k"`) {
		t.Fatalf("the request body lacks the model or delay_ms: %s", b)
	}
	// fetch first: its answer tells the page that streams are resumable,
	// which EventSource needs.
	for _, transport := range []string{"fetch", "ws", "eventsource"} {
		p.js(fmt.Sprintf("pgt.pick(%q, %q)", "transport", transport), nil)
		id := p.send()[0]
		c := p.waitCard(id, "done", finished)
		if c.State != "done" || c.Tokens < 2 || c.Rate == "–" || c.Bars == 0 || strings.TrimSpace(c.Text) == "" {
			t.Errorf("%s: %+v", transport, c)
		}
		t.Logf("%s: %d tokens at %s, %q", transport, c.Tokens, c.Rate, c.Text)
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
