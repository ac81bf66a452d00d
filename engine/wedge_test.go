package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/proto/errclass"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// The WAIT wedge (issue 18.2): {"IN":[1],"DELAY":[0],"WAIT":4294967295}
// held repeat_int32's one instance for 49.7 days.

// TestWaitAndDelayLimits: absurd WAIT and DELAY are refused, in-band and
// in triton_grpc_error mode, with INVALID_ARGUMENT.
func TestWaitAndDelayLimits(t *testing.T) {
	h := start(t, engine.Options{})
	for _, c := range []struct {
		name string
		req  *pb.ModelInferRequest
		want string
	}{
		{"wedge", repeatInputs("repeat_int32", "bad", []int32{1}, []uint32{0}, 4294967295), "WAIT must be at most 60000 ms, got 4294967295"},
		{"wait", repeatInputs("repeat_int32", "bad", []int32{1}, []uint32{0}, 60001), "WAIT must be at most 60000 ms, got 60001"},
		{"delay", repeatInputs("repeat_int32", "bad", []int32{1, 2}, []uint32{0, 4294967295}, 0), "DELAY[1] must be at most 60000 ms, got 4294967295"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, byID := runStream(t, h, c.req)
			got := byID["bad"]
			if len(got) != 1 || got[0].GetErrorMessage() != c.want || !isFinal(got[0]) ||
				got[0].GetInferResponse().GetParameters()[errclass.Param].GetStringParam() != "INVALID_ARGUMENT" {
				t.Fatalf("got %v, want one INVALID_ARGUMENT error %q", got, c.want)
			}
			ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "triton_grpc_error", "true"), 20*time.Second)
			defer cancel()
			s, err := h.client.ModelStreamInfer(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Send(c.req); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Recv(); status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != c.want {
				t.Fatalf("triton_grpc_error: %v", err)
			}
		})
	}
}

// holdRepeat starts a repeat_int32 request that is still sending (its
// second response comes after 30 s) and holds the one instance for 60 s,
// on a stream of its own; it returns the stream and its cancel.
func holdRepeat(t *testing.T, h *harness) (pb.GRPCInferenceService_ModelStreamInferClient, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := h.client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(repeatInputs("repeat_int32", "holder", []int32{1, 2}, []uint32{0, 30_000}, 60_000)); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Recv(); err != nil || r.GetInferResponse().GetId() != "holder" {
		t.Fatalf("holder's first response: %v %v", r, err)
	}
	return s, cancel
}

// sendOnly opens a stream, sends req and half-closes; collect reads the
// answers (within 20 s).
func sendOnly(t *testing.T, h *harness, req *pb.ModelInferRequest) pb.GRPCInferenceService_ModelStreamInferClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	s, err := h.client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(req); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCancelReleasesHold: a request that holds its instance (WAIT) and is
// cancelled, in-band or by cancelling its RPC, frees the instance at once,
// so the request queued behind it runs.
func TestCancelReleasesHold(t *testing.T) {
	for _, how := range []string{"in-band", "rpc"} {
		t.Run(how, func(t *testing.T) {
			h := start(t, engine.Options{})
			holder, cancelHolder := holdRepeat(t, h)
			next := sendOnly(t, h, repeatReq("next", 1, 0, 0, true))
			waitFor(t, "the next request queued", func() bool { return h.srv.Queued("repeat_int32") == 1 })
			if how == "in-band" {
				if err := holder.Send(&pb.ModelInferRequest{ModelName: "repeat_int32", Id: "holder",
					Parameters: map[string]*pb.InferParameter{engine.ParamCancel: boolParam(true)}}); err != nil {
					t.Fatal(err)
				}
			} else {
				cancelHolder()
			}
			checkRepeat(t, "next", collect(t, next), 1, true)
		})
	}
}

// TestQueuedRequestTimesOut: behind a held instance, a queued request ends
// with Triton's queue timeout (the built-in repeat_int32 allows the request
// timeout parameter to shorten its default of 2 minutes).
func TestQueuedRequestTimesOut(t *testing.T) {
	h := start(t, engine.Options{})
	// The wedge's own shape, at the largest WAIT allowed: done at once,
	// the instance held for a minute.
	_, byID := runStream(t, h, repeatInputs("repeat_int32", "wedge", []int32{1}, []uint32{0}, 60_000))
	if len(byID["wedge"]) != 1 {
		t.Fatalf("wedge request: %v", byID["wedge"])
	}
	late := repeatReq("late", 1, 0, 0, true)
	late.Parameters["timeout"] = int64Param(50_000)
	_, byID = runStream(t, h, late)
	got := byID["late"]
	if len(got) != 1 || got[0].GetErrorMessage() != "Request timeout expired" ||
		got[0].GetInferResponse().GetParameters()[errclass.Param].GetStringParam() != "UNAVAILABLE" {
		t.Fatalf("queued request: %v", got)
	}
	cfg, err := h.client.ModelConfig(context.Background(), &pb.ModelConfigRequest{Name: "repeat_int32"})
	if err != nil || cfg.GetConfig().GetDynamicBatching().GetDefaultQueuePolicy().GetDefaultTimeoutMicroseconds() != 120_000_000 {
		t.Fatalf("built-in queue policy: %v %v", cfg, err)
	}
}

