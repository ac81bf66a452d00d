// Package coretriton runs a Triton stand-in on grpc core for tests: a
// Python server (server.py) on Debian's python3-grpcio, which links the
// same C core as Triton's server, serving inference.GRPCInferenceService
// from stubs generated at test time out of streamgate's proto/. Its models
// are repeat_int32 and square_int32 (decoupled, with Triton's semantics
// and in-band errors) and blob_uint8 (large messages); see server.py.
//
// Start runs it with Triton's default channel arguments (TritonArgs) plus
// the test's own, so keepalive enforcement, GOAWAY, stream limits and
// flow-control windows are grpc core's.
//
// It needs /usr/bin/python3 with python3-grpcio and python3-protobuf, and
// protoc with grpc_python_plugin (protobuf-compiler,
// protobuf-compiler-grpc). A test that lacks them is skipped, or fails when
// STREAMGATE_REQUIRE is set (as CI does).
package coretriton

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

//go:embed server.py
var serverPy []byte

// Python is the interpreter whose python3-grpcio the server runs on.
const Python = "/usr/bin/python3"

// TritonArgs are the channel arguments Triton's server sets by default
// (its --grpc-* flags): keepalive time 7,200 s and timeout 20 s, no pings
// without calls, at most 2 pings without data, pings without data at
// least 300 s apart, GOAWAY "too_many_pings" after 2 strikes, no message
// size limit.
func TritonArgs() map[string]any {
	return map[string]any{
		"grpc.keepalive_time_ms":                       7200000,
		"grpc.keepalive_timeout_ms":                    20000,
		"grpc.keepalive_permit_without_calls":          0,
		"grpc.http2.max_pings_without_data":            2,
		"grpc.http2.min_ping_interval_without_data_ms": 300000,
		"grpc.http2.max_ping_strikes":                  2,
		"grpc.max_send_message_length":                 -1,
		"grpc.max_receive_message_length":              -1,
	}
}

// TLSFiles are the server's PEM files. With CA set, clients must present
// a certificate it signed (mutual TLS). The key pair is read again at the
// first handshake after either file changes (certificate rotation).
type TLSFiles struct {
	Cert string `json:"cert"`
	Key  string `json:"key"`
	CA   string `json:"ca,omitempty"`
}

// Options configure a server.
type Options struct {
	// Args are channel arguments set over TritonArgs.
	Args map[string]any
	// TLS, if set, makes it serve TLS.
	TLS *TLSFiles
	// InbandCancel advertises the extension "streamgate_cancel" and
	// honours streamgate's in-band cancel, as streamgate's engine does,
	// so that the gateway shares pooled streams with it.
	InbandCancel bool
}

// Server is a running stand-in.
type Server struct {
	Addr string // 127.0.0.1:port

	t    testing.TB
	opts Options
	dir  string // stubs and server.py
	port int

	mu     sync.Mutex
	cmd    *exec.Cmd
	read   chan struct{} // closed when the current process's output is read
	events []string      // its lines after PORT, across restarts
	change chan struct{} // closed and replaced at each new line
}

// Require skips t, or fails it when STREAMGATE_REQUIRE is set,
// unless python3-grpcio, python3-protobuf, protoc and grpc_python_plugin
// are installed.
func Require(t testing.TB) {
	t.Helper()
	var missing []string
	if err := exec.Command(Python, "-c", "import grpc, google.protobuf").Run(); err != nil {
		missing = append(missing, "python3-grpcio python3-protobuf")
	}
	for _, p := range []string{"protoc", "grpc_python_plugin"} {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, map[string]string{"protoc": "protobuf-compiler", "grpc_python_plugin": "protobuf-compiler-grpc"}[p])
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := "grpc core stand-in needs: apt-get install -y " + strings.Join(missing, " ")
	if os.Getenv("STREAMGATE_REQUIRE") != "" {
		t.Fatal(msg + "; STREAMGATE_REQUIRE makes this a failure")
	}
	t.Skip(msg + "; set STREAMGATE_REQUIRE=1 to fail instead")
}

// protoDir is streamgate's proto/ folder.
func protoDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "proto")
}

