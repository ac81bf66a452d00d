package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/engine/backend"
	"github.com/streamgate/streamgate/engine/builtin"
	"github.com/streamgate/streamgate/engine/identity"
	"github.com/streamgate/streamgate/proto/errclass"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// repo writes a model repository: files maps a path to its content; a
// path ending in "/" is a directory (a model version).
func repo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// recorder is the identity backend, logging the request ids of every
// execution, so tests see which requests ran together and in what order.
type recorder struct {
	backend.BatchBackend
	mu   sync.Mutex
	runs [][]string
}

func (r *recorder) ExecuteBatch(ctx context.Context, b *backend.Batch) []backend.Result {
	var ids []string
	for _, req := range b.Requests {
		ids = append(ids, req.ID)
	}
	r.mu.Lock()
	r.runs = append(r.runs, ids)
	r.mu.Unlock()
	return r.BatchBackend.ExecuteBatch(ctx, b)
}

func (r *recorder) executions() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.runs)
}

// startRecorded serves dir with the built-in backends and "recorded", the
// identity backend behind a recorder.
func startRecorded(t *testing.T, dir string, opts engine.Options) (*harness, *recorder) {
	t.Helper()
	rec := &recorder{}
	opts.ModelDir = dir
	opts.Backends = builtin.Backends()
	opts.Backends["recorded"] = func(cfg backend.Config) (backend.Backend, error) {
		b, err := identity.New(cfg)
		if err != nil {
			return nil, err
		}
		rec.BatchBackend = b.(backend.BatchBackend)
		return rec, nil
	}
	return start(t, opts), rec
}

func int64Param(v int64) *pb.InferParameter {
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: v}}
}

// identityReq is a request to an identity model with INPUT0 = vals, shape
// [1, len(vals)] (batching models) or [len(vals)].
func identityReq(model, id string, batched bool, vals ...int32) *pb.ModelInferRequest {
	shape := []int64{int64(len(vals))}
	if batched {
		shape = []int64{1, int64(len(vals))}
	}
	return build(model, id, false, tensor.NewInt32("INPUT0", shape, vals))
}

// blocker holds a one-instance identity model: a request with delay_ms
// of a minute, until the returned cancel.
func blocker(t *testing.T, h *harness, model string, batched bool) context.CancelFunc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req := identityReq(model, "blocker", batched, 0)
	req.Parameters = map[string]*pb.InferParameter{"delay_ms": int64Param(60_000)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = h.client.ModelInfer(ctx, req)
	}()
	waitFor(t, "the blocker to hold the instance", func() bool { return h.srv.InFlight() == 1 })
	t.Cleanup(func() { cancel(); <-done })
	return func() { cancel(); <-done }
}

// unaryResult is one unary call's outcome.
type unaryResult struct {
	resp *pb.ModelInferResponse
	err  error
}

// inferAll sends every request as its own unary call, concurrently, and
// returns a function that waits for the results (by id).
func inferAll(h *harness, reqs ...*pb.ModelInferRequest) func() map[string]unaryResult {
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]unaryResult{}
	for _, r := range reqs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := h.client.ModelInfer(ctx, r)
			mu.Lock()
			out[r.GetId()] = unaryResult{resp, err}
			mu.Unlock()
		})
	}
	return func() map[string]unaryResult { wg.Wait(); return out }
}

// collectAll waits for every inferAll and merges their results.
func collectAll(waits []func() map[string]unaryResult) map[string]unaryResult {
	out := map[string]unaryResult{}
	for _, w := range waits {
		for id, r := range w() {
			out[id] = r
		}
	}
	return out
}

func stats(t *testing.T, h *harness, model string) *pb.ModelStatistics {
	t.Helper()
	r, err := h.client.ModelStatistics(context.Background(), &pb.ModelStatisticsRequest{Name: model})
	if err != nil || len(r.GetModelStats()) != 1 {
		t.Fatalf("statistics of %s: %v %v", model, r, err)
	}
	return r.GetModelStats()[0]
}

// batchCounts maps batch size to executions of that size.
func batchCounts(s *pb.ModelStatistics) map[uint64]uint64 {
	out := map[uint64]uint64{}
	for _, b := range s.GetBatchStats() {
		out[b.GetBatchSize()] = b.GetComputeInfer().GetCount()
	}
	return out
}

const batchedIdentity = `
name: "%s"
backend: "recorded"
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] }]
instance_group [{ count: 1 kind: KIND_CPU }]
dynamic_batching { %s }
`

