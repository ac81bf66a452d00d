package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// example is one fenced JavaScript block of a README.
type example struct {
	where string // file:line of the opening fence
	code  string
}

// readmeExamples returns the ```js (or javascript, mjs) blocks of the
// READMEs, relative to the module root.
func readmeExamples(t *testing.T, root string, files ...string) []example {
	t.Helper()
	var out []example
	for _, name := range files {
		f, err := os.Open(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		var cur *example
		var code []string
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			fence := strings.TrimSpace(line)
			switch {
			case cur == nil && strings.HasPrefix(fence, "```"):
				lang, _, _ := strings.Cut(strings.TrimPrefix(fence, "```"), " ")
				if lang == "js" || lang == "javascript" || lang == "mjs" {
					cur, code = &example{where: fmt.Sprintf("%s:%d", name, n)}, nil
				} else if lang != "" {
					// another language: skip to its closing fence
					for sc.Scan() {
						n++
						if strings.TrimSpace(sc.Text()) == "```" {
							break
						}
					}
				}
			case cur != nil && fence == "```":
				cur.code = strings.Join(code, "\n")
				out = append(out, *cur)
				cur = nil
			case cur != nil:
				code = append(code, line)
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		if cur != nil {
			t.Fatalf("%s: unclosed code block", cur.where)
		}
	}
	return out
}

// readmeHost is the address the README examples talk to.
const readmeHost = "127.0.0.1:8080"

// TestReadmeJavaScriptExamples runs every JavaScript example of README.md
// and gateway/README.md against a real stack, as written but for the
// gateway's address: the browser ones in headless Chromium on a page of
// the gateway's origin, the Node ones (they import 'openai') with node and
// the openai package of cmd/internal/e2e/node. Each must run without throwing
// and show what the model answers.
func TestReadmeJavaScriptExamples(t *testing.T) {
	root := moduleRoot(t)
	examples := readmeExamples(t, root, "README.md", filepath.Join("gateway", "README.md"), filepath.Join("cmd", "streamgate", "README.md"))
	if len(examples) < 3 {
		t.Fatalf("found %d JavaScript examples, want the fetch, WebSocket and openai ones at least", len(examples))
	}
	s := startStack(t)
	// One browser for every browser example, started when there is one;
	// without chromium each browser example skips (or fails, in CI).
	var page *cdp
	browser := func(sub *testing.T) *cdp {
		sub.Helper()
		requireTool(sub, "chromium", "/usr/bin/chromium")
		if page == nil {
			page = startChromium(t).openPage(t)
		}
		return page
	}
	c := httpClient(t)
	for _, ex := range examples {
		t.Run(ex.where, func(t *testing.T) {
			code := strings.ReplaceAll(ex.code, readmeHost, s.addr)
			switch {
			case strings.Contains(code, "from 'openai'") || strings.Contains(code, `from "openai"`):
				runNodeExample(t, s, c, code)
			case strings.Contains(code, "sequence.start"):
				runBrowserExample(t, browser(t), s, code, func(r readmeRun) error {
					// The example's own logging: three partial results, then the end.
					for _, want := range []string{"mic heard hello ", "mic heard world, ", "mic heard how are you", "mic done final"} {
						if !r.has(want) {
							return fmt.Errorf("console.log lines %q, want %q", r.Logs, want)
						}
					}
					return nil
				})
			case strings.Contains(code, "new WebSocket("):
				runBrowserExample(t, browser(t), s, code, func(r readmeRun) error {
					// The example's own logging: c1's chat answer, g1 cancelled.
					if !r.has("c1 done final") || !r.has("g1 done cancelled") {
						return fmt.Errorf("console.log lines %q, want c1 done final and g1 done cancelled", r.Logs)
					}
					return nil
				})
			case strings.Contains(code, "fetch("):
				status, answer := chatAnswer(t, c, s, `{"model":"echo","messages":[{"role":"user","content":"hello from the browser"}]}`)
				runBrowserExample(t, browser(t), s, code, func(r readmeRun) error {
					if status != 200 || !strings.HasSuffix(r.Body, answer) || answer == "" {
						return fmt.Errorf("the page shows %q, the model answers %q (%d)", r.Body, answer, status)
					}
					return nil
				})
			default:
				t.Fatalf("no check for this example: teach %s what it must show\n%s", t.Name(), ex.code)
			}
		})
	}
}

// readmeRun is what a browser example did.
type readmeRun struct {
	Finished bool     // its code returned (or threw)
	Error    string   // what it threw
	Logs     []string // its console.log lines
	Body     string   // document.body's text afterwards
}

func (r readmeRun) has(line string) bool {
	for _, l := range r.Logs {
		if l == line {
			return true
		}
	}
	return false
}

// runBrowserExample runs code as a module would (top-level await allowed)
// on a fresh page of the gateway's origin, with console.log recorded,
// until check accepts what it did; uncaught errors fail the test.
func runBrowserExample(t *testing.T, page *cdp, s *testStack, code string, check func(readmeRun) error) {
	t.Helper()
	page.navigate(t, s.url+pagePath)
	page.eval(t, `document.body.replaceChildren(); true`, nil)
	page.takeProblems()
	wrapped := `window.readme = { finished: false, error: "", logs: [] };
(async () => {
  const console = { log: (...args) => window.readme.logs.push(args.map((a) => typeof a === "string" ? a : JSON.stringify(a)).join(" ")) };
  // On a real network the end of a body may come after its last event;
  // loopback delivers both at once. This fetch holds each body's end back
  // a moment, and errors it as Chromium does if the fetch is aborted
  // meanwhile, so an example that aborts too early fails every time.
  const fetch = async (url, init = {}) => {
    const resp = await window.fetch(url, init);
    if (!resp.body) return resp;
    const src = resp.body.getReader();
    const signal = init.signal;
    const body = new ReadableStream({
      async pull(ctl) {
        const { value, done } = await src.read();
        if (!done) {
          ctl.enqueue(value);
          return;
        }
        await new Promise((resolve) => {
          const timer = setTimeout(resolve, 200);
          signal?.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
        });
        if (signal?.aborted) ctl.error(signal.reason);
        else ctl.close();
      },
    });
    return new Response(body, { status: resp.status, statusText: resp.statusText, headers: resp.headers });
  };
` + code + `
})().then(
  () => { window.readme.finished = true; },
  (e) => { window.readme.finished = true; window.readme.error = e.name + ": " + e.message; });
true`
	page.eval(t, wrapped, nil)
	var r readmeRun
	var last error
	waitFor(t, "the example to show its answer", func() bool {
		page.eval(t, `({ ...window.readme, body: document.body.textContent })`, &r)
		if r.Error != "" {
			t.Fatalf("the example threw %s\n%s", r.Error, code)
		}
		last = check(r)
		return r.Finished && last == nil
	})
	if p := page.takeProblems(); len(p) > 0 {
		t.Errorf("the page logged problems:\n%s", strings.Join(p, "\n"))
	}
}

// runNodeExample runs code with node, resolving 'openai' from
// cmd/internal/e2e/node; its output must be echo's answer to "hello world".
func runNodeExample(t *testing.T, s *testStack, c *http.Client, code string) {
	t.Helper()
	modules := filepath.Join(moduleRoot(t), "cmd", "internal", "e2e", "node", "node_modules")
	missing := func(why string) {
		if os.Getenv("STREAMGATE_REQUIRE") == "1" {
			t.Fatalf("%s (STREAMGATE_REQUIRE=1)", why)
		}
		t.Skip(why)
	}
	if _, err := os.Stat(filepath.Join(modules, "openai", "package.json")); err != nil {
		missing("no node_modules: run `npm ci` in cmd/internal/e2e/node")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not installed")
	}
	dir := t.TempDir()
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "example.mjs"), []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), node, "example.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("node example.mjs: %v\n%s%s\n%s", err, out, stderr, code)
	}
	status, answer := chatAnswer(t, c, s, `{"model":"echo","messages":[{"role":"user","content":"hello world"}]}`)
	if status != 200 || string(out) != answer {
		t.Errorf("the example printed %q, the model answers %q (%d)", out, answer, status)
	}
}

// chatAnswer is the content of a non-streaming chat completion of body.
func chatAnswer(t *testing.T, c *http.Client, s *testStack, body string) (int, string) {
	t.Helper()
	resp := post(t, t.Context(), c, s.url+"/v1/chat/completions", body)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Choices []struct{ Message struct{ Content string } }
	}
	if err := json.Unmarshal(raw, &v); err != nil || len(v.Choices) != 1 {
		return resp.StatusCode, string(raw)
	}
	return resp.StatusCode, v.Choices[0].Message.Content
}
