// Package identity implements Triton's `identity` backend
// (triton-inference-server/identity_backend), which Triton's QA uses
// everywhere: each output OUTPUT<i> is a copy of input INPUT<i>. It
// executes batches of requests (backend.BatchBackend), so a config with
// max_batch_size and dynamic_batching loads as it does in Triton.
//
// Config, as Triton's backend checks it: as many inputs as outputs, named
// INPUT<i> and OUTPUT<i>, with the same indices, datatypes and dims (or
// reshape). An optional INPUT<i> left out of a request gives OUTPUT<i> of
// zeros (its dims with -1 as 1, after the request's batch dimension).
//
// Config parameters (string values), as Triton's:
//   - execute_delay_ms: every execution (one per batch) sleeps this long
//     first; instance_wise_delay_multiplier m makes instance k sleep
//     execute_delay_ms × max(m×k, 1). Unlike Triton's, the sleep ends early
//     once every request of the batch is cancelled.
//   - creation_delay_sec: loading the model sleeps this long.
//
// Request parameter delay_ms (int64, streamgate's, at most MaxDelayMs)
// delays an execution by the largest delay_ms of its requests, after
// execute_delay_ms, so tests can hold requests of an unbatched model.
//
// Not reproduced: the example response parameters param0, param1 and
// param2 that Triton's backend attaches to every response.
package identity

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/streamgate/streamgate/engine/backend"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// MaxDelayMs is the largest delay_ms request parameter accepted: one
// minute, so that no request holds an instance for long.
const MaxDelayMs = 60_000

type model struct {
	pairs      []pair // by output, in config order
	delay      time.Duration
	multiplier int
	batching   bool
}

// pair is one OUTPUT<i> and its INPUT<i>.
type pair struct {
	output, input string
	datatype      pb.DataType
	dims          []int64 // the input's dims (or reshape), for zeros
	optional      bool
}

var (
	_ backend.BatchBackend = model{}
	_ backend.Factory      = New
)

// New validates the config as Triton's identity backend does (its texts
// after the field) and reads its parameters.
func New(cfg backend.Config) (backend.Backend, error) {
	c := cfg.Model
	ins, outs := c.GetInput(), c.GetOutput()
	if len(ins) != len(outs) {
		return nil, fmt.Errorf("input: model configuration must have equal input/output pairs")
	}
	inputs := map[string]*pb.ModelInput{}
	for i, in := range ins {
		index, ok := strings.CutPrefix(in.GetName(), "INPUT")
		if !ok {
			return nil, fmt.Errorf("input[%d].name: expected input name to follow INPUT<index> pattern, got '%s'", i, in.GetName())
		}
		inputs[index] = in
	}
	m := model{batching: c.GetMaxBatchSize() > 0}
	for i, out := range outs {
		index, ok := strings.CutPrefix(out.GetName(), "OUTPUT")
		if !ok {
			return nil, fmt.Errorf("output[%d].name: expected output name to follow OUTPUT<index> pattern, got '%s'", i, out.GetName())
		}
		in, ok := inputs[index]
		if !ok {
			return nil, fmt.Errorf("output[%d].name: expected input and output indices to match", i)
		}
		if in.GetDataType() != out.GetDataType() {
			return nil, fmt.Errorf("output[%d].data_type: expected input and output datatype to match, got %s and %s", i, in.GetDataType(), out.GetDataType())
		}
		inDims, outDims := dims(in.GetDims(), in.GetReshape()), dims(out.GetDims(), out.GetReshape())
		if !slices.Equal(inDims, outDims) {
			return nil, fmt.Errorf("output[%d].dims: expected input and output shape to match, got %s and %s", i, tensor.ShapeString(inDims), tensor.ShapeString(outDims))
		}
		m.pairs = append(m.pairs, pair{output: out.GetName(), input: in.GetName(), datatype: in.GetDataType(), dims: inDims, optional: in.GetOptional()})
	}
	delay, err := intParam(c, "execute_delay_ms")
	if err != nil {
		return nil, err
	}
	multiplier, err := intParam(c, "instance_wise_delay_multiplier")
	if err != nil {
		return nil, err
	}
	creation, err := intParam(c, "creation_delay_sec")
	if err != nil {
		return nil, err
	}
	m.delay, m.multiplier = time.Duration(delay)*time.Millisecond, int(multiplier)
	time.Sleep(time.Duration(creation) * time.Second)
	return m, nil
}

