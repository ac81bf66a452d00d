// Package identity implements `identity_int32`, a non-decoupled model that
// returns its input: INPUT0 INT32 [-1] -> OUTPUT0 INT32 [-1]. Request
// parameter delay_ms (int64) delays the response, so tests can show that
// responses of non-decoupled requests on one stream keep request order.
package identity

import (
	"context"
	"fmt"
	"time"

	"github.com/streamgate/streamgate/engine/backend"
	"github.com/streamgate/streamgate/proto/tensor"
)

type model struct{}

// New builds the identity backend.
func New(cfg backend.Config) (backend.Backend, error) {
	if cfg.Model.GetModelTransactionPolicy().GetDecoupled() {
		return nil, fmt.Errorf("model_transaction_policy.decoupled: identity backend is not decoupled")
	}
	if len(cfg.Model.GetInput()) != 1 || len(cfg.Model.GetOutput()) != 1 {
		return nil, fmt.Errorf("input: identity backend expects one input and one output")
	}
	return model{}, nil
}

func (model) Execute(ctx context.Context, req *backend.Request, _ backend.Responder) (*backend.Response, error) {
	if p, ok := req.Parameters["delay_ms"]; ok {
		if !backend.Sleep(ctx, time.Duration(p.GetInt64Param())*time.Millisecond) {
			return nil, backend.ErrCancelled
		}
	}
	var in *tensor.Tensor
	for _, t := range req.Inputs {
		in = t
	}
	return &backend.Response{Outputs: []*tensor.Tensor{{Name: "OUTPUT0", Datatype: in.Datatype, Shape: in.Shape, Raw: in.Raw}}}, nil
}
