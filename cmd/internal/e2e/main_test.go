package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/engine/llama2"
	"github.com/streamgate/streamgate/gateway"
	"github.com/streamgate/streamgate/gateway/openai"
	"github.com/streamgate/streamgate/gateway/sse"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// requireTool returns the path of an external program the test needs. When
// it is missing the test is skipped, or fails if STREAMGATE_REQUIRE=1.
func requireTool(t *testing.T, name, path string) string {
	t.Helper()
	if st, err := os.Stat(path); err == nil && !st.IsDir() {
		return path
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	msg := fmt.Sprintf("%s not found at %s or on PATH (apt-get install -y %s)", name, path, name)
	if os.Getenv("STREAMGATE_REQUIRE") == "1" {
		t.Fatal(msg + "; STREAMGATE_REQUIRE=1 makes this a failure")
	}
	t.Skip(msg + "; set STREAMGATE_REQUIRE=1 to fail instead")
	return ""
}

// moduleRoot is the directory of streamgate's go.mod.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			bytes.Contains(data, []byte("module github.com/streamgate/streamgate\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod of github.com/streamgate/streamgate not found above the working directory")
		}
		dir = parent
	}
}

// freeAddr returns a loopback address nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		// The kernel may hand a port just closed out again: two addresses
		// asked for before either is bound (serve's --http and --grpc)
		// came back the same once in CI, and the second bind failed.
		if _, given := freeAddrsGiven.LoadOrStore(addr, true); !given {
			return addr
		}
	}
}

// freeAddrsGiven holds every address freeAddr has returned in this
// process, so that it never returns one twice.
var freeAddrsGiven sync.Map

// syncBuffer collects a process's or logger's output.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tail is the end of s, at most n bytes.
func tail(s string, n int) string {
	if len(s) > n {
		return "...\n" + s[len(s)-n:]
	}
	return s
}

// process is an external program started by a test, in a process group of
// its own so that its children (nginx workers, chromium renderers) are
// killed with it.
type process struct {
	name  string
	cmd   *exec.Cmd
	out   *syncBuffer
	done  chan struct{} // closed when Wait returned
	noise string        // output lines containing it are left out of the failure log
}

// startProcess starts cmd; t.Cleanup stops it with stopSig, then kills
// the whole group, and logs its output if the test failed.
func startProcess(t *testing.T, name string, cmd *exec.Cmd, stopSig syscall.Signal) *process {
	t.Helper()
	p := &process{name: name, cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		defer close(p.done)
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		pgid := cmd.Process.Pid
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Signal(stopSig)
			select {
			case <-p.done:
			case <-time.After(5 * time.Second):
			}
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL) // workers, renderers, helpers
		<-p.done
		if t.Failed() {
			out := p.out.String()
			if p.noise != "" {
				var kept []string
				for _, l := range strings.Split(out, "\n") {
					if !strings.Contains(l, p.noise) {
						kept = append(kept, l)
					}
				}
				out = strings.Join(kept, "\n")
			}
			t.Logf("%s (%s) output:\n%s", name, cmd.Path, tail(out, 8<<10))
		}
	})
	return p
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// storiesModel is the real llama2.c model the stack serves when its
// weights are found (as `streamgate serve` names it).
const storiesModel = "stories260k"

// storiesConfig is the engine config of storiesModel, or none when its
// weights are not found (a failure if STREAMGATE_REQUIRE=1).
func storiesConfig(t testing.TB) []*pb.ModelConfig {
	t.Helper()
	dir, looked := llama2.FindModelDir(filepath.Join(moduleRoot(t), "..", "shared", "models"))
	if dir == "" {
		if os.Getenv("STREAMGATE_REQUIRE") == "1" {
			t.Fatalf("stories260K weights not found in %v and STREAMGATE_REQUIRE=1", looked)
		}
		return nil
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return []*pb.ModelConfig{llama2.Config(storiesModel, filepath.Join(dir, llama2.CheckpointFile), filepath.Join(dir, llama2.TokenizerFile))}
}

// textModel is the model the tests ask for text: storiesModel when the
// stack serves it, else the built-in echo model.
func (s *testStack) textModel() string {
	for _, m := range s.eng.Models() {
		if m == storiesModel {
			return m
		}
	}
	return "echo"
}

// startStack is the stack of the browser, proxy and playground tests: it
// also serves storiesModel when its weights are found, and the gateway's
// HTTP server serves the browser test page at pagePath, so the page and
// the API share one origin. Each wrap, if any, wraps the gateway's
// handler.
func startStack(t *testing.T, wrap ...func(http.Handler) http.Handler) *testStack {
	t.Helper()
	return startPageStack(t, nil, wrap...)
}

// startPageStack is startStack with change, if not nil, adjusting the
// stack's Config first (TLS, the HTTP server's protocols).
func startPageStack(t *testing.T, change func(*stack.Config), wrap ...func(http.Handler) http.Handler) *testStack {
	t.Helper()
	opts := &gateway.Options{SSE: &sse.Options{KeepAlive: 15 * time.Second},
		ChatTemplates: map[string]string{storiesModel: openai.RawTemplate}}
	changes := []func(*stack.Config){func(c *stack.Config) {
		c.Engine.Backends[llama2.BackendName] = llama2.New
		c.Engine.Extra = append(c.Engine.Extra, storiesConfig(t)...)
		c.Handler = func(api http.Handler) http.Handler {
			for _, w := range wrap {
				api = w(api)
			}
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == pagePath {
					servePage(w, r)
					return
				}
				api.ServeHTTP(w, r)
			})
		}
	}}
	if change != nil {
		changes = append(changes, change)
	}
	return newStack(t, opts, changes...)
}

