package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/streamgate/streamgate/cmd/internal/stack"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// The tests here build the real binary and run it as a process.

func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "streamgate")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
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

// startProcess runs bin with args and returns it with a buffer of its log.
func startProcess(t *testing.T, bin string, args ...string) (*exec.Cmd, *syncBuffer) {
	return startWithModels(t, t.TempDir(), bin, args...) // no weights: fast start
}

func startWithModels(t *testing.T, modelDir, bin string, args ...string) (*exec.Cmd, *syncBuffer) {
	return startEnv(t, []string{"STREAMGATE_MODEL_DIR=" + modelDir}, bin, args...)
}

// startEnv runs bin with args and env in an empty working directory, with
// an empty model cache unless env sets XDG_CACHE_HOME, so that only the
// models the test provides are found.
func startEnv(t *testing.T, env []string, bin string, args ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var logBuf syncBuffer
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	cmd.Dir = t.TempDir()
	cmd.Env = append(testEnv(), "XDG_CACHE_HOME="+t.TempDir())
	cmd.Env = append(cmd.Env, env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, &logBuf
}

func waitHTTP(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never became ready", url)
}

func waitExit(t *testing.T, cmd *exec.Cmd, logs *syncBuffer) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, logs.String())
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("process did not exit after SIGTERM\n%s", logs.String())
	}
}