// unbatchedIdentity is a one-instance identity model without batching:
// name, backend and the body of dynamic_batching.
const unbatchedIdentity = `
name: "%s"
backend: "%s"
max_batch_size: 0
input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] }]
dynamic_batching { %s }
`

// TestDynamicBatching: requests queued while the one instance is busy run
// together, as Triton's dynamic batcher runs them, each with its own
// outputs; preferred_batch_size and max_queue_delay shape the batches.
func TestDynamicBatching(t *testing.T) {
	for _, c := range []struct {
		name     string
		batching string
		queued   int
		want     [][]int // executions after the blocker: the request indices of each
	}{
		{"all queued in one batch", "", 5, [][]int{{0, 1, 2, 3, 4}}},
		{"max_batch_size caps a batch", "", 11, [][]int{{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10}}},
		{"preferred size first", "preferred_batch_size: [ 2 ]", 5, [][]int{{0, 1}, {2, 3}, {4}}},
		{"largest preferred size", "preferred_batch_size: [ 2, 3 ]", 5, [][]int{{0, 1, 2}, {3, 4}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := repo(t, map[string]string{"m/config.pbtxt": fmt.Sprintf(batchedIdentity, "m", c.batching), "m/1/": ""})
			h, rec := startRecorded(t, dir, engine.Options{})
			release := blocker(t, h, "m", true)
			// One at a time, so that queue order is send order.
			var waits []func() map[string]unaryResult
			for i := range c.queued {
				waits = append(waits, inferAll(h, identityReq("m", fmt.Sprint(i), true, int32(i), int32(10*i))))
				waitFor(t, "request queued", func() bool { return h.srv.Queued("m") == i+1 })
			}
			release()
			got := collectAll(waits)
			for i := range c.queued {
				r := got[fmt.Sprint(i)]
				if r.err != nil {
					t.Fatalf("request %d: %v", i, r.err)
				}
				v, err := output(t, r.resp, "OUTPUT0").Int32s()
				if err != nil || !slices.Equal(v, []int32{int32(i), int32(10 * i)}) || r.resp.GetId() != fmt.Sprint(i) {
					t.Fatalf("request %d got %v (%v), id %q", i, v, err, r.resp.GetId())
				}
			}
			runs := rec.executions()
			if len(runs) != 1+len(c.want) || !slices.Equal(runs[0], []string{"blocker"}) {
				t.Fatalf("executions %v, want the blocker then %v", runs, c.want)
			}
			for i, want := range c.want {
				var ids []string
				for _, j := range want {
					ids = append(ids, fmt.Sprint(j))
				}
				if !slices.Equal(runs[1+i], ids) {
					t.Fatalf("execution %d ran %v, want %v (all: %v)", i+1, runs[1+i], ids, runs)
				}
			}
			st := stats(t, h, "m")
			if st.GetExecutionCount() != uint64(1+len(c.want)) || st.GetExecutionCount() >= uint64(1+c.queued) {
				t.Fatalf("execution_count %d for %d requests", st.GetExecutionCount(), 1+c.queued)
			}
			sizes := batchCounts(st)
			for _, want := range c.want {
				sizes[uint64(len(want))]--
			}
			sizes[1]-- // the blocker
			for size, n := range sizes {
				if n != 0 {
					t.Fatalf("batch_stats %v do not match the executions %v (size %d off by %d)", st.GetBatchStats(), runs, size, n)
				}
			}
		})
	}
}

// TestBatchDelay: with max_queue_delay_microseconds a request waits for
// others to reach the preferred batch size (one execution of 4), and a
// lone request still runs once the delay is over.
func TestBatchDelay(t *testing.T) {
	dir := repo(t, map[string]string{
		"long/config.pbtxt":  fmt.Sprintf(batchedIdentity, "long", "preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 30000000"),
		"short/config.pbtxt": fmt.Sprintf(batchedIdentity, "short", "preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 1000"),
	})
	h, rec := startRecorded(t, dir, engine.Options{})
	first := inferAll(h, identityReq("long", "a", true, 1))
	waitFor(t, "the first request queued", func() bool { return h.srv.Queued("long") == 1 })
	rest := inferAll(h, identityReq("long", "b", true, 2), identityReq("long", "c", true, 3), identityReq("long", "d", true, 4))
	for id, r := range first() {
		if r.err != nil {
			t.Fatalf("%s: %v", id, r.err)
		}
	}
	for id, r := range rest() {
		if r.err != nil {
			t.Fatalf("%s: %v", id, r.err)
		}
	}
	if runs := rec.executions(); len(runs) != 1 || len(runs[0]) != 4 {
		t.Fatalf("executions %v, want one batch of 4", runs)
	}
	if r := inferAll(h, identityReq("short", "lone", true, 5))()["lone"]; r.err != nil {
		t.Fatalf("a lone request after the delay: %v", r.err)
	}
}

