package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/streamgate/streamgate/engine/backend"
	"github.com/streamgate/streamgate/proto/errclass"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// sink is where one request's responses go. send delivers a non-final data
// response and blocks while the transport is backed up (ctx is the
// request's); finish delivers the last one (nil when nothing is to be
// written; err is the error an error response carries) and must not block
// past the transport's own lifetime.
type sink interface {
	send(ctx context.Context, r *pb.ModelStreamInferResponse) error
	finish(r *pb.ModelStreamInferResponse, err error)
}

// call is one admitted request on its way through a model.
type call struct {
	model      *Model
	req        *backend.Request
	wanted     map[string]bool // requested outputs; nil = all
	version    string          // the version the client asked for
	emptyFinal bool
	out        sink
}

// run executes the call to completion and always finishes its sink once.
func (s *Server) run(ctx context.Context, c *call) {
	m := c.model
	if err := m.acquire(ctx); err != nil {
		if ctx.Err() != nil {
			c.out.finish(c.flagsOnlyFinal(), nil)
			return
		}
		c.out.finish(c.errorResponse(err), err)
		return
	}
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	r := &responder{call: c}
	resp, err := m.backend.Execute(ctx, c.req, r)
	if !r.held.Load() {
		r.Release()
	}
	if err == nil && resp == nil && !m.Decoupled {
		err = errorf(codes.Internal, "model '%s' returned no response", m.Name)
	}
	// A backend error without a class is UNKNOWN, as Triton reports an
	// unclassified backend error.
	err = backend.WithCode(codes.Unknown, err)
	switch {
	case err != nil:
		c.out.finish(c.errorResponse(err), err)
	case resp != nil:
		c.out.finish(c.dataResponse(resp, true), nil)
	default:
		c.out.finish(c.flagsOnlyFinal(), nil)
	}
}

// responder is the backend.Responder (and backend.Holder) of one call.
type responder struct {
	call *call
	once sync.Once
	held atomic.Bool
}

// HoldUntil keeps the instance until t even if Execute returns first.
func (r *responder) HoldUntil(t time.Time) {
	r.held.Store(true)
	time.AfterFunc(time.Until(t), r.Release)
}

func (r *responder) Send(ctx context.Context, resp *backend.Response) error {
	if !r.call.model.Decoupled {
		return errors.New("a non-decoupled model must return its one response")
	}
	if ctx.Err() != nil {
		return backend.ErrCancelled
	}
	if err := r.call.out.send(ctx, r.call.dataResponse(resp, false)); err != nil {
		return backend.ErrCancelled
	}
	return nil
}

func (r *responder) Release() { r.once.Do(r.call.model.release) }

func finalParam(final bool) *pb.InferParameter {
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: final}}
}

func (c *call) dataResponse(resp *backend.Response, final bool) *pb.ModelStreamInferResponse {
	ir := &pb.ModelInferResponse{
		ModelName:    c.model.Name,
		ModelVersion: modelVersion,
		Id:           c.req.ID,
		Parameters:   make(map[string]*pb.InferParameter, len(resp.Parameters)+1),
	}
	for k, v := range resp.Parameters {
		ir.Parameters[k] = v
	}
	ir.Parameters[paramFinal] = finalParam(final)
	outs := resp.Outputs
	if c.wanted != nil {
		outs = make([]*tensor.Tensor, 0, len(resp.Outputs))
		for _, t := range resp.Outputs {
			if c.wanted[t.Name] {
				outs = append(outs, t)
			}
		}
	}
	tensor.ToResponse(ir, outs)
	return &pb.ModelStreamInferResponse{InferResponse: ir}
}

// errorResponse is a model error: final, with the requested version.
func (c *call) errorResponse(err error) *pb.ModelStreamInferResponse {
	return &pb.ModelStreamInferResponse{
		ErrorMessage: err.Error(),
		InferResponse: &pb.ModelInferResponse{
			Id: c.req.ID, ModelName: c.model.Name, ModelVersion: c.version,
			Parameters: map[string]*pb.InferParameter{
				paramFinal:     finalParam(true),
				errclass.Param: errclass.ParamFor(classOf(err, codes.Unknown)),
			},
		},
	}
}

// flagsOnlyFinal is written only to clients that opted in (TRITON.md §2).
func (c *call) flagsOnlyFinal() *pb.ModelStreamInferResponse {
	if !c.emptyFinal || !c.model.Decoupled {
		return nil
	}
	return &pb.ModelStreamInferResponse{InferResponse: &pb.ModelInferResponse{
		Id: c.req.ID, ModelName: c.model.Name, ModelVersion: c.version,
		Parameters: map[string]*pb.InferParameter{paramFinal: finalParam(true)},
	}}
}

// rejectResponse is an error before the request reached a model: the id
// (as in Triton) and the error's class (streamgate's addition).
func rejectResponse(id string, err error) *pb.ModelStreamInferResponse {
	return &pb.ModelStreamInferResponse{ErrorMessage: err.Error(), InferResponse: &pb.ModelInferResponse{
		Id:         id,
		Parameters: map[string]*pb.InferParameter{errclass.Param: errclass.ParamFor(classOf(err, codes.InvalidArgument))},
	}}
}
