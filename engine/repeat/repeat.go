// Package repeat implements Triton's canonical decoupled `repeat` backend
// (model repeat_int32): for inputs IN[n], DELAY[n] and WAIT[1] it sends n
// responses OUT=IN[i], IDX=i, the i-th after sleeping DELAY[i] ms, then a
// flags-only final. The instance is released after WAIT ms, whether the
// request is done by then or not, so one instance overlaps requests; a
// cancelled request releases it at once (Triton's holds it for WAIT).
//
// Like Triton's, it also serves a model with decoupled: false; the engine
// then delivers the first response only, as Triton does.
//
// Unlike Triton's, it refuses a WAIT or a DELAY element above MaxDelay, so
// one request cannot hold an instance for days (UINT32 ms allow 49.7).
package repeat

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/streamgate/streamgate/engine/backend"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// MaxDelay is the largest WAIT and the largest DELAY element accepted, in
// milliseconds: one minute.
const MaxDelay = 60_000

type model struct{}

// New validates the config the way Triton's repeat backend does.
func New(cfg backend.Config) (backend.Backend, error) {
	c := cfg.Model
	if c.GetMaxBatchSize() != 0 {
		return nil, fmt.Errorf("max_batch_size: repeat backend only supports max_batch_size 0, got %d", c.GetMaxBatchSize())
	}
	want := []struct {
		name string
		dt   pb.DataType
	}{{"IN", pb.DataType_TYPE_INT32}, {"DELAY", pb.DataType_TYPE_UINT32}, {"WAIT", pb.DataType_TYPE_UINT32}}
	if len(c.GetInput()) != len(want) {
		return nil, fmt.Errorf("input: repeat backend expects 3 inputs (IN, DELAY, WAIT), got %d", len(c.GetInput()))
	}
	for i, w := range want {
		in := c.GetInput()[i]
		if in.GetName() != w.name || in.GetDataType() != w.dt {
			return nil, fmt.Errorf("input[%d]: repeat backend expects %s %s, got %s %s", i, w.name, w.dt, in.GetName(), in.GetDataType())
		}
	}
	outs := []struct {
		name string
		dt   pb.DataType
	}{{"OUT", pb.DataType_TYPE_INT32}, {"IDX", pb.DataType_TYPE_UINT32}}
	if len(c.GetOutput()) != len(outs) {
		return nil, fmt.Errorf("output: repeat backend expects 2 outputs (OUT, IDX), got %d", len(c.GetOutput()))
	}
	for i, w := range outs {
		o := c.GetOutput()[i]
		if o.GetName() != w.name || o.GetDataType() != w.dt {
			return nil, fmt.Errorf("output[%d]: repeat backend expects %s %s, got %s %s", i, w.name, w.dt, o.GetName(), o.GetDataType())
		}
	}
	return model{}, nil
}

func (model) Execute(ctx context.Context, req *backend.Request, r backend.Responder) (*backend.Response, error) {
	in, err := req.Inputs["IN"].Int32s()
	if err != nil {
		return nil, backend.WithCode(codes.InvalidArgument, err)
	}
	delay, err := req.Inputs["DELAY"].Uint32s()
	if err != nil {
		return nil, backend.WithCode(codes.InvalidArgument, err)
	}
	wait, err := req.Inputs["WAIT"].Uint32s()
	if err != nil {
		return nil, backend.WithCode(codes.InvalidArgument, err)
	}
	if len(in) != len(delay) {
		return nil, backend.Errorf(codes.InvalidArgument, "expected IN and DELAY shape to match, got %s and %s",
			tensor.ShapeString(req.Inputs["IN"].Shape), tensor.ShapeString(req.Inputs["DELAY"].Shape))
	}
	if len(wait) != 1 {
		return nil, backend.Errorf(codes.InvalidArgument, "unexpected size for WAIT input")
	}
	if wait[0] > MaxDelay {
		return nil, backend.Errorf(codes.InvalidArgument, "WAIT must be at most %d ms, got %d", MaxDelay, wait[0])
	}
	for i, d := range delay {
		if d > MaxDelay {
			return nil, backend.Errorf(codes.InvalidArgument, "DELAY[%d] must be at most %d ms, got %d", i, MaxDelay, d)
		}
	}
	// The instance is busy for exactly WAIT ms, as Triton's execute blocks
	// for WAIT whether or not the responses are done by then.
	waitFor := time.Duration(wait[0]) * time.Millisecond
	if h, ok := r.(backend.Holder); ok {
		h.HoldUntil(time.Now().Add(waitFor))
	} else {
		release := time.AfterFunc(waitFor, r.Release)
		defer release.Stop()
	}

	for i, v := range in {
		if !backend.Sleep(ctx, time.Duration(delay[i])*time.Millisecond) {
			return nil, nil // cancelled: only the flags-only final remains
		}
		err := r.Send(ctx, &backend.Response{Outputs: []*tensor.Tensor{
			tensor.NewInt32("OUT", []int64{1}, []int32{v}),
			tensor.NewUint32("IDX", []int64{1}, []uint32{uint32(i)}),
		}})
		if err != nil {
			return nil, nil
		}
	}
	return nil, nil
}