// TestQueuePolicy: queued requests time out as Triton's queue policy says:
// REJECT answers UNAVAILABLE "Request timeout expired", DELAY runs them
// after the others; a request's timeout parameter may only shorten the
// default; max_queue_size refuses more.
func TestQueuePolicy(t *testing.T) {
	withTimeout := func(id string, us int64) *pb.ModelInferRequest {
		r := identityReq("q", id, false, 1)
		r.Parameters = map[string]*pb.InferParameter{"timeout": int64Param(us)}
		return r
	}
	for _, c := range []struct {
		name, policy string
		reqs         []*pb.ModelInferRequest
		rejected     []string // ids answered "Request timeout expired"
		order        []string // execution order of the others, after the blocker
	}{
		{"default timeout rejects", "default_timeout_microseconds: 1000", []*pb.ModelInferRequest{identityReq("q", "a", false, 1)}, []string{"a"}, nil},
		{"override shortens", "default_timeout_microseconds: 600000000 allow_timeout_override: true",
			[]*pb.ModelInferRequest{withTimeout("short", 1000), identityReq("q", "plain", false, 1)}, []string{"short"}, []string{"plain"}},
		{"override ignored when not allowed", "default_timeout_microseconds: 600000000",
			[]*pb.ModelInferRequest{withTimeout("short", 1000)}, nil, []string{"short"}},
		{"override cannot lengthen", "default_timeout_microseconds: 1000 allow_timeout_override: true",
			[]*pb.ModelInferRequest{withTimeout("long", 600000000)}, []string{"long"}, nil},
		{"no default, no timeout", "allow_timeout_override: true",
			[]*pb.ModelInferRequest{withTimeout("x", 1000)}, nil, []string{"x"}},
		{"DELAY runs expired ones last", "default_timeout_microseconds: 600000000 allow_timeout_override: true timeout_action: DELAY",
			[]*pb.ModelInferRequest{withTimeout("late", 1000), identityReq("q", "b", false, 1), identityReq("q", "c", false, 1)}, nil, []string{"b", "c", "late"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := repo(t, map[string]string{"q/config.pbtxt": fmt.Sprintf(unbatchedIdentity, "q", "recorded", "default_queue_policy { "+c.policy+" }")})
			h, rec := startRecorded(t, dir, engine.Options{})
			release := blocker(t, h, "q", false)
			// One at a time, so that queue order is send order; a request
			// may time out before it is seen queued.
			var waits []func() map[string]unaryResult
			for i, r := range c.reqs {
				waits = append(waits, inferAll(h, r))
				waitFor(t, "request queued", func() bool {
					return h.srv.Queued("q")+int(stats(t, h, "q").GetInferenceStats().GetFail().GetCount()) == i+1
				})
			}
			waitFor(t, "rejections", func() bool {
				return stats(t, h, "q").GetInferenceStats().GetFail().GetCount() == uint64(len(c.rejected))
			})
			// The batcher applies timeouts (DELAY, and REJECT when it gets
			// there first) when it next forms a batch: make sure the 1 ms
			// ones are over by then, so that a timeout wrongly applied shows.
			time.Sleep(2 * time.Millisecond)
			release()
			got := collectAll(waits)
			for _, id := range c.rejected {
				st := status.Convert(got[id].err)
				if st.Code() != codes.Unavailable || st.Message() != "Request timeout expired" {
					t.Fatalf("%s: got %v, want UNAVAILABLE Request timeout expired", id, got[id].err)
				}
			}
			var order []string
			for _, run := range rec.executions()[1:] {
				order = append(order, run...)
			}
			if !slices.Equal(order, c.order) {
				t.Fatalf("executed %v, want %v", order, c.order)
			}
			for _, id := range c.order {
				if got[id].err != nil {
					t.Fatalf("%s: %v", id, got[id].err)
				}
			}
		})
	}
}

