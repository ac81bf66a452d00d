package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/engine/builtin"
	"github.com/streamgate/streamgate/proto/errclass"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// tritonRepeatConfig is Triton's own server/src/test/models/repeat_int32/config.pbtxt.
const tritonRepeatConfig = `
name: "repeat_int32"
backend: "repeat"
max_batch_size: 0
model_transaction_policy { decoupled: True }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },
        { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
        { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] } ]
`

func TestParseTritonConfig(t *testing.T) {
	cfg, err := engine.ParseConfig([]byte(tritonRepeatConfig))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GetName() != "repeat_int32" || cfg.GetBackend() != "repeat" || !cfg.GetModelTransactionPolicy().GetDecoupled() {
		t.Fatalf("parsed %v", cfg)
	}
	if len(cfg.GetInput()) != 3 || cfg.GetInput()[1].GetDataType() != pb.DataType_TYPE_UINT32 || cfg.GetInput()[0].GetDims()[0] != -1 {
		t.Fatalf("inputs %v", cfg.GetInput())
	}
	if len(cfg.GetOutput()) != 2 || cfg.GetOutput()[1].GetName() != "IDX" {
		t.Fatalf("outputs %v", cfg.GetOutput())
	}
	// Fields real configs carry beside those.
	more := tritonRepeatConfig + `
instance_group [ { count: 2 kind: KIND_CPU } ]
dynamic_batching { default_queue_policy { max_queue_size: 8 } }
parameters { key: "CUSTOM_OUTPUT_DELAY_NS" value { string_value: "1000" } }
version_policy { latest { num_versions: 1 } }
`
	cfg, err = engine.ParseConfig([]byte(more))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GetInstanceGroup()[0].GetCount() != 2 || cfg.GetDynamicBatching().GetDefaultQueuePolicy().GetMaxQueueSize() != 8 ||
		cfg.GetParameters()["CUSTOM_OUTPUT_DELAY_NS"].GetStringValue() != "1000" {
		t.Fatalf("parsed %v", cfg)
	}
}

func writeRepo(t *testing.T, models map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, cfg := range models {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "config.pbtxt"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestBadConfigsNameFileAndField(t *testing.T) {
	cases := []struct {
		name, cfg string
		want      []string
	}{
		{"unknown field", `name: "m" backend: "square" bogus_field: 1`, []string{"m/config.pbtxt", "bogus_field"}},
		{"bad type", `name: "m" backend: "square" max_batch_size: "x"`, []string{"m/config.pbtxt", "max_batch_size"}},
		{"unknown backend", `name: "m" backend: "nope" output [{name: "O" data_type: TYPE_INT32 dims: [1]}]`, []string{"m/config.pbtxt", "backend", "nope"}},
		{"name mismatch", `name: "other" backend: "square"`, []string{"m/config.pbtxt", "name"}},
		{"bad dims", `name: "m" backend: "square" input [{name: "IN" data_type: TYPE_INT32 dims: [0]}] output [{name: "OUT" data_type: TYPE_INT32 dims: [1]}]`, []string{"m/config.pbtxt", "input[0].dims"}},
		{"no dtype", `name: "m" backend: "square" input [{name: "IN" dims: [1]}] output [{name: "OUT" data_type: TYPE_INT32 dims: [1]}]`, []string{"m/config.pbtxt", "input[0].data_type"}},
		{"repeat batching", strings.Replace(tritonRepeatConfig, "max_batch_size: 0", "max_batch_size: 8", 1), []string{"repeat_int32/config.pbtxt", "max_batch_size"}},
		{"square knob", `name: "m" backend: "square" model_transaction_policy { decoupled: true } input [{name: "IN" data_type: TYPE_INT32 dims: [1]}] output [{name: "OUT" data_type: TYPE_INT32 dims: [1]}] parameters { key: "CUSTOM_OUTPUT_DELAY_NS" value { string_value: "soon" } }`, []string{"m/config.pbtxt", "CUSTOM_OUTPUT_DELAY_NS"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dirName := "m"
			if strings.Contains(c.cfg, `"repeat_int32"`) {
				dirName = "repeat_int32"
			}
			dir := writeRepo(t, map[string]string{dirName: c.cfg})
			_, err := engine.New(engine.Options{ModelDir: dir, Backends: builtin.Backends()})
			if err == nil {
				t.Fatal("loaded a bad config")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

func TestQueueLimit(t *testing.T) {
	dir := writeRepo(t, map[string]string{"repeat_int32": tritonRepeatConfig + `
instance_group [ { count: 1 } ]
dynamic_batching { default_queue_policy { max_queue_size: 1 } }`})
	h := start(t, engine.Options{ModelDir: dir})
	// The first request holds the one instance for its WAIT (2 s), the
	// second waits in the queue of one, the third is refused.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := h.client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if err := s.Send(repeatReq(id, 1, 2000, 2000, true)); err != nil {
			t.Fatal(err)
		}
	}
	for {
		r, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if msg := r.GetErrorMessage(); msg != "" {
			if msg != "Exceeds maximum queue size" || !isFinal(r) {
				t.Fatalf("got %v", r)
			}
			if c := r.GetInferResponse().GetParameters()[errclass.Param].GetStringParam(); c != "UNAVAILABLE" {
				t.Fatalf("queue full: %s = %q, want UNAVAILABLE", errclass.Param, c)
			}
			break
		}
	}
	cancel()
	waitFor(t, "cancelled requests to stop", func() bool { return h.srv.InFlight() == 0 })
}

func TestGracefulStopRefusesNewRequests(t *testing.T) {
	h := start(t, engine.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := h.client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(repeatReq("running", 2, 200, 0, true)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "request running", func() bool { return h.srv.InFlight() == 1 })
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		h.srv.GracefulStop(context.Background())
	}()
	waitFor(t, "server not ready", func() bool {
		r, err := h.client.ServerReady(context.Background(), &pb.ServerReadyRequest{})
		return err != nil || !r.GetReady()
	})
	if err := s.Send(repeatReq("late", 1, 0, 0, true)); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	byID := map[string][]*pb.ModelStreamInferResponse{}
	for _, r := range collect(t, s) {
		byID[r.GetInferResponse().GetId()] = append(byID[r.GetInferResponse().GetId()], r)
	}
	checkRepeat(t, "running", byID["running"], 2, true)
	if late := byID["late"]; len(late) != 1 || late[0].GetErrorMessage() != "GRPC server is shutting down and has stopped accepting new requests." {
		t.Fatalf("late request: %v", late)
	}
	<-stopped
}