// TestReadinessReflectsWedge: a model with requests queued and no progress
// for StallTimeout is not ready (ModelReady), and the server is not ready
// either under strict readiness (Triton's default); a busy model without
// a queue stays ready, and readiness returns when the queue moves.
func TestReadinessReflectsWedge(t *testing.T) {
	for _, lax := range []bool{false, true} {
		t.Run(fmt.Sprintf("lax=%v", lax), func(t *testing.T) {
			const stall = 50 * time.Millisecond
			h := start(t, engine.Options{StallTimeout: stall, LaxReadiness: lax})
			ctx := context.Background()
			modelReady := func() bool {
				r, err := h.client.ModelReady(ctx, &pb.ModelReadyRequest{Name: "repeat_int32"})
				return err == nil && r.GetReady()
			}
			serverReady := func() bool {
				r, err := h.client.ServerReady(ctx, &pb.ServerReadyRequest{})
				return err == nil && r.GetReady()
			}
			_, cancelHolder := holdRepeat(t, h)
			time.Sleep(2 * stall) // busy longer than the stall timeout, nothing queued
			if !modelReady() || !serverReady() {
				t.Fatal("a busy model without a queue is not ready")
			}
			next := sendOnly(t, h, repeatReq("next", 1, 0, 0, true))
			waitFor(t, "the model not ready", func() bool { return !modelReady() })
			if serverReady() == !lax {
				t.Fatalf("server ready %v with a wedged model, lax readiness %v", !lax, lax)
			}
			if r, err := h.client.ModelReady(ctx, &pb.ModelReadyRequest{Name: "square_int32"}); err != nil || !r.GetReady() {
				t.Fatalf("another model: %v %v", r, err)
			}
			cancelHolder()
			checkRepeat(t, "next", collect(t, next), 1, true)
			waitFor(t, "ready again", func() bool { return modelReady() && serverReady() })
		})
	}
}

// TestSlowClientDoesNotBlockStream (issue 9): a client that stops reading
// fills the stream's write queue; finishing non-decoupled requests must
// not hold the stream's lock while blocked on it, or the reader (and with
// it in-band cancels and new requests) blocks too.
func TestSlowClientDoesNotBlockStream(t *testing.T) {
	h := start(t, engine.Options{})
	// A fixed 64 KiB window, so that the transport holds few responses.
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := pb.NewGRPCInferenceServiceClient(conn).ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(repeatReq("long", 1, 30_000, 0, true)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the long request running", func() bool { return h.srv.InFlight() == 1 })
	// 300 responses of 16 KiB: more than the window and the write queue
	// (256) hold. The client reads nothing.
	const n = 300
	payload := make([]int32, 4096)
	for i := range n {
		if err := s.Send(build("identity_int32", fmt.Sprint(i), false, tensor.NewInt32("INPUT0", []int64{4096}, payload))); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	waitFor(t, "every identity request executed", func() bool {
		return stats(t, h, "identity_int32").GetInferenceStats().GetSuccess().GetCount() == n
	})
	if err := s.Send(&pb.ModelInferRequest{ModelName: "repeat_int32", Id: "long",
		Parameters: map[string]*pb.InferParameter{engine.ParamCancel: boolParam(true)}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the in-band cancel to stop the long request", func() bool {
		is := stats(t, h, "repeat_int32").GetInferenceStats()
		return is.GetSuccess().GetCount()+is.GetFail().GetCount() == 1
	})
	cancel()
}

// TestIdentityDelayLimit: identity's delay_ms (streamgate's request
// parameter) is bounded like repeat's WAIT, so it cannot hold an instance
// for days either.
func TestIdentityDelayLimit(t *testing.T) {
	h := start(t, engine.Options{})
	for _, ms := range []int64{60_001, -1} {
		req := identityReq("identity_int32", "d", false, 1)
		req.Parameters = map[string]*pb.InferParameter{"delay_ms": int64Param(ms)}
		_, err := h.client.ModelInfer(context.Background(), req)
		want := fmt.Sprintf("delay_ms must be between 0 and 60000, got %d", ms)
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != want {
			t.Fatalf("delay_ms %d: %v, want INVALID_ARGUMENT %q", ms, err, want)
		}
	}
}
