package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/streamgate/streamgate/engine"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

func isFinal(r *pb.ModelStreamInferResponse) bool {
	return engine.FinalFlag(r.GetInferResponse())
}

// checkRepeat asserts that got holds r data responses OUT=100+j, IDX=j in
// order, then (with opt-in) one flags-only final.
func checkRepeat(t *testing.T, id string, got []*pb.ModelStreamInferResponse, r int, emptyFinal bool) {
	t.Helper()
	want := r
	if emptyFinal {
		want++
	}
	if len(got) != want {
		t.Fatalf("id %s: got %d responses, want %d", id, len(got), want)
	}
	for j := 0; j < r; j++ {
		ir := got[j].GetInferResponse()
		if got[j].GetErrorMessage() != "" || isFinal(got[j]) {
			t.Fatalf("id %s response %d: error %q final %v", id, j, got[j].GetErrorMessage(), isFinal(got[j]))
		}
		if _, ok := ir.GetParameters()["triton_final_response"]; !ok {
			t.Fatalf("id %s response %d lacks triton_final_response", id, j)
		}
		if ir.GetModelName() != "repeat_int32" || ir.GetModelVersion() != "1" {
			t.Fatalf("id %s: model %q version %q", id, ir.GetModelName(), ir.GetModelVersion())
		}
		if out, idx := int32Out(t, ir, "OUT"), uint32Out(t, ir, "IDX"); out != int32(100+j) || idx != uint32(j) {
			t.Fatalf("id %s response %d: OUT=%d IDX=%d", id, j, out, idx)
		}
	}
	if emptyFinal {
		last := got[r]
		if !isFinal(last) || len(last.GetInferResponse().GetOutputs()) != 0 || len(last.GetInferResponse().GetRawOutputContents()) != 0 {
			t.Fatalf("id %s: last response is not a flags-only final: %v", id, last)
		}
	}
}

func TestOneToNone(t *testing.T) {
	h := start(t, engine.Options{})
	for _, n := range []int{1, 5} {
		var reqs []*pb.ModelInferRequest
		for _, id := range ids(n) {
			reqs = append(reqs, repeatReq(id, 0, 10, 0, true))
		}
		_, byID := runStream(t, h, reqs...)
		for _, id := range ids(n) {
			checkRepeat(t, id, byID[id], 0, true)
		}
		// Without the opt-in nothing at all is written.
		reqs = reqs[:0]
		for _, id := range ids(n) {
			reqs = append(reqs, repeatReq(id, 0, 10, 0, false))
		}
		if all, _ := runStream(t, h, reqs...); len(all) != 0 {
			t.Fatalf("N=%d without empty final: got %d responses", n, len(all))
		}
	}
}

func TestOneToOneAndMany(t *testing.T) {
	h := start(t, engine.Options{})
	for _, r := range []int{1, 5} {
		for _, n := range []int{1, 5} {
			for _, wait := range []uint32{0, 50} { // below and above DELAY=10
				var reqs []*pb.ModelInferRequest
				for _, id := range ids(n) {
					reqs = append(reqs, repeatReq(id, r, 10, wait, true))
				}
				_, byID := runStream(t, h, reqs...)
				for _, id := range ids(n) {
					checkRepeat(t, id, byID[id], r, true)
				}
			}
		}
	}
}

func TestInterleaving(t *testing.T) {
	h := start(t, engine.Options{})
	// One instance; WAIT (5 ms) releases it long before the 4 x 100 ms of
	// DELAY are over, so the second request runs beside the first.
	all, byID := runStream(t, h, repeatReq("a", 4, 100, 5, true), repeatReq("b", 4, 100, 5, true))
	checkRepeat(t, "a", byID["a"], 4, true)
	checkRepeat(t, "b", byID["b"], 4, true)
	var order []string
	for _, r := range all {
		order = append(order, r.GetInferResponse().GetId())
	}
	seq := strings.Join(order, "")
	if strings.HasPrefix(seq, "aaaaa") || strings.HasPrefix(seq, "bbbbb") {
		t.Fatalf("responses did not interleave: %s", seq)
	}
}