// TestPriority: with priority_levels, level 1 runs first; priority 0 and
// levels beyond priority_levels take default_priority_level; each level
// has its own queue policy.
func TestPriority(t *testing.T) {
	dir := repo(t, map[string]string{"p/config.pbtxt": fmt.Sprintf(unbatchedIdentity, "p", "recorded",
		"priority_levels: 3 default_priority_level: 2 priority_queue_policy { key: 1 value { max_queue_size: 1 } }")})
	h, rec := startRecorded(t, dir, engine.Options{})
	release := blocker(t, h, "p", false)
	prio := func(id string, p any) *pb.ModelInferRequest {
		r := identityReq("p", id, false, 1)
		if p != nil {
			r.Parameters = map[string]*pb.InferParameter{"priority": param(p)}
		}
		return r
	}
	var waits []func() map[string]unaryResult
	for i, r := range []*pb.ModelInferRequest{
		prio("low", int64(3)), prio("default", nil), prio("beyond", uint64(9)), prio("two", int64(2)), prio("high", uint64(1)),
	} {
		waits = append(waits, inferAll(h, r))
		waitFor(t, "request queued", func() bool { return h.srv.Queued("p") == i+1 })
	}
	// Level 1 holds one request at most.
	full := inferAll(h, prio("high2", int64(1)))()["high2"]
	if st := status.Convert(full.err); st.Code() != codes.Unavailable || st.Message() != "Exceeds maximum queue size" {
		t.Fatalf("second level-1 request: %v", full.err)
	}
	release()
	for id, r := range collectAll(waits) {
		if r.err != nil {
			t.Fatalf("%s: %v", id, r.err)
		}
	}
	var order []string
	for _, run := range rec.executions()[1:] {
		order = append(order, run...)
	}
	if want := []string{"high", "default", "beyond", "two", "low"}; !slices.Equal(order, want) {
		t.Fatalf("executed %v, want %v", order, want)
	}
}