// httpClient is a client of its own per test, so no idle connection
// outlives the test.
func httpClient(t *testing.T) *http.Client {
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// post sends a JSON body; the caller closes the response.
func post(t *testing.T, ctx context.Context, c *http.Client, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept-Encoding", "gzip") // as browsers do: streams must still not be compressed
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return resp
}

// metric reads one series ("name" or `name{label="v"}`) from /metrics at
// base; a series not written yet is 0.
func metric(t testing.TB, c *http.Client, base, series string) float64 {
	t.Helper()
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metrics line %q: %v", line, err)
			}
			return f
		}
	}
	return 0
}

// sseEvent is one event of a text/event-stream body.
type sseEvent struct {
	ID, Data string
	At       time.Time // when its blank line was read
}

// sseReader parses an event stream the way a browser's EventSource does
// (the subset streamgate uses: id and data fields, comments), independently
// of the gateway's own sse package.
type sseReader struct{ br *bufio.Reader }

func newSSEReader(r io.Reader) *sseReader { return &sseReader{br: bufio.NewReader(r)} }

// next returns the next event, skipping comments; io.EOF at a clean end.
func (r *sseReader) next() (sseEvent, error) {
	var ev sseEvent
	var data []string
	fields := false
	for {
		line, err := r.br.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" && !fields {
				return ev, io.EOF
			}
			if err == io.EOF {
				return ev, fmt.Errorf("stream ended inside an event (%q): %w", line, io.ErrUnexpectedEOF)
			}
			return ev, err
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		switch {
		case line == "":
			if !fields {
				continue // the end of a comment-only block
			}
			if data == nil {
				return ev, errors.New("an event without data")
			}
			ev.Data, ev.At = strings.Join(data, "\n"), time.Now()
			return ev, nil
		case strings.HasPrefix(line, ":"):
			// a comment, e.g. ": keepalive"
		case strings.HasPrefix(line, "id:"):
			ev.ID, fields = strings.TrimPrefix(strings.TrimPrefix(line, "id:"), " "), true
		case strings.HasPrefix(line, "data:"):
			data, fields = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")), true
		default:
			return ev, fmt.Errorf("unexpected line %q", line)
		}
	}
}

// repeatTailBody is a repeat_int32 body of n responses delay ms apart, then
// ten a minute apart (the longest delay the model takes): a stream whose
// first n responses come while it has ten minutes to go.
func repeatTailBody(n, first, delay int) string {
	in := make([]string, n+10)
	d := make([]string, n+10)
	for i := range in {
		in[i] = strconv.Itoa(first + i)
		d[i] = strconv.Itoa(delay)
		if i >= n {
			d[i] = "60000"
		}
	}
	return `{"IN":[` + strings.Join(in, ",") + `],"DELAY":[` + strings.Join(d, ",") + `],"WAIT":0}`
}

// repeatBody is a repeat_int32 request: OUT values first, first+1, ...,
// the first after firstDelay ms and each next after delay ms.
func repeatBody(n, first int, firstDelay, delay int) string {
	in := make([]string, n)
	d := make([]string, n)
	for i := range n {
		in[i] = strconv.Itoa(first + i)
		d[i] = strconv.Itoa(delay)
	}
	d[0] = strconv.Itoa(firstDelay)
	return `{"IN":[` + strings.Join(in, ",") + `],"DELAY":[` + strings.Join(d, ",") + `],"WAIT":0}`
}