func TestManyOnOneStream(t *testing.T) {
	h := start(t, engine.Options{})
	var reqs []*pb.ModelInferRequest
	for _, id := range ids(10) {
		reqs = append(reqs, repeatReq(id, 10, 1, 0, true))
	}
	all, byID := runStream(t, h, reqs...)
	if len(all) != 110 {
		t.Fatalf("got %d responses, want 100 data + 10 finals", len(all))
	}
	for _, id := range ids(10) {
		checkRepeat(t, id, byID[id], 10, true)
	}
}

func TestUnaryOnDecoupled(t *testing.T) {
	h := start(t, engine.Options{})
	_, err := h.client.ModelInfer(context.Background(), repeatReq("1", 1, 0, 0, false))
	st := status.Convert(err)
	if st.Code() != codes.Unimplemented || st.Message() != "ModelInfer RPC doesn't support models with decoupled transaction policy" {
		t.Fatalf("got %v", err)
	}
}

func TestWrongShapeKeepsStream(t *testing.T) {
	h := start(t, engine.Options{})
	bad := build("repeat_int32", "bad", true,
		tensor.NewInt32("IN", []int64{1}, []int32{1}),
		tensor.NewUint32("DELAY", []int64{2}, []uint32{1, 2}),
		tensor.NewUint32("WAIT", []int64{1}, []uint32{0}))
	_, byID := runStream(t, h, bad, repeatReq("good", 2, 0, 0, true))
	got := byID["bad"]
	if len(got) != 1 || got[0].GetErrorMessage() != "expected IN and DELAY shape to match, got [1] and [2]" || !isFinal(got[0]) {
		t.Fatalf("bad request got %v", got)
	}
	checkRepeat(t, "good", byID["good"], 2, true)
}

func TestSquare(t *testing.T) {
	h := start(t, engine.Options{})
	for _, emptyFinal := range []bool{false, true} {
		_, byID := runStream(t, h, squareReq("zero", 0, emptyFinal), squareReq("three", 3, emptyFinal))
		extra := 0
		if emptyFinal {
			extra = 1
		}
		if len(byID["zero"]) != extra {
			t.Fatalf("IN=0 emptyFinal=%v: got %d responses", emptyFinal, len(byID["zero"]))
		}
		three := byID["three"]
		if len(three) != 3+extra {
			t.Fatalf("IN=3 emptyFinal=%v: got %d responses", emptyFinal, len(three))
		}
		for _, r := range three[:3] {
			if got := int32Out(t, r.GetInferResponse(), "OUT"); got != 3 || isFinal(r) {
				t.Fatalf("IN=3: OUT=%d final=%v", got, isFinal(r))
			}
		}
	}
}