// TestTritonQAModels: the identity models of Triton's QA load from their
// own config.pbtxt in Triton's repository layout (version directories),
// and behave as Triton's identity backend.
func TestTritonQAModels(t *testing.T) {
	dir := repo(t, map[string]string{
		// qa/L0_request_cancellation/models/custom_identity_int32/config.pbtxt
		"custom_identity_int32/config.pbtxt": `
name: "custom_identity_int32"
backend: "identity"
max_batch_size: 1024
version_policy: { latest { num_versions: 1 }}
instance_group [ { kind: KIND_CPU } ]

input [
  {
    name: "INPUT0"
    data_type: TYPE_INT32
    dims: [ -1 ]

  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_INT32
    dims: [ -1 ]
  }
]

parameters [
  {
    key: "execute_delay_ms"
    value: { string_value: "10000" }
  }
]
`,
		"custom_identity_int32/1/": "",
		// qa/L0_request_cancellation/test.sh, model dynamic_batch
		"dynamic_batch/config.pbtxt": `name: "dynamic_batch"
backend: "identity"
max_batch_size: 2
input [{ name: "INPUT0" 
 data_type: TYPE_FP32 
 dims: [ -1 ] }]
output [{ name: "OUTPUT0" 
 data_type: TYPE_FP32 
 dims: [ -1 ] }]
instance_group [{ count: 1 
 kind: KIND_CPU }]
dynamic_batching { max_queue_delay_microseconds: 600000 }
parameters [{ key: "execute_delay_ms" 
 value: { string_value: "6000" } }]
`,
		"dynamic_batch/1/": "",
		// Two inputs, one optional; and versions 1 to 3.
		"pairs/config.pbtxt": `
name: "pairs"
backend: "identity"
max_batch_size: 4
version_policy { latest { num_versions: 2 } }
input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 2 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ -1, 3 ] optional: true }]
output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ -1, 3 ] }]
`,
		"pairs/1/": "", "pairs/2/": "", "pairs/3/": "",
	})
	h := start(t, engine.Options{ModelDir: dir, Backends: builtin.Backends()})
	ctx := context.Background()

	md, err := h.client.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "custom_identity_int32"})
	if err != nil || !slices.Equal(md.GetVersions(), []string{"1"}) || md.GetInputs()[0].GetShape()[0] != -1 || md.GetPlatform() != "identity" {
		t.Fatalf("metadata %v %v", md, err)
	}
	md, err = h.client.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "pairs"})
	if err != nil || !slices.Equal(md.GetVersions(), []string{"2", "3"}) {
		t.Fatalf("pairs versions %v %v", md, err)
	}
	for v, want := range map[string]bool{"": true, "2": true, "3": true, "1": false} {
		r, err := h.client.ModelReady(ctx, &pb.ModelReadyRequest{Name: "pairs", Version: v})
		if err != nil || r.GetReady() != want {
			t.Fatalf("pairs version %q ready %v %v, want %v", v, r, err, want)
		}
	}

	// Both inputs, a batch of 2, to the latest version.
	both := build("pairs", "both", false,
		tensor.NewInt32("INPUT0", []int64{2, 2}, []int32{1, 2, 3, 4}),
		&tensor.Tensor{Name: "INPUT1", Datatype: "FP32", Shape: []int64{2, 1, 3}, Raw: make([]byte, 24)})
	resp, err := h.client.ModelInfer(ctx, both)
	if err != nil || resp.GetModelVersion() != "3" || len(resp.GetOutputs()) != 2 {
		t.Fatalf("both inputs: %v %v", resp, err)
	}
	if v, _ := output(t, resp, "OUTPUT0").Int32s(); !slices.Equal(v, []int32{1, 2, 3, 4}) {
		t.Fatalf("OUTPUT0 %v", v)
	}
	// The optional input left out: OUTPUT1 is zeros of [batch, 1, 3].
	one := build("pairs", "one", false, tensor.NewInt32("INPUT0", []int64{3, 2}, []int32{1, 2, 3, 4, 5, 6}))
	one.ModelVersion = "2"
	resp, err = h.client.ModelInfer(ctx, one)
	if err != nil || resp.GetModelVersion() != "2" {
		t.Fatalf("optional input left out: %v %v", resp, err)
	}
	if o := output(t, resp, "OUTPUT1"); !slices.Equal(o.Shape, []int64{3, 1, 3}) || o.Datatype != "FP32" || len(o.Raw) != 36 || slices.ContainsFunc(o.Raw, func(b byte) bool { return b != 0 }) {
		t.Fatalf("OUTPUT1 %+v", o)
	}
	old := build("pairs", "old", false, tensor.NewInt32("INPUT0", []int64{1, 2}, []int32{1, 2}))
	old.ModelVersion = "1"
	if _, err := h.client.ModelInfer(ctx, old); status.Code(err) != codes.NotFound || status.Convert(err).Message() != "Request for unknown model: 'pairs' version 1 is not found" {
		t.Fatalf("unserved version: %v", err)
	}
	mismatch := build("pairs", "m", false,
		tensor.NewInt32("INPUT0", []int64{2, 2}, []int32{1, 2, 3, 4}),
		&tensor.Tensor{Name: "INPUT1", Datatype: "FP32", Shape: []int64{1, 1, 3}, Raw: make([]byte, 12)})
	if _, err := h.client.ModelInfer(ctx, mismatch); status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != "input 'INPUT1' batch size does not match other inputs for 'pairs'" {
		t.Fatalf("batch size mismatch: %v", err)
	}

	// QA's cancellation test: a request in its 10 s execute delay is
	// cancelled by the client; the instance frees at once (Triton's
	// sleeps on), and the model stays ready.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := h.client.ModelInfer(cctx, build("custom_identity_int32", "c", false, tensor.NewInt32("INPUT0", []int64{1, 3}, []int32{1, 2, 3})))
		done <- err
	}()
	waitFor(t, "the request executing", func() bool { return h.srv.InFlight() == 1 })
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled request: %v", err)
	}
	waitFor(t, "the execution to end", func() bool { return h.srv.InFlight() == 0 })
	if r, err := h.client.ModelReady(ctx, &pb.ModelReadyRequest{Name: "custom_identity_int32"}); err != nil || !r.GetReady() {
		t.Fatalf("ready after cancel: %v %v", r, err)
	}
}

