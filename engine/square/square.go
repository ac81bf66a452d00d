// Package square implements Triton's canonical decoupled `square` backend
// (model square_int32): for IN[0] = n it sends n responses OUT = n, checking
// for cancellation before each, then a flags-only final. IN = 0 gives zero
// responses.
//
// Config parameters (string values, nanoseconds), as in Triton's test
// backend: CUSTOM_INFER_DELAY_NS (once before the first response) and
// CUSTOM_OUTPUT_DELAY_NS (before every response).
package square

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/streamgate/streamgate/engine/backend"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

type model struct {
	inferDelay, outputDelay time.Duration
}

// New validates the config the way Triton's square backend does.
func New(cfg backend.Config) (backend.Backend, error) {
	c := cfg.Model
	if !c.GetModelTransactionPolicy().GetDecoupled() {
		return nil, fmt.Errorf("model_transaction_policy.decoupled: square backend requires a decoupled model")
	}
	if len(c.GetInput()) != 1 || c.GetInput()[0].GetName() != "IN" || c.GetInput()[0].GetDataType() != pb.DataType_TYPE_INT32 {
		return nil, fmt.Errorf("input: square backend expects one input IN TYPE_INT32")
	}
	if len(c.GetOutput()) != 1 || c.GetOutput()[0].GetName() != "OUT" || c.GetOutput()[0].GetDataType() != pb.DataType_TYPE_INT32 {
		return nil, fmt.Errorf("output: square backend expects one output OUT TYPE_INT32")
	}
	m := model{}
	for key, dst := range map[string]*time.Duration{"CUSTOM_INFER_DELAY_NS": &m.inferDelay, "CUSTOM_OUTPUT_DELAY_NS": &m.outputDelay} {
		if v := backend.Param(c, key, ""); v != "" {
			ns, err := strconv.ParseInt(v, 10, 64)
			if err != nil || ns < 0 {
				return nil, fmt.Errorf("parameters[%s]: want a non-negative integer of nanoseconds, got %q", key, v)
			}
			*dst = time.Duration(ns)
		}
	}
	return m, nil
}

func (m model) Execute(ctx context.Context, req *backend.Request, r backend.Responder) (*backend.Response, error) {
	t := req.Inputs["IN"]
	if !(len(t.Shape) == 1 && t.Shape[0] == 1) && !(len(t.Shape) == 2 && t.Shape[0] == 1 && t.Shape[1] == 1) {
		return nil, backend.Errorf(codes.InvalidArgument, "unexpected shape for IN input")
	}
	in, err := t.Int32s()
	if err != nil {
		return nil, backend.WithCode(codes.InvalidArgument, err)
	}
	n := in[0]
	if n < 0 {
		return nil, backend.Errorf(codes.InvalidArgument, "IN must be non-negative, got %d", n)
	}
	r.Release()
	if !backend.Sleep(ctx, m.inferDelay) {
		return nil, nil
	}
	for i := int32(0); i < n; i++ {
		if !backend.Sleep(ctx, m.outputDelay) { // also the cancellation check before each response
			return nil, nil
		}
		if err := r.Send(ctx, &backend.Response{Outputs: []*tensor.Tensor{tensor.NewInt32("OUT", []int64{1}, []int32{n})}}); err != nil {
			return nil, nil
		}
	}
	return nil, nil
}