// datatype is the protocol's name of a config data type.
func datatype(dt pb.DataType) string {
	if dt == pb.DataType_TYPE_STRING {
		return "BYTES"
	}
	return strings.TrimPrefix(dt.String(), "TYPE_")
}

func dims(d []int64, reshape *pb.ModelTensorReshape) []int64 {
	if reshape != nil {
		return reshape.GetShape()
	}
	return d
}

// intParam reads a non-negative integer config parameter; 0 when absent.
func intParam(c *pb.ModelConfig, key string) (int64, error) {
	v := backend.Param(c, key, "")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("parameters[%s]: want a non-negative integer, got %q", key, v)
	}
	return n, nil
}

// Execute runs one request: a batch of one.
func (m model) Execute(ctx context.Context, req *backend.Request, _ backend.Responder) (*backend.Response, error) {
	res := m.ExecuteBatch(ctx, &backend.Batch{Requests: []*backend.Request{req}})[0]
	return res.Response, res.Err
}

// ExecuteBatch sleeps once for the batch, then copies each request's
// inputs to its outputs.
func (m model) ExecuteBatch(ctx context.Context, b *backend.Batch) []backend.Result {
	wait := m.delay * time.Duration(max(m.multiplier*b.Instance, 1))
	out := make([]backend.Result, len(b.Requests))
	var extra time.Duration
	for i, r := range b.Requests {
		p, ok := r.Parameters["delay_ms"]
		if !ok {
			continue
		}
		if ms := p.GetInt64Param(); ms < 0 || ms > MaxDelayMs {
			out[i].Err = backend.Errorf(codes.InvalidArgument, "delay_ms must be between 0 and %d, got %d", MaxDelayMs, ms)
		} else {
			extra = max(extra, time.Duration(ms)*time.Millisecond)
		}
	}
	cancelled := !backend.Sleep(ctx, wait+extra)
	for i, r := range b.Requests {
		switch {
		case out[i].Err != nil:
		case cancelled:
			out[i].Err = backend.ErrCancelled
		default:
			out[i] = m.respond(r)
		}
	}
	return out
}

func (m model) respond(r *backend.Request) backend.Result {
	var batchDim []int64
	if m.batching {
		for _, p := range m.pairs {
			if t, ok := r.Inputs[p.input]; ok && len(t.Shape) > 0 {
				batchDim = t.Shape[:1]
				break
			}
		}
	}
	resp := &backend.Response{}
	for _, p := range m.pairs {
		if in, ok := r.Inputs[p.input]; ok {
			resp.Outputs = append(resp.Outputs, &tensor.Tensor{Name: p.output, Datatype: in.Datatype, Shape: in.Shape, Raw: in.Raw})
			continue
		}
		if !p.optional {
			return backend.Result{Err: backend.Errorf(codes.Unimplemented, "failed to get input '%s'", p.input)}
		}
		shape := append(slices.Clone(batchDim), p.dims...)
		n := int64(1)
		for i, d := range shape {
			if d < 0 {
				shape[i] = 1
			}
			n *= shape[i]
		}
		dt := datatype(p.datatype)
		size := tensor.ElementSize(dt)
		if size == 0 {
			size = 4 // BYTES: every element the empty string, a zero length
		}
		resp.Outputs = append(resp.Outputs, &tensor.Tensor{Name: p.output, Datatype: dt, Shape: shape, Raw: make([]byte, n*int64(size))})
	}
	return backend.Result{Response: resp}
}