// TestIdentityConfigErrors: Triton's identity backend's config checks.
func TestIdentityConfigErrors(t *testing.T) {
	const tmpl = `name: "m" backend: "identity" max_batch_size: 0 %s`
	for _, c := range []struct{ cfg, want string }{
		{`input [{name: "INPUT0" data_type: TYPE_INT32 dims: [1]}] output [{name: "OUTPUT0" data_type: TYPE_INT32 dims: [1]}, {name: "OUTPUT1" data_type: TYPE_INT32 dims: [1]}]`, "model configuration must have equal input/output pairs"},
		{`input [{name: "IN" data_type: TYPE_INT32 dims: [1]}] output [{name: "OUTPUT0" data_type: TYPE_INT32 dims: [1]}]`, "expected input name to follow INPUT<index> pattern, got 'IN'"},
		{`input [{name: "INPUT0" data_type: TYPE_INT32 dims: [1]}] output [{name: "OUT" data_type: TYPE_INT32 dims: [1]}]`, "expected output name to follow OUTPUT<index> pattern, got 'OUT'"},
		{`input [{name: "INPUT0" data_type: TYPE_INT32 dims: [1]}] output [{name: "OUTPUT1" data_type: TYPE_INT32 dims: [1]}]`, "expected input and output indices to match"},
		{`input [{name: "INPUT0" data_type: TYPE_INT32 dims: [1]}] output [{name: "OUTPUT0" data_type: TYPE_FP32 dims: [1]}]`, "expected input and output datatype to match, got TYPE_INT32 and TYPE_FP32"},
		{`input [{name: "INPUT0" data_type: TYPE_INT32 dims: [1]}] output [{name: "OUTPUT0" data_type: TYPE_INT32 dims: [2]}]`, "expected input and output shape to match, got [1] and [2]"},
		{`input [{name: "INPUT0" data_type: TYPE_INT32 dims: [1]}] output [{name: "OUTPUT0" data_type: TYPE_INT32 dims: [1]}] parameters { key: "execute_delay_ms" value { string_value: "soon" } }`, `parameters[execute_delay_ms]: want a non-negative integer, got "soon"`},
		{`input [{name: "INPUT0" data_type: TYPE_INT32 dims: [1]}] output [{name: "OUTPUT0" data_type: TYPE_INT32 dims: [1]}] dynamic_batching { preferred_batch_size: [ 2 ] }`, "dynamic batching preferred size must be <= max batch size for m"},
		{`input [{name: "INPUT0" data_type: TYPE_INT32 dims: [1]}] output [{name: "OUTPUT0" data_type: TYPE_INT32 dims: [1]}] dynamic_batching { priority_levels: 2 }`, "default priority level must be in range [1, 2] for m"},
		{`input [{name: "INPUT0" data_type: TYPE_INT32 dims: [1]}] output [{name: "OUTPUT0" data_type: TYPE_INT32 dims: [1]}] dynamic_batching { priority_levels: 2 default_priority_level: 1 priority_queue_policy { key: 3 value { } } }`, "priority queue policy must have priority level in range [1, 2] for m"},
	} {
		t.Run(c.want, func(t *testing.T) {
			dir := repo(t, map[string]string{"m/config.pbtxt": fmt.Sprintf(tmpl, c.cfg)})
			_, err := engine.New(engine.Options{ModelDir: dir, Backends: builtin.Backends()})
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "m/config.pbtxt") {
				t.Fatalf("got %v, want an error naming m/config.pbtxt with %q", err, c.want)
			}
		})
	}
	// A backend that cannot execute batches refuses dynamic batching with
	// a batch size.
	dir := repo(t, map[string]string{"square_int32/config.pbtxt": `name: "square_int32" backend: "square" max_batch_size: 4 model_transaction_policy { decoupled: true }
input [{name: "IN" data_type: TYPE_INT32 dims: [1]}] output [{name: "OUT" data_type: TYPE_INT32 dims: [1]}] dynamic_batching { }`})
	if _, err := engine.New(engine.Options{ModelDir: dir, Backends: builtin.Backends()}); err == nil || !strings.Contains(err.Error(), "dynamic_batching") {
		t.Fatalf("square with dynamic batching: %v", err)
	}
}

// TestQueueTimeoutInBand: on a stream the timeout is an in-band error with
// the class UNAVAILABLE.
func TestQueueTimeoutInBand(t *testing.T) {
	dir := repo(t, map[string]string{"q/config.pbtxt": fmt.Sprintf(unbatchedIdentity, "q", "identity",
		"default_queue_policy { default_timeout_microseconds: 1000 }")})
	h := start(t, engine.Options{ModelDir: dir, Backends: builtin.Backends()})
	blocker(t, h, "q", false)
	_, byID := runStream(t, h, identityReq("q", "late", false, 1))
	got := byID["late"]
	if len(got) != 1 || got[0].GetErrorMessage() != "Request timeout expired" || !isFinal(got[0]) ||
		got[0].GetInferResponse().GetParameters()[errclass.Param].GetStringParam() != "UNAVAILABLE" {
		t.Fatalf("queued past its timeout: %v", got)
	}
}
