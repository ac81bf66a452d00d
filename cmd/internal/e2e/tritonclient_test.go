package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	s := newStack(t, nil)
	qa := filepath.Join(dir, "vendor", "server", "qa")
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	scripts := filepath.Join(here, "testdata", "tritonclient")
	examples := filepath.Join(dir, "vendor", "client", "examples")
	runs := []struct {
		name string
		dir  string
		args []string
		env  []string
	}{
		{"clients", scripts, []string{"clients.py"}, nil},
		// L0_decoupled on repeat_int32 (its other trials are ensembles of
		// backends the engine lacks; NonDecoupledTest needs a
		// non-decoupled repeat_int32).
		{"L0_decoupled", filepath.Join(qa, "L0_decoupled"), []string{filepath.Join(scripts, "qa_run.py"), "decoupled_test.py",
			"DecoupledTest.test_one_to_none", "DecoupledTest.test_one_to_one",
			"DecoupledTest.test_no_streaming", "DecoupledTest.test_wrong_shape"}, []string{"STREAMGATE_QA_MODELS=repeat_int32"}},
		// L0_grpc_state_cleanup's decoupled tests (the others need
		// custom_zero_1_float32, a restricted protocol or a server to kill).
		{"L0_grpc_state_cleanup", filepath.Join(qa, "L0_grpc_state_cleanup"), []string{filepath.Join(scripts, "qa_run.py"), "cleanup_test.py",
			"CleanUpTest.test_decoupled_infer", "CleanUpTest.test_decoupled_cancellation", "CleanUpTest.test_decoupled_timeout"}, nil},
		{"sequence_stream", examples, []string{"simple_grpc_sequence_stream_infer_client.py", "-u", s.EngineAddr}, nil},
		{"sequence_stream_dyna", examples, []string{"simple_grpc_sequence_stream_infer_client.py", "-u", s.EngineAddr, "-d"}, nil},
		{"sequence_sync", examples, []string{"simple_grpc_sequence_sync_infer_client.py", "-u", s.EngineAddr}, nil},
		{"sequence_sync_dyna", examples, []string{"simple_grpc_sequence_sync_infer_client.py", "-u", s.EngineAddr, "-d"}, nil},
	}
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			cmd := exec.Command("/usr/bin/python3", r.args...)
			cmd.Dir = r.dir
			cmd.Env = append(os.Environ(),
				"PYTHONPATH="+filepath.Join(build, "python")+":"+filepath.Join(dir, "shim"),
				"STREAMGATE_QA_GRPC="+s.EngineAddr,
				"STREAMGATE_QA_HTTP="+s.addr)
			cmd.Env = append(cmd.Env, r.env...)
			cmd.WaitDelay = 10 * time.Second
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", strings.Join(r.args, " "), err, tail(string(out), 8000))
			}
			t.Logf("%s", tail(string(out), 400))
		})
	}
}