// Start generates the stubs, starts a server with o on a free port and
// stops it when the test ends. It skips or fails t as Require does.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	Require(t)
	dir := t.TempDir()
	out, err := exec.Command("protoc", "-I", protoDir(), "--python_out="+dir, "--grpc_out="+dir,
		"--plugin=protoc-gen-grpc="+mustLook(t, "grpc_python_plugin"),
		"grpc_service.proto", "model_config.proto").CombinedOutput()
	if err != nil {
		t.Fatalf("protoc: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "server.py"), serverPy, 0o644); err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, opts: o, dir: dir, change: make(chan struct{})}
	s.start()
	t.Cleanup(s.Stop)
	return s
}

func mustLook(t testing.TB, name string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// start runs the server on s.port (0: a free one) and waits for its PORT.
func (s *Server) start() {
	t := s.t
	t.Helper()
	args := TritonArgs()
	for k, v := range s.opts.Args {
		args[k] = v
	}
	var opts [][2]any
	for k, v := range args {
		opts = append(opts, [2]any{k, v})
	}
	cfg, err := json.Marshal(map[string]any{"port": s.port, "options": opts, "tls": s.opts.TLS, "inband_cancel": s.opts.InbandCancel})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(Python, "-u", filepath.Join(s.dir, "server.py"), string(cfg))
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "PYTHONPATH="+s.dir)
	cmd.Stderr = &logWriter{t: t}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	port := make(chan int, 1)
	read := make(chan struct{})
	go s.readLines(stdout, port, read)
	select {
	case p, ok := <-port:
		if !ok {
			_ = cmd.Wait()
			t.Fatal("grpc core stand-in exited before serving (its stderr is in the log)")
		}
		s.mu.Lock()
		s.port, s.Addr, s.cmd, s.read = p, fmt.Sprintf("127.0.0.1:%d", p), cmd, read
		s.mu.Unlock()
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-read
		_ = cmd.Wait()
		t.Fatal("grpc core stand-in did not start within 60s")
	}
}

// readLines sends the PORT line's number on port (or closes it) and keeps
// every later line as an event, until the process's output ends.
func (s *Server) readLines(r io.Reader, port chan<- int, done chan<- struct{}) {
	defer close(done)
	sc := bufio.NewScanner(r)
	sent := false
	for sc.Scan() {
		line := sc.Text()
		if !sent {
			var p int
			if _, err := fmt.Sscanf(line, "PORT %d", &p); err == nil {
				port <- p
				sent = true
			}
			continue
		}
		s.mu.Lock()
		s.events = append(s.events, line)
		close(s.change)
		s.change = make(chan struct{})
		s.mu.Unlock()
	}
	if !sent {
		close(port)
	}
}

// Events returns the event lines so far ("START id peer", "CANCEL id",
// "RPCCANCEL id,id", "RELOAD").
func (s *Server) Events() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.events...)
}

// WaitEvent waits until an event line satisfies match, or ctx ends.
func (s *Server) WaitEvent(ctx context.Context, match func(line string) bool) error {
	seen := 0
	for {
		s.mu.Lock()
		lines, change := s.events[seen:], s.change
		seen = len(s.events)
		s.mu.Unlock()
		for _, l := range lines {
			if match(l) {
				return nil
			}
		}
		select {
		case <-change:
		case <-ctx.Done():
			return fmt.Errorf("grpc core stand-in: no such event (%w); events: %q", ctx.Err(), s.Events())
		}
	}
}

// Peers returns the client addresses stream requests came from so far,
// one per connection.
func (s *Server) Peers() []string {
	seen := map[string]bool{}
	var out []string
	for _, l := range s.Events() {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "START" && !seen[f[2]] {
			seen[f[2]] = true
			out = append(out, f[2])
		}
	}
	return out
}

// Cancelled reports whether line says the server saw request id
// cancelled, in band or with its RPC.
func Cancelled(id string) func(string) bool {
	return func(line string) bool {
		word, rest, _ := strings.Cut(line, " ")
		switch word {
		case "CANCEL":
			return rest == id
		case "RPCCANCEL":
			for _, r := range strings.Split(rest, ",") {
				if r == id {
					return true
				}
			}
		}
		return false
	}
}

// Signal sends sig to the server process (syscall.SIGSTOP hangs it,
// syscall.SIGCONT resumes it).
func (s *Server) Signal(sig syscall.Signal) {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd != nil {
		if err := cmd.Process.Signal(sig); err != nil {
			s.t.Errorf("signal %v: %v", sig, err)
		}
	}
}

// Stop ends the server: SIGTERM (graceful, 5 s grace), then SIGKILL if it
// is still running 15 s later. A stopped server may Restart.
func (s *Server) Stop() {
	cmd, read := s.take()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	waited := make(chan struct{})
	go func() {
		<-read
		_ = cmd.Wait()
		close(waited)
	}()
	select {
	case <-waited:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-waited
	}
}

// Kill ends the server at once (SIGKILL), as a crash would.
func (s *Server) Kill() {
	cmd, read := s.take()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-read
	_ = cmd.Wait()
}

// take returns the running process and the channel closed when its
// output is read, and forgets them; nil when none runs.
func (s *Server) take() (*exec.Cmd, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd, read := s.cmd, s.read
	s.cmd = nil
	return cmd, read
}

// Restart starts the server again on the same port, after Stop or Kill.
func (s *Server) Restart() {
	s.t.Helper()
	s.start()
}

// logWriter passes the server's stderr to the test log.
type logWriter struct{ t testing.TB }

func (w *logWriter) Write(p []byte) (int, error) {
	w.t.Logf("grpc core stand-in: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
