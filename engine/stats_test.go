package engine_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/streamgate/streamgate/engine"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// TestModelStatistics (issue 13.4): the counts and durations Triton
// reports, after a known workload: a blocker, three requests batched
// behind it (one of batch size 3), one timed out in the queue, one
// rejected before reaching the model (not counted).
func TestModelStatistics(t *testing.T) {
	dir := repo(t, map[string]string{"m/config.pbtxt": fmt.Sprintf(batchedIdentity, "m",
		"default_queue_policy { allow_timeout_override: true default_timeout_microseconds: 600000000 }")})
	h, _ := startRecorded(t, dir, engine.Options{})
	ctx := context.Background()
	before := uint64(time.Now().UnixMilli())

	fresh := stats(t, h, "m")
	if fresh.GetVersion() != "1" || fresh.GetExecutionCount() != 0 || fresh.GetLastInference() != 0 || fresh.GetInferenceStats().GetCacheHit() == nil {
		t.Fatalf("fresh statistics %v", fresh)
	}

	release := blocker(t, h, "m", true)
	three := build("m", "three", false, tensor.NewInt32("INPUT0", []int64{3, 1}, []int32{1, 2, 3}))
	timeout := identityReq("m", "timeout", true, 1)
	timeout.Parameters = map[string]*pb.InferParameter{"timeout": int64Param(1000)}
	var waits []func() map[string]unaryResult
	for i, r := range []*pb.ModelInferRequest{identityReq("m", "a", true, 1), three, identityReq("m", "b", true, 2)} {
		waits = append(waits, inferAll(h, r))
		waitFor(t, "request queued", func() bool { return h.srv.Queued("m") == i+1 })
	}
	if r := inferAll(h, timeout)()["timeout"]; status.Code(r.err) != codes.Unavailable {
		t.Fatalf("timed-out request: %v", r.err)
	}
	bad := identityReq("m", "bad", true, 1)
	bad.Inputs[0].Datatype = "FP32"
	if _, err := h.client.ModelInfer(ctx, bad); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad request: %v", err)
	}
	release()
	for id, r := range collectAll(waits) {
		if r.err != nil {
			t.Fatalf("%s: %v", id, r.err)
		}
	}
	after := uint64(time.Now().UnixMilli())

	s := stats(t, h, "m")
	is := s.GetInferenceStats()
	// The blocker was cancelled (an error), the timeout failed: 2 fails.
	if is.GetSuccess().GetCount() != 3 || is.GetFail().GetCount() != 2 {
		t.Fatalf("success %v fail %v", is.GetSuccess(), is.GetFail())
	}
	if s.GetInferenceCount() != 5 || s.GetExecutionCount() != 2 {
		t.Fatalf("inference_count %d (want 1+3+1), execution_count %d (want 2)", s.GetInferenceCount(), s.GetExecutionCount())
	}
	for name, d := range map[string]*pb.StatisticDuration{"queue": is.GetQueue(), "compute_input": is.GetComputeInput(), "compute_infer": is.GetComputeInfer(), "compute_output": is.GetComputeOutput()} {
		if d.GetCount() != 3 {
			t.Fatalf("%s count %d, want one per successful request", name, d.GetCount())
		}
	}
	if is.GetQueue().GetNs() == 0 || is.GetSuccess().GetNs() < is.GetQueue().GetNs() || is.GetFail().GetNs() == 0 {
		t.Fatalf("durations: success %v queue %v fail %v", is.GetSuccess(), is.GetQueue(), is.GetFail())
	}
	var sizes []uint64
	for _, b := range s.GetBatchStats() {
		sizes = append(sizes, b.GetBatchSize())
		if b.GetComputeInfer().GetCount() != 1 || b.GetComputeInput().GetCount() != 1 || b.GetComputeOutput().GetCount() != 1 {
			t.Fatalf("batch_stats %v", b)
		}
	}
	if !slices.Equal(sizes, []uint64{1, 5}) {
		t.Fatalf("batch sizes %v, want the blocker's 1 and the batch of 1+3+1", sizes)
	}
	if s.GetLastInference() < before || s.GetLastInference() > after {
		t.Fatalf("last_inference %d outside [%d, %d]", s.GetLastInference(), before, after)
	}

	// Every model, and errors.
	all, err := h.client.ModelStatistics(ctx, &pb.ModelStatisticsRequest{})
	if err != nil || len(all.GetModelStats()) != 1 || all.GetModelStats()[0].GetName() != "m" {
		t.Fatalf("all models: %v %v", all, err)
	}
	// Triton answers these INVALID_ARGUMENT, in these words.
	for _, tc := range []struct {
		r    *pb.ModelStatisticsRequest
		want string
	}{
		{&pb.ModelStatisticsRequest{Name: "nope"}, "requested model 'nope' is not available"},
		{&pb.ModelStatisticsRequest{Name: "m", Version: "2"}, "requested model version is not available for model 'm'"},
	} {
		_, err := h.client.ModelStatistics(ctx, tc.r)
		if s, _ := status.FromError(err); s.Code() != codes.InvalidArgument || s.Message() != tc.want {
			t.Fatalf("%v: %v, want InvalidArgument %q", tc.r, err, tc.want)
		}
	}
}
