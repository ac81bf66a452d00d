package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/engine/builtin"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// repeatNonDecoupled is Triton's repeat_int32 served with decoupled:
// False, as its QA does (L0_decoupled NonDecoupledTest,
// L0_grpc_state_cleanup repeat_int32_non_decoupled).
var repeatNonDecoupled = strings.Replace(strings.Replace(tritonRepeatConfig, "True", "False", 1), `"repeat_int32"`, `"repeat_nd"`, 1)

// repeatInputs builds a repeat request with explicit IN, DELAY and WAIT.
func repeatInputs(model, id string, in []int32, delay []uint32, wait uint32) *pb.ModelInferRequest {
	return build(model, id, false,
		tensor.NewInt32("IN", []int64{int64(len(in))}, in),
		tensor.NewUint32("DELAY", []int64{int64(len(delay))}, delay),
		tensor.NewUint32("WAIT", []int64{1}, []uint32{wait}))
}

// TestUnaryHasNoFinalFlag (issue 13.2): a unary ModelInfer response
// carries no triton_final_response; the same request's stream response
// does.
func TestUnaryHasNoFinalFlag(t *testing.T) {
	dir := repo(t, map[string]string{
		"repeat_nd/config.pbtxt":      repeatNonDecoupled,
		"identity_int32/config.pbtxt": identityInt32Config,
		"batched/config.pbtxt": `name: "batched" backend: "identity" max_batch_size: 4 dynamic_batching { }
input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] }] output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] }]`,
	})
	h := start(t, engine.Options{ModelDir: dir, Backends: builtin.Backends()})
	for _, req := range []*pb.ModelInferRequest{
		identityReq("identity_int32", "i", false, 1, 2),
		identityReq("batched", "b", true, 1, 2),
		repeatInputs("repeat_nd", "r", []int32{7}, []uint32{0}, 0),
	} {
		t.Run(req.GetModelName(), func(t *testing.T) {
			resp, err := h.client.ModelInfer(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := resp.GetParameters()["triton_final_response"]; ok {
				t.Fatalf("unary response has triton_final_response: %v", resp.GetParameters())
			}
			_, byID := runStream(t, h, req)
			got := byID[req.GetId()]
			if len(got) != 1 {
				t.Fatalf("stream: %v", got)
			}
			if _, ok := got[0].GetInferResponse().GetParameters()["triton_final_response"]; !ok {
				t.Fatalf("stream response lacks triton_final_response: %v", got[0])
			}
		})
	}
}

const identityInt32Config = `name: "identity_int32" backend: "identity" max_batch_size: 0
input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] }] output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] }]`

// TestRepeatNonDecoupled (issue 13.3): repeat serves decoupled: False as
// Triton does. Unary: the first response (QA's NonDecoupledTest data
// matrix, with shorter delays). Stream: exactly one response, the first
// (IDX 0), with the final flag it was sent with (false), still in request
// order (L0_grpc_state_cleanup test_non_decoupled_streaming_multi_response).
func TestRepeatNonDecoupled(t *testing.T) {
	dir := repo(t, map[string]string{"repeat_nd/config.pbtxt": repeatNonDecoupled, "repeat_nd/1/": "", "identity_int32/config.pbtxt": identityInt32Config})
	h := start(t, engine.Options{ModelDir: dir, Backends: builtin.Backends()})
	for _, c := range []struct {
		name        string
		delay, wait uint32
	}{{"no delay", 0, 0}, {"wait below delay", 40, 20}, {"wait above delay", 20, 40}} {
		t.Run("unary "+c.name, func(t *testing.T) {
			resp, err := h.client.ModelInfer(context.Background(), repeatInputs("repeat_nd", "u", []int32{1}, []uint32{c.delay}, c.wait))
			if err != nil {
				t.Fatal(err)
			}
			if int32Out(t, resp, "OUT") != 1 || uint32Out(t, resp, "IDX") != 0 || resp.GetModelVersion() != "1" {
				t.Fatalf("got %v", resp)
			}
		})
	}
	t.Run("stream multi-response", func(t *testing.T) {
		all, _ := runStream(t, h,
			repeatInputs("repeat_nd", "0", []int32{100, 101, 102, 103}, []uint32{0, 0, 0, 0}, 0),
			identityReq("identity_int32", "next", false, 5))
		if len(all) != 2 {
			t.Fatalf("got %d responses, want 2: %v", len(all), all)
		}
		first := all[0].GetInferResponse()
		if first.GetId() != "0" || int32Out(t, first, "OUT") != 100 || uint32Out(t, first, "IDX") != 0 || isFinal(all[0]) {
			t.Fatalf("repeat's one response: %v", all[0])
		}
		if _, ok := first.GetParameters()["triton_final_response"]; !ok {
			t.Fatalf("stream response lacks triton_final_response")
		}
		if all[1].GetInferResponse().GetId() != "next" {
			t.Fatalf("second response %v", all[1])
		}
	})
	t.Run("unary cancel", func(t *testing.T) {
		// QA's test_grpc_async_cancel: the client cancels during DELAY;
		// CANCELLED, and the model stays ready.
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := h.client.ModelInfer(ctx, repeatInputs("repeat_nd", "c", []int32{1}, []uint32{30_000}, 20_000))
			done <- err
		}()
		waitFor(t, "the request running", func() bool { return h.srv.InFlight() == 1 })
		cancel()
		if err := <-done; status.Code(err) != codes.Canceled {
			t.Fatalf("cancelled: %v", err)
		}
		r, err := h.client.ModelReady(context.Background(), &pb.ModelReadyRequest{Name: "repeat_nd"})
		if err != nil || !r.GetReady() {
			t.Fatalf("ready after cancel: %v %v", r, err)
		}
		// The cancel also ended the 20 s WAIT hold: the next request runs.
		ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
		defer stop()
		if _, err := h.client.ModelInfer(ctx, repeatInputs("repeat_nd", "after", []int32{2}, []uint32{0}, 0)); err != nil {
			t.Fatalf("request after the cancel: %v", err)
		}
	})
	t.Run("no response", func(t *testing.T) {
		_, err := h.client.ModelInfer(context.Background(), repeatInputs("repeat_nd", "none", nil, nil, 0))
		if st := status.Convert(err); st.Code() != codes.Internal || st.Message() != "model 'repeat_nd' returned no response" {
			t.Fatalf("zero responses: %v", err)
		}
	})
}
