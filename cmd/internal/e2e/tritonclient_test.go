package e2e

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"

	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/engine/builtin"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// NVIDIA's tritonclient (grpc, grpc.aio, http) and the parts of Triton's
// QA that the engine's models can run, against what `streamgate serve`
// runs: tritonclient.grpc on the engine's gRPC port, tritonclient.http on
// the gateway. The client's source, Triton's QA tests and a setup script
// on Debian packages only come from a folder beside the checkout
// (STREAMGATE_TRITONCLIENT_DIR; CI: ../shared/tritonclient). Without it,
// or without Debian's python3 packages, the test is skipped, or fails
// when STREAMGATE_REQUIRE is set. Users get tritonclient
// from PyPI (pip install tritonclient[all]).

// tritonclientDir is the folder of NVIDIA's client and Triton's QA tests.
func tritonclientDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("STREAMGATE_TRITONCLIENT_DIR")
	if dir == "" {
		dir = filepath.Join(moduleRoot(t), "..", "shared", "tritonclient")
	}
	if _, err := os.Stat(filepath.Join(dir, "setup.sh")); err != nil {
		msg := "NVIDIA's tritonclient not found (set STREAMGATE_TRITONCLIENT_DIR): " + err.Error()
		if os.Getenv("STREAMGATE_REQUIRE") != "" {
			t.Fatal(msg + "; STREAMGATE_REQUIRE makes this a failure")
		}
		t.Skip(msg)
	}
	return dir
}