func TestHalfCloseDeliversInFlight(t *testing.T) {
	h := start(t, engine.Options{})
	// runStream half-closes right after sending; the 3 x 50 ms of work must
	// still arrive before the RPC ends OK.
	_, byID := runStream(t, h, repeatReq("x", 3, 50, 0, true), repeatReq("y", 3, 50, 0, false))
	checkRepeat(t, "x", byID["x"], 3, true)
	checkRepeat(t, "y", byID["y"], 3, false)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCancelRPCStopsEveryRequest(t *testing.T) {
	h := start(t, engine.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	s, err := h.client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids(5) {
		if err := s.Send(repeatReq(id, 100, 1000, 0, true)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "5 requests in flight", func() bool { return h.srv.InFlight() == 5 })
	cancel()
	if _, err := s.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("recv after cancel: %v", err)
	}
	waitFor(t, "requests to stop", func() bool { return h.srv.InFlight() == 0 })
	ready, err := h.client.ServerReady(context.Background(), &pb.ServerReadyRequest{})
	if err != nil || !ready.GetReady() {
		t.Fatalf("server not ready after cancel: %v %v", ready, err)
	}
}

func TestInbandCancelOneRequest(t *testing.T) {
	h := start(t, engine.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := h.client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(repeatReq("slow", 50, 200, 0, true)); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(repeatReq("other", 3, 20, 0, true)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "2 requests in flight", func() bool { return h.srv.InFlight() == 2 })
	cancelReq := &pb.ModelInferRequest{ModelName: "repeat_int32", Id: "slow",
		Parameters: map[string]*pb.InferParameter{engine.ParamCancel: boolParam(true)}}
	if err := s.Send(cancelReq); err != nil {
		t.Fatal(err)
	}
	// Unknown ids are ignored.
	if err := s.Send(&pb.ModelInferRequest{ModelName: "repeat_int32", Id: "nope",
		Parameters: map[string]*pb.InferParameter{engine.ParamCancel: boolParam(true)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	byID := map[string][]*pb.ModelStreamInferResponse{}
	for _, r := range collect(t, s) {
		byID[r.GetInferResponse().GetId()] = append(byID[r.GetInferResponse().GetId()], r)
	}
	slow := byID["slow"]
	if len(slow) == 0 || len(slow) > 3 || !isFinal(slow[len(slow)-1]) {
		t.Fatalf("cancelled request: %d responses, last final=%v", len(slow), len(slow) > 0 && isFinal(slow[len(slow)-1]))
	}
	checkRepeat(t, "other", byID["other"], 3, true)
	if len(byID["nope"]) != 0 {
		t.Fatalf("cancel of unknown id answered: %v", byID["nope"])
	}
}

func TestNonDecoupledKeepsRequestOrder(t *testing.T) {
	h := start(t, engine.Options{})
	var reqs []*pb.ModelInferRequest
	for i, delay := range []int64{150, 0, 75, 0} {
		r := build("identity_int32", ids(4)[i], false, tensor.NewInt32("INPUT0", []int64{1}, []int32{int32(i)}))
		r.Parameters = map[string]*pb.InferParameter{"delay_ms": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: delay}}}
		reqs = append(reqs, r)
	}
	all, _ := runStream(t, h, reqs...)
	if len(all) != 4 {
		t.Fatalf("got %d responses, want 4", len(all))
	}
	for i, r := range all {
		if r.GetInferResponse().GetId() != ids(4)[i] || !isFinal(r) {
			t.Fatalf("response %d: id %s final %v", i, r.GetInferResponse().GetId(), isFinal(r))
		}
		v, _ := output(t, r.GetInferResponse(), "OUTPUT0").Int32s()
		if v[0] != int32(i) {
			t.Fatalf("response %d: OUTPUT0 %v", i, v)
		}
	}
	// And unary works for it.
	resp, err := h.client.ModelInfer(context.Background(), reqs[1])
	if err != nil || resp.GetId() != "1" {
		t.Fatalf("unary identity: %v %v", resp, err)
	}
}

// TestWaitHoldsInstance: repeat's one instance is busy for WAIT ms even
// when the request's responses are done sooner, so the next request on it
// starts no earlier than WAIT after the first.
func TestWaitHoldsInstance(t *testing.T) {
	h := start(t, engine.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := h.client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	for _, id := range []string{"first", "second"} {
		if err := s.Send(repeatReq(id, 1, 0, 300, false)); err != nil {
			t.Fatal(err)
		}
	}
	arrived := map[string]time.Duration{}
	for len(arrived) < 2 {
		r, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		arrived[r.GetInferResponse().GetId()] = time.Since(begin)
	}
	// Both were sent after begin, and each answers at once (DELAY 0).
	// With the instance held for the first one's WAIT, the later response
	// cannot leave before WAIT has passed; run side by side, both would
	// come at once. A busy machine only makes them later.
	later := max(arrived["first"], arrived["second"])
	if later < 300*time.Millisecond {
		t.Fatalf("the later response came %v after both were sent, before the earlier request's WAIT of 300 ms was over", later)
	}
}

// TestStreamDeadlineEndsWithStatus: a stream whose gRPC deadline passes
// with requests in flight ends with DEADLINE_EXCEEDED "Deadline Exceeded"
// from the engine, as Triton's server ends it, and its requests stop. The
// client's own timer would say "context deadline exceeded", and grpc-go's
// server reset at the deadline reaches a grpc core client as "Received
// RST_STREAM with error code 8"; the engine ends the RPC a margin before
// both.
func TestStreamDeadlineEndsWithStatus(t *testing.T) {
	h := start(t, engine.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	s, err := h.client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids(3) {
		if err := s.Send(repeatReq(id, 100, 1000, 0, true)); err != nil {
			t.Fatal(err)
		}
	}
	for {
		_, err := s.Recv()
		if err == nil {
			continue
		}
		if st := status.Convert(err); st.Code() != codes.DeadlineExceeded || st.Message() != "Deadline Exceeded" {
			t.Fatalf("stream ended with %v, want DeadlineExceeded %q from the engine", err, "Deadline Exceeded")
		}
		break
	}
	waitFor(t, "requests to stop", func() bool { return h.srv.InFlight() == 0 })
}