func TestServeStreamsThenDrainsOnSIGTERM(t *testing.T) {
	bin := buildBinary(t)
	httpAddr, grpcAddr := freeAddr(t), freeAddr(t)
	cmd, logs := startProcess(t, bin, "serve", "--http", httpAddr, "--grpc", grpcAddr, "--shutdown-grace", "5s")
	base := "http://" + httpAddr
	waitHTTP(t, base+"/readyz")

	resp, err := http.Post(base+"/v2/models/repeat_int32/generate_stream", "application/json",
		strings.NewReader(`{"IN":[7,8],"DELAY":[1,1],"WAIT":0}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(body, []byte(`"OUT":7`)) || !bytes.Contains(body, []byte(`"OUT":8`)) {
		t.Fatalf("generate_stream body %q", body)
	}

	// The engine is also reachable directly over gRPC.
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	md, err := pb.NewGRPCInferenceServiceClient(conn).ServerMetadata(context.Background(), &pb.ServerMetadataRequest{})
	if err != nil || md.GetName() != "streamgate" {
		t.Fatalf("engine metadata %v %v", md, err)
	}

	// A long stream is running when SIGTERM arrives: it gets the grace
	// period, then ends with an error event; the process exits 0.
	long, err := http.Post(base+"/v2/models/repeat_int32/generate_stream", "application/json",
		strings.NewReader(`{"IN":[1,2,3,4,5,6,7,8,9,10],"DELAY":[1000,1000,1000,1000,1000,1000,1000,1000,1000,1000],"WAIT":0}`))
	if err != nil {
		t.Fatal(err)
	}
	defer long.Body.Close()
	r := bufio.NewReader(long.Body)
	if line, err := r.ReadString('\n'); err != nil || line == "" {
		t.Fatalf("long stream: %q %v", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(r)
	if !bytes.Contains(rest, []byte(`"error"`)) {
		t.Fatalf("stream cut by shutdown did not end with an error event: %q", rest)
	}
	waitExit(t, cmd, logs)
	if !hasLog(logs.String(), "stopped") {
		t.Fatalf("no orderly stop in log:\n%s", logs.String())
	}
}

// modelDir finds the real weights: STREAMGATE_MODEL_DIR, else
// ../shared/models beside the checkout. Missing weights skip the test,
// unless STREAMGATE_REQUIRE=1 (CI) makes that a failure.
func modelDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("STREAMGATE_MODEL_DIR")
	if dir == "" {
		gomod, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(filepath.Dir(strings.TrimSpace(string(gomod))), "..", "shared", "models")
	}
	if _, err := os.Stat(filepath.Join(dir, "stories260K.bin")); err != nil {
		if os.Getenv("STREAMGATE_REQUIRE") == "1" {
			t.Fatalf("stories260K weights required but not found: %v", err)
		}
		t.Skipf("stories260K weights not found in %s", dir)
	}
	return dir
}

// TestServeRealModel streams real tokens from stories260k through the
// OpenAI routes of `streamgate serve`.
func TestServeRealModel(t *testing.T) {
	dir := modelDir(t)
	bin := buildBinary(t)
	httpAddr, grpcAddr := freeAddr(t), freeAddr(t)
	cmd, logs := startWithModels(t, dir, bin, "serve", "--http", httpAddr, "--grpc", grpcAddr)
	base := "http://" + httpAddr
	waitHTTP(t, base+"/readyz")

	post := func(body string) string {
		resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		return string(b)
	}
	// Greedy decoding of the golden prompt: the story of Lily.
	var whole struct {
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(post(`{"model":"stories260k","prompt":"Once upon a time","max_tokens":30,"temperature":0}`)), &whole); err != nil {
		t.Fatal(err)
	}
	if len(whole.Choices) != 1 || !strings.HasPrefix(whole.Choices[0].Text, ", there was a little girl named Lily.") || whole.Choices[0].FinishReason != "length" {
		t.Fatalf("greedy completion %+v", whole)
	}
	// The same request streamed gives the same text, piece by piece.
	stream := post(`{"model":"stories260k","prompt":"Once upon a time","max_tokens":30,"temperature":0,"stream":true}`)
	var text strings.Builder
	pieces := 0
	for _, line := range strings.Split(stream, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct{ Text string } `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		for _, c := range chunk.Choices {
			text.WriteString(c.Text)
			if c.Text != "" {
				pieces++
			}
		}
	}
	if text.String() != whole.Choices[0].Text || pieces < 10 || !strings.HasSuffix(stream, "data: [DONE]\n\n") {
		t.Fatalf("streamed %d pieces %q, want %q", pieces, text.String(), whole.Choices[0].Text)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitExit(t, cmd, logs)
}

// --http and --grpc take a port alone (loopback) as other servers'
// --port does.
func TestServePortAlone(t *testing.T) {
	bin := buildBinary(t)
	_, httpPort, _ := net.SplitHostPort(freeAddr(t))
	_, grpcPort, _ := net.SplitHostPort(freeAddr(t))
	cmd, logs := startProcess(t, bin, "serve", "--http", httpPort, "--grpc", grpcPort)
	waitHTTP(t, "http://127.0.0.1:"+httpPort+"/readyz")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitExit(t, cmd, logs)
}

func TestEngineSIGTERM(t *testing.T) {
	bin := buildBinary(t)
	addr := freeAddr(t)
	cmd, logs := startProcess(t, bin, "engine", "--grpc", addr)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewGRPCInferenceServiceClient(conn)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ready, err := client.ServerReady(context.Background(), &pb.ServerReadyRequest{})
		if err == nil && ready.GetReady() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine never ready\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitExit(t, cmd, logs)
}

func TestFlagsAndEnv(t *testing.T) {
	t.Setenv("STREAMGATE_WS_MAX_IN_FLIGHT", "128")
	gcfg, err := stack.Parse("gateway", nil)
	if err != nil || gcfg.Gateway.WSMaxInFlight != 128 || gcfg.Gateway.QueueBytes != 64<<10 {
		t.Fatalf("gateway env: %+v %v", gcfg, err)
	}
	gcfg, err = stack.Parse("gateway", []string{"--ws-max-in-flight", "7", "--queue-bytes", "256"})
	if err != nil || gcfg.Gateway.WSMaxInFlight != 7 || gcfg.Gateway.QueueBytes != 256 {
		t.Fatalf("gateway flags: %+v %v", gcfg, err)
	}
	t.Setenv("STREAMGATE_GRPC", "127.0.0.1:9")
	cfg, err := stack.Parse("engine", nil)
	if err != nil || cfg.Engine.GRPC != "127.0.0.1:9" {
		t.Fatalf("env not read: %+v %v", cfg, err)
	}
	cfg, err = stack.Parse("engine", []string{"--grpc", "127.0.0.1:10"})
	if err != nil || cfg.Engine.GRPC != "127.0.0.1:10" {
		t.Fatalf("flag does not win over env: %+v %v", cfg, err)
	}
	t.Setenv("STREAMGATE_SHUTDOWN_GRACE", "soon")
	if _, err := stack.Parse("engine", nil); err == nil || !strings.Contains(err.Error(), "STREAMGATE_SHUTDOWN_GRACE") {
		t.Fatalf("bad env value: %v", err)
	}
	if err := run(context.Background(), []string{"nope"}, io.Discard, io.Discard); err == nil {
		t.Fatal("unknown command accepted")
	}
}

// syncBuffer is a bytes.Buffer safe for the process's writers and the test.
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

// testEnv is the environment without the variables that choose models or
// telemetry exporters.
func testEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k != "XDG_CACHE_HOME" && k != "HF_ENDPOINT" && k != "STREAMGATE_HUB" && !strings.HasPrefix(k, "STREAMGATE_MODEL") &&
			!strings.HasPrefix(k, "OTEL_") {
			env = append(env, kv)
		}
	}
	return env
}

// logRecords are the JSON log lines of out whose message is msg,
// decoded; other lines are skipped.
func logRecords(out, msg string) []map[string]any {
	var recs []map[string]any
	for _, line := range strings.Split(out, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			recs = append(recs, rec)
		}
	}
	return recs
}

// hasLog reports whether out has a JSON log line with the message msg
// and the string attributes attrs (key, value, ...).
func hasLog(out, msg string, attrs ...string) bool {
	for _, rec := range logRecords(out, msg) {
		ok := true
		for i := 0; i+1 < len(attrs); i += 2 {
			ok = ok && rec[attrs[i]] == attrs[i+1]
		}
		if ok {
			return true
		}
	}
	return false
}