func TestTritonClient(t *testing.T) {
	dir := tritonclientDir(t)
	build := t.TempDir()
	setup := exec.Command("bash", filepath.Join(dir, "setup.sh"))
	setup.Env = append(os.Environ(), "TRITONCLIENT_BUILD="+build)
	if out, err := setup.CombinedOutput(); err != nil {
		msg := "tritonclient setup.sh: " + err.Error() + "\n" + string(out)
		if os.Getenv("STREAMGATE_REQUIRE") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	// repeat_int32_non_decoupled is repeat_int32 with decoupled: false,
	// as L0_grpc_state_cleanup's test.sh makes it (its NonDecoupledTest
	// and L0_decoupled's use it).
	nonDecoupled := func(c *stack.Config) {
		cfg := builtinConfig(t, "repeat_int32")
		cfg.Name = "repeat_int32_non_decoupled"
		cfg.ModelTransactionPolicy.Decoupled = false
		c.Engine.Extra = append(c.Engine.Extra, cfg)
	}
	s := newStack(t, nil, nonDecoupled)
	qa := filepath.Join(dir, "vendor", "server", "qa")
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	scripts := filepath.Join(here, "testdata", "tritonclient")
	examples := filepath.Join(dir, "vendor", "client", "examples")
	decoupled := func(tests ...string) []string {
		args := []string{filepath.Join(scripts, "qa_run.py"), "decoupled_test.py"}
		for _, name := range tests {
			args = append(args, "DecoupledTest."+name)
		}
		return args
	}
	runs := []struct {
		name string
		dir  string
		args []string
		env  []string
		// own, if set, gives the run an engine of its own changed by it,
		// run beside the others: L0_decoupled's timed runs need
		// repeat_int32's only instance to themselves, and take minutes.
		own func(*engine.Options)
	}{
		{"clients", scripts, []string{"clients.py"}, nil, nil},
		// L0_decoupled on repeat_int32 (its other trials are ensembles of
		// backends the engine lacks).
		{"L0_decoupled", filepath.Join(qa, "L0_decoupled"), decoupled(
			"test_one_to_none", "test_one_to_one", "test_no_streaming", "test_wrong_shape"),
			[]string{"STREAMGATE_QA_MODELS=repeat_int32"}, nil},
		{"L0_decoupled_non_decoupled", filepath.Join(qa, "L0_decoupled"), []string{filepath.Join(scripts, "qa_run.py"), "decoupled_test.py",
			"NonDecoupledTest"}, []string{"STREAMGATE_QA_NON_DECOUPLED=repeat_int32_non_decoupled"}, nil},
		{"L0_decoupled_one_to_many", filepath.Join(qa, "L0_decoupled"), decoupled("test_one_to_many"),
			[]string{"STREAMGATE_QA_MODELS=repeat_int32"}, func(*engine.Options) {}},
		// The expected orders depend on when each response is written:
		// nothing else may use the engine meanwhile.
		{"L0_decoupled_response_order", filepath.Join(qa, "L0_decoupled"), decoupled("test_response_order"),
			[]string{"STREAMGATE_QA_MODELS=repeat_int32"}, func(*engine.Options) {}},
		// Triton's test.sh runs this one with every response write
		// delayed by 2s (TRITONSERVER_DELAY_GRPC_RESPONSE, read by the
		// server; the test checks that it is set), so that responses
		// queue behind the writer.
		{"L0_decoupled_one_to_multi_many", filepath.Join(qa, "L0_decoupled"), decoupled("test_one_to_multi_many"),
			[]string{"STREAMGATE_QA_MODELS=repeat_int32", "TRITONSERVER_DELAY_GRPC_RESPONSE=" + strconv.Itoa(int(qaResponseDelay.Milliseconds()))},
			func(o *engine.Options) { o.ResponseDelay = qaResponseDelay }},
		// L0_grpc_state_cleanup's decoupled tests and the non-decoupled
		// stream one (the others need custom_zero_1_float32, a restricted
		// protocol or a server to kill).
		{"L0_grpc_state_cleanup", filepath.Join(qa, "L0_grpc_state_cleanup"), []string{filepath.Join(scripts, "qa_run.py"), "cleanup_test.py",
			"CleanUpTest.test_decoupled_infer", "CleanUpTest.test_decoupled_cancellation", "CleanUpTest.test_decoupled_timeout",
			"CleanUpTest.test_non_decoupled_streaming_multi_response"}, nil, nil},
		{"sequence_stream", examples, []string{"simple_grpc_sequence_stream_infer_client.py", "-u", s.EngineAddr}, nil, nil},
		{"sequence_stream_dyna", examples, []string{"simple_grpc_sequence_stream_infer_client.py", "-u", s.EngineAddr, "-d"}, nil, nil},
		{"sequence_sync", examples, []string{"simple_grpc_sequence_sync_infer_client.py", "-u", s.EngineAddr}, nil, nil},
		{"sequence_sync_dyna", examples, []string{"simple_grpc_sequence_sync_infer_client.py", "-u", s.EngineAddr, "-d"}, nil, nil},
	}
	// python runs args in folder at with s's engine and gateway.
	python := func(t *testing.T, s *testStack, at string, args, env []string) {
		t.Helper()
		cmd := exec.Command("/usr/bin/python3", args...)
		cmd.Dir = at
		cmd.Env = append(os.Environ(),
			"PYTHONPATH="+filepath.Join(build, "python")+":"+filepath.Join(dir, "shim"),
			"STREAMGATE_QA_GRPC="+s.EngineAddr,
			"STREAMGATE_QA_HTTP="+s.addr)
		cmd.Env = append(cmd.Env, env...)
		cmd.WaitDelay = 10 * time.Second
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, tail(string(out), 8000))
		}
		t.Logf("%s", tail(string(out), 400))
	}
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			s := s
			if r.own != nil {
				// tritonclient.grpc talks to the engine alone: the
				// upstream transport is not on these runs' path, and the
				// first pass ran them.
				if os.Getenv("STREAMGATE_UPSTREAM_TRANSPORT") == "grpc" {
					t.Skip("engine-only QA run (no upstream transport on its path); the default transport's pass runs it")
				}
				t.Parallel()
				s = newStack(t, nil, func(c *stack.Config) { r.own(c.Engine) })
			}
			python(t, s, r.dir, r.args, r.env)
		})
	}
	// grpc core's clients (tritonclient.grpc and grpc.aio) on the
	// engine's unix socket (--grpc unix:PATH), tritonclient.http on a
	// gateway whose upstream target is that socket.
	t.Run("clients_unix_socket", func(t *testing.T) {
		t.Parallel()
		sock, err := os.MkdirTemp("", "sg") // a socket's path must stay under 108 bytes
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(sock) })
		target := "unix:" + filepath.Join(sock, "engine.sock")
		s := newStack(t, nil, func(c *stack.Config) { c.EngineAddr = target })
		if s.EngineAddr != target || s.up.Stats().Targets[0].Addr != target {
			t.Fatalf("engine at %s, gateway's target %s; want both %s", s.EngineAddr, s.up.Stats().Targets[0].Addr, target)
		}
		python(t, s, scripts, []string{"clients.py"}, nil)
	})
}

// qaResponseDelay is the engine's ResponseDelay for L0_decoupled's
// test_one_to_multi_many: over repeat_int32's 1s between responses, so
// that they queue behind the stream's writer (Triton's test.sh uses 2s;
// less keeps the run near 4 minutes).
const qaResponseDelay = 1200 * time.Millisecond

// builtinConfig is a built-in model's config.
func builtinConfig(t testing.TB, name string) *pb.ModelConfig {
	data, err := fs.ReadFile(builtin.FS, name+"/config.pbtxt")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &pb.ModelConfig{}
	if err := prototext.Unmarshal(data, cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}
