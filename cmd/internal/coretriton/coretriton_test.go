package coretriton_test

import (
	"context"
	"io"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/streamgate/streamgate/cmd/internal/coretriton"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestStandIn checks the stand-in's Triton semantics with grpc-go's
// client: metadata, a decoupled stream with interleaved requests, in-band
// errors and the opt-in empty final response.
func TestStandIn(t *testing.T) {
	srv := coretriton.Start(t, coretriton.Options{})
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewGRPCInferenceServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if r, err := c.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil || !r.Live {
		t.Fatalf("ServerLive = %v, %v", r, err)
	}
	md, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "repeat_int32"})
	if err != nil || len(md.Inputs) != 3 || md.Inputs[0].Datatype != "INT32" {
		t.Fatalf("ModelMetadata = %v, %v", md, err)
	}
	if _, err := c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "nope"}); err == nil {
		t.Fatal("ModelConfig of an unknown model succeeded")
	}
	st, err := c.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	final := map[string]*pb.InferParameter{"triton_enable_empty_final_response": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}}}
	send := func(r *pb.ModelInferRequest) {
		t.Helper()
		if err := st.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	send(&pb.ModelInferRequest{ModelName: "square_int32", Id: "sq", Parameters: final, Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "IN", Datatype: "INT32", Shape: []int64{1}, Contents: &pb.InferTensorContents{IntContents: []int32{3}}}}})
	send(&pb.ModelInferRequest{ModelName: "repeat_int32", Id: "bad", Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "IN", Datatype: "INT32", Shape: []int64{1}, Contents: &pb.InferTensorContents{IntContents: []int32{1}}},
		{Name: "DELAY", Datatype: "UINT32", Shape: []int64{2}, Contents: &pb.InferTensorContents{UintContents: []uint32{0, 0}}},
		{Name: "WAIT", Datatype: "UINT32", Shape: []int64{1}, Contents: &pb.InferTensorContents{UintContents: []uint32{0}}}}})
	send(&pb.ModelInferRequest{ModelName: "nope", Id: "unknown"})
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for {
		r, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ir := r.InferResponse
		switch {
		case r.ErrorMessage != "":
			got[ir.Id] = append(got[ir.Id], "error: "+r.ErrorMessage)
		case len(ir.Outputs) == 0:
			got[ir.Id] = append(got[ir.Id], "final")
		default:
			got[ir.Id] = append(got[ir.Id], ir.Outputs[0].Name)
		}
	}
	want := map[string][]string{
		"sq":      {"OUT", "OUT", "OUT", "final"},
		"bad":     {"error: expected IN and DELAY shape to match, got [1] and [2]"},
		"unknown": {"error: Request for unknown model: 'nope' is not found"},
	}
	for id, w := range want {
		if len(got[id]) != len(w) {
			t.Errorf("%s: %q, want %q", id, got[id], w)
			continue
		}
		for i := range w {
			if got[id][i] != w[i] {
				t.Errorf("%s: %q, want %q", id, got[id], w)
			}
		}
	}
}
