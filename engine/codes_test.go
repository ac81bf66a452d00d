package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/engine/backend"
	"github.com/streamgate/streamgate/engine/builtin"
	"github.com/streamgate/streamgate/proto/errclass"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// failing is a backend that fails every request with the class named by
// its request parameter "code" ("none": an error without a class).
type failing struct{}

func (failing) Execute(_ context.Context, req *backend.Request, _ backend.Responder) (*backend.Response, error) {
	name := req.Parameters["code"].GetStringParam()
	if name == "none" {
		return nil, errors.New("failed without a class")
	}
	code, ok := errclass.Parse(name)
	if !ok {
		return nil, errors.New("no such code: " + name)
	}
	return nil, backend.Errorf(code, "failed with %s", name)
}

const failingModels = `
name: "%s"
backend: "failing"
max_batch_size: 0
model_transaction_policy { decoupled: %v }
input [{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }]
`

// TestBackendErrorClasses (issue 13.1): every class a backend error can
// have reaches each boundary intact: the status ending a
// triton_grpc_error stream, the in-band streamgate_error_code, and the
// status of a unary call. An error without a class is UNKNOWN.
func TestBackendErrorClasses(t *testing.T) {
	dir := repo(t, map[string]string{
		"fail/config.pbtxt":       fmt.Sprintf(failingModels, "fail", true),
		"fail_unary/config.pbtxt": fmt.Sprintf(failingModels, "fail_unary", false),
	})
	backends := builtin.Backends()
	backends["failing"] = func(backend.Config) (backend.Backend, error) { return failing{}, nil }
	h := start(t, engine.Options{ModelDir: dir, Backends: backends})
	req := func(model, code string) *pb.ModelInferRequest {
		r := build(model, "bad", false, tensor.NewInt32("IN", []int64{1}, []int32{1}))
		r.Parameters = map[string]*pb.InferParameter{"code": param(code)}
		return r
	}
	for _, c := range []struct {
		code string
		want codes.Code
		msg  string
	}{
		{"INVALID_ARGUMENT", codes.InvalidArgument, "failed with INVALID_ARGUMENT"},
		{"NOT_FOUND", codes.NotFound, "failed with NOT_FOUND"},
		{"UNAVAILABLE", codes.Unavailable, "failed with UNAVAILABLE"},
		{"UNIMPLEMENTED", codes.Unimplemented, "failed with UNIMPLEMENTED"},
		{"INTERNAL", codes.Internal, "failed with INTERNAL"},
		{"CANCELLED", codes.Canceled, "failed with CANCELLED"},
		{"none", codes.Unknown, "failed without a class"},
	} {
		t.Run(c.code, func(t *testing.T) {
			// triton_grpc_error: the RPC ends with the error's own status.
			ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "triton_grpc_error", "true"), 20*time.Second)
			defer cancel()
			s, err := h.client.ModelStreamInfer(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Send(req("fail", c.code)); err != nil {
				t.Fatal(err)
			}
			_, err = s.Recv()
			if st := status.Convert(err); st.Code() != c.want || st.Message() != c.msg {
				t.Fatalf("triton_grpc_error stream ended with %v, want %v %q", err, c.want, c.msg)
			}
			// Default mode: one in-band error carrying the class.
			_, byID := runStream(t, h, req("fail", c.code))
			got := byID["bad"]
			if len(got) != 1 || got[0].GetErrorMessage() != c.msg || !isFinal(got[0]) {
				t.Fatalf("in-band: %v", got)
			}
			if class := got[0].GetInferResponse().GetParameters()[errclass.Param].GetStringParam(); class != errclass.Name(c.want) {
				t.Fatalf("%s = %q, want %q", errclass.Param, class, errclass.Name(c.want))
			}
			// Unary: the status.
			_, err = h.client.ModelInfer(context.Background(), req("fail_unary", c.code))
			if st := status.Convert(err); st.Code() != c.want || st.Message() != c.msg {
				t.Fatalf("unary: %v, want %v %q", err, c.want, c.msg)
			}
		})
	}
}
