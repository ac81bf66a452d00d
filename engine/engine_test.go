package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/engine/builtin"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// harness is an engine serving on loopback and a client connected to it.
type harness struct {
	srv    *engine.Server
	client pb.GRPCInferenceServiceClient
	addr   string
}

func start(t testing.TB, opts engine.Options) *harness {
	t.Helper()
	if opts.Backends == nil {
		opts.Backends = builtin.Backends()
	}
	if opts.Repository == nil {
		opts.Repository = builtin.FS
	}
	srv, err := engine.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-done
	})
	return &harness{srv: srv, client: pb.NewGRPCInferenceServiceClient(conn), addr: lis.Addr().String()}
}

func boolParam(b bool) *pb.InferParameter {
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: b}}
}

// repeatReq builds a repeat_int32 request: IN = [100, 101, ...] of length r,
// every DELAY = delay ms, WAIT = [wait], with raw contents.
func repeatReq(id string, r int, delay, wait uint32, emptyFinal bool) *pb.ModelInferRequest {
	in := make([]int32, r)
	d := make([]uint32, r)
	for i := range in {
		in[i], d[i] = int32(100+i), delay
	}
	return build("repeat_int32", id, emptyFinal,
		tensor.NewInt32("IN", []int64{int64(r)}, in),
		tensor.NewUint32("DELAY", []int64{int64(r)}, d),
		tensor.NewUint32("WAIT", []int64{1}, []uint32{wait}))
}

func squareReq(id string, n int32, emptyFinal bool) *pb.ModelInferRequest {
	return build("square_int32", id, emptyFinal, tensor.NewInt32("IN", []int64{1}, []int32{n}))
}

func build(model, id string, emptyFinal bool, ins ...*tensor.Tensor) *pb.ModelInferRequest {
	req := &pb.ModelInferRequest{ModelName: model, Id: id}
	if emptyFinal {
		req.Parameters = map[string]*pb.InferParameter{"triton_enable_empty_final_response": boolParam(true)}
	}
	for _, t := range ins {
		req.Inputs = append(req.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape})
		req.RawInputContents = append(req.RawInputContents, t.Raw)
	}
	return req
}

// collect reads the stream until EOF and returns every response.
func collect(t *testing.T, s pb.GRPCInferenceService_ModelStreamInferClient) []*pb.ModelStreamInferResponse {
	t.Helper()
	var out []*pb.ModelStreamInferResponse
	for {
		r, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		out = append(out, r)
	}
}

func output(t *testing.T, r *pb.ModelInferResponse, name string) *tensor.Tensor {
	t.Helper()
	outs, err := tensor.FromResponse(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outs {
		if o.Name == name {
			return o
		}
	}
	t.Fatalf("response %v has no output %s", r, name)
	return nil
}

func int32Out(t *testing.T, r *pb.ModelInferResponse, name string) int32 {
	t.Helper()
	v, err := output(t, r, name).Int32s()
	if err != nil || len(v) != 1 {
		t.Fatalf("output %s: %v %v", name, v, err)
	}
	return v[0]
}

func uint32Out(t *testing.T, r *pb.ModelInferResponse, name string) uint32 {
	t.Helper()
	v, err := output(t, r, name).Uint32s()
	if err != nil || len(v) != 1 {
		t.Fatalf("output %s: %v %v", name, v, err)
	}
	return v[0]
}

// runStream sends reqs on one stream, half-closes and returns everything
// that came back, grouped by id in arrival order.
func runStream(t *testing.T, h *harness, reqs ...*pb.ModelInferRequest) (all []*pb.ModelStreamInferResponse, byID map[string][]*pb.ModelStreamInferResponse) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := h.client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if err := s.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	all = collect(t, s)
	byID = map[string][]*pb.ModelStreamInferResponse{}
	for _, r := range all {
		byID[r.GetInferResponse().GetId()] = append(byID[r.GetInferResponse().GetId()], r)
	}
	return all, byID
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(i)
	}
	return out
}
