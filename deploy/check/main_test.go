package check

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// root is the repository's root, two levels up.
var root string

// bin is the streamgate binary TestMain builds from the repository.
var bin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	abs, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	root = abs
	dir, err := os.MkdirTemp("", "streamgate-check-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin = filepath.Join(dir, "streamgate")
	build := exec.Command("go", "build", "-o", bin, "./cmd/streamgate")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build ./cmd/streamgate: %v\n%s", err, out)
		return 1
	}
	before := runtime.NumGoroutine()
	code := m.Run()
	if code == 0 {
		code = checkLeaks(before)
	}
	return code
}

// checkLeaks fails the run when goroutines the tests started outlive them
// (HTTP clients' idle connections are closed first).
func checkLeaks(before int) int {
	http.DefaultClient.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			fmt.Fprintf(os.Stderr, "leaked goroutines: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
			return 1
		}
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond)
	}
	return 0
}

// requireTool returns the path of a tool: $envPath when set, else name on
// PATH. When it is missing the test is skipped, or fails when
// STREAMGATE_REQUIRE=1 (CI, .ci/run).
func requireTool(t *testing.T, name, envPath, kind, install string) string {
	t.Helper()
	if p := os.Getenv(envPath); p != "" && envPath != "" {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	msg := fmt.Sprintf("%s not on PATH (%s)", name, install)
	if os.Getenv("STREAMGATE_REQUIRE") == "1" {
		t.Fatal(msg + "; STREAMGATE_REQUIRE=1 makes this a failure")
	}
	t.Skip(msg + "; set STREAMGATE_REQUIRE=1 to fail instead")
	return ""
}

// requireModels returns the directory of the llama2.c weights
// stories260K.bin and tok512.bin ($STREAMGATE_MODEL_DIR). When they are
// missing the test is skipped, or fails when STREAMGATE_REQUIRE=1
// (CI).
func requireModels(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("STREAMGATE_MODEL_DIR")
	for _, f := range []string{"stories260K.bin", "tok512.bin"} {
		if _, err := os.Stat(filepath.Join(dir, f)); dir == "" || err != nil {
			msg := fmt.Sprintf("llama2.c weights %s not in STREAMGATE_MODEL_DIR=%q", f, dir)
			if os.Getenv("STREAMGATE_REQUIRE") == "1" {
				t.Fatal(msg + "; STREAMGATE_REQUIRE=1 makes this a failure")
			}
			t.Skip(msg + "; set STREAMGATE_REQUIRE=1 to fail instead")
		}
	}
	return dir
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// syncBuffer is a process' log, written by its output copier and read by
// the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// process is a started command; wait returns its exit error once.
type process struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{}
	err  error
}

// start runs path with args in an empty directory with an empty model
// cache and no weights; the test's cleanup kills it if it still runs.
func start(t *testing.T, path string, args ...string) *process {
	t.Helper()
	return startEnv(t, nil, path, args...)
}

// startEnv is start with more environment variables (which win).
func startEnv(t *testing.T, env []string, path string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(path, args...), log: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.Dir = t.TempDir()
	p.cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+t.TempDir(), "STREAMGATE_MODEL_DIR="+t.TempDir())
	p.cmd.Env = append(p.cmd.Env, env...)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", filepath.Base(path), p.log.String())
		}
	})
	return p
}

// waitExit waits for p to end, at most limit.
func (p *process) waitExit(t *testing.T, limit time.Duration) {
	t.Helper()
	select {
	case <-p.done:
		if p.err != nil {
			t.Errorf("%s: %v", p.cmd.Path, p.err)
		}
	case <-time.After(limit):
		t.Fatalf("%s did not exit within %v", p.cmd.Path, limit)
	}
}

// waitReady polls url until it answers 200 (the server is starting).
func waitReady(t *testing.T, p *process, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			t.Fatalf("exited before %s was ready: %v", url, p.err)
		default:
		}
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never became ready", url)
}

// reference is streamgate's configuration reference (`streamgate help
// config`, the same table as README.md's Configuration section): per
// command, its flags (true: the flag takes a value) and the environment
// variables it reads.
type reference struct {
	flags map[string]map[string]bool
	env   map[string]map[string]bool
}

var (
	refOnce sync.Once
	ref     reference
	refErr  error
)

// entryLine is a flag or variable's first line: "  --name [type]  [cmds]"
// or "  NAME  [cmds]".
var entryLine = regexp.MustCompile(`^  (--[a-z0-9-]+|[A-Z][A-Z0-9_]+)( \S+)?\s+\[([a-z ,]+)\]$`)

// configReference runs `streamgate help config` and reads its entries.
func configReference(t *testing.T) reference {
	t.Helper()
	refOnce.Do(func() {
		out, err := exec.Command(bin, "help", "config").Output()
		if err != nil {
			refErr = fmt.Errorf("streamgate help config: %v", err)
			return
		}
		ref = reference{flags: map[string]map[string]bool{}, env: map[string]map[string]bool{}}
		add := func(m map[string]map[string]bool, cmds []string, name string, v bool) {
			for _, c := range cmds {
				if m[c] == nil {
					m[c] = map[string]bool{}
				}
				m[c][name] = v
			}
		}
		var cmds []string // of the entry being read
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			line := sc.Text()
			if m := entryLine.FindStringSubmatch(line); m != nil {
				cmds = strings.Split(m[3], ", ")
				if strings.HasPrefix(m[1], "--") {
					add(ref.flags, cmds, strings.TrimPrefix(m[1], "--"), m[2] != "")
				} else {
					add(ref.env, cmds, m[1], true)
				}
				continue
			}
			if i := strings.Index(line, "env STREAMGATE_"); i >= 0 && strings.HasPrefix(line, "      ") {
				add(ref.env, cmds, strings.Fields(line[i+len("env "):])[0], true)
			}
		}
		if len(ref.flags["gateway"]) < 20 || len(ref.env["gateway"]) < 20 {
			refErr = fmt.Errorf("streamgate help config: read %d gateway flags, %d variables: has its format changed?\n%s",
				len(ref.flags["gateway"]), len(ref.env["gateway"]), out)
		}
	})
	if refErr != nil {
		t.Fatal(refErr)
	}
	return ref
}
