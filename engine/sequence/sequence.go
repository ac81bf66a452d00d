// Package sequence implements the model backends of Triton's sequence
// examples and QA, so that NVIDIA's unmodified sequence clients and QA
// tests run against streamgate's engine. Each is a backend.BatchBackend
// for a model with sequence_batching and one INT32 input and output (any
// names, dims [-1] or [1]); the engine's sequence batcher fills the
// control inputs the config names.
//
//   - "sequence" (Triton's qa/custom_models custom_sequence_int32,
//     src/test/sequence): an accumulator per instance and batch row (the
//     direct strategy pins a sequence to its row). READY false: the row is
//     ignored; START: acc = sum(INPUT); otherwise acc += sum(INPUT).
//     OUTPUT has INPUT's shape, filled with acc.
//   - "dyna_sequence" (src/test/dyna_sequence, simple_string_dyna_sequence):
//     an accumulator per correlation id (the CORRID control, an integer or
//     a string that parses as one). START: acc = INPUT; otherwise acc +=
//     INPUT; END adds the id, and the id is forgotten.
//   - "simple_sequence" (the ONNX graphs of simple_sequence and
//     simple_dyna_sequence): stateless, OUTPUT = (INPUT + START +
//     END·CORRID)·READY per element, each control counting 0 or 1 (READY 1)
//     when the config has none.
//
// Config parameter execute_delay_ms (string, as Triton's) makes each
// execution sleep first; the sleep ends early once the whole batch is
// cancelled. A batch larger than max_batch_size fails with Triton's
// UNSUPPORTED text.
package sequence

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/streamgate/streamgate/engine/backend"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// Backends maps the config backend names to their factories.
func Backends() map[string]backend.Factory {
	return map[string]backend.Factory{
		"sequence":        func(cfg backend.Config) (backend.Backend, error) { return newModel(cfg, slotAccumulator) },
		"dyna_sequence":   func(cfg backend.Config) (backend.Backend, error) { return newModel(cfg, idAccumulator) },
		"simple_sequence": func(cfg backend.Config) (backend.Backend, error) { return newModel(cfg, stateless) },
	}
}

type kind int

const (
	slotAccumulator kind = iota
	idAccumulator
	stateless
)

type model struct {
	kind              kind
	in, out           string
	start, end, ready *backend.Control
	corrid            string
	delay             time.Duration
	maxBatch          int

	mu   sync.Mutex
	rows map[[2]int]int32 // slotAccumulator: by (instance, row)
	ids  map[idKey]int32  // idAccumulator: by correlation id
}

type idKey struct {
	num uint64
	str string
}

var _ backend.BatchBackend = (*model)(nil)

func newModel(cfg backend.Config, k kind) (backend.Backend, error) {
	c := cfg.Model
	if c.GetSequenceBatching() == nil {
		return nil, fmt.Errorf("sequence_batching: model '%s' needs sequence_batching", c.GetName())
	}
	if len(c.GetInput()) != 1 || c.GetInput()[0].GetDataType() != pb.DataType_TYPE_INT32 {
		return nil, fmt.Errorf("input: model '%s' needs exactly one TYPE_INT32 input", c.GetName())
	}
	if len(c.GetOutput()) != 1 || c.GetOutput()[0].GetDataType() != pb.DataType_TYPE_INT32 {
		return nil, fmt.Errorf("output: model '%s' needs exactly one TYPE_INT32 output", c.GetName())
	}
	m := &model{
		kind: k, in: c.GetInput()[0].GetName(), out: c.GetOutput()[0].GetName(),
		start:    backend.SequenceControl(c, pb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_START),
		end:      backend.SequenceControl(c, pb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_END),
		ready:    backend.SequenceControl(c, pb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_READY),
		corrid:   backend.CorrIDInput(c),
		maxBatch: max(1, int(c.GetMaxBatchSize())),
		rows:     map[[2]int]int32{},
		ids:      map[idKey]int32{},
	}
	if k == idAccumulator && m.corrid == "" {
		return nil, fmt.Errorf("sequence_batching.control_input: backend dyna_sequence needs a CONTROL_SEQUENCE_CORRID input")
	}
	delay, err := backend.MillisParam(c, "execute_delay_ms")
	if err != nil {
		return nil, err
	}
	m.delay = delay
	return m, nil
}

// Execute runs one request: a batch of one on instance 0.
func (m *model) Execute(ctx context.Context, req *backend.Request, _ backend.Responder) (*backend.Response, error) {
	res := m.ExecuteBatch(ctx, &backend.Batch{Requests: []*backend.Request{req}})[0]
	return res.Response, res.Err
}

func (m *model) ExecuteBatch(ctx context.Context, b *backend.Batch) []backend.Result {
	out := make([]backend.Result, len(b.Requests))
	if len(b.Requests) > m.maxBatch {
		for i := range out {
			out[i].Err = backend.Errorf(codes.Unimplemented, "unable to execute batch larger than max-batch-size")
		}
		return out
	}
	cancelled := !backend.Sleep(ctx, m.delay)
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, r := range b.Requests {
		if cancelled {
			out[i].Err = backend.ErrCancelled
			continue
		}
		out[i] = m.row(b.Instance, i, r)
	}
	return out
}

// row computes one batch row.
func (m *model) row(instance, row int, r *backend.Request) backend.Result {
	t := r.Inputs[m.in]
	vals, err := t.Int32s()
	if err != nil {
		return backend.Result{Err: backend.WithCode(codes.InvalidArgument, err)}
	}
	ready := m.ready == nil || m.ready.Of(r)
	start, end := m.start.Of(r), m.end.Of(r)
	res := make([]int32, len(vals))
	switch {
	case !ready:
		// A padding row: its inputs mean nothing, its output is dropped.
	case m.kind == stateless:
		var add int32
		if start {
			add++
		}
		if end {
			num, str, isStr := backend.CorrID(r.Inputs[m.corrid])
			id, err := idValue(num, str, isStr)
			if err != nil {
				return backend.Result{Err: err}
			}
			add += id
		}
		for i, v := range vals {
			res[i] = v + add
		}
	case m.kind == slotAccumulator:
		var sum int32
		for _, v := range vals {
			sum += v
		}
		key := [2]int{instance, row}
		if start {
			m.rows[key] = sum
		} else {
			m.rows[key] += sum
		}
		fill(res, m.rows[key])
	default:
		num, str, isStr := backend.CorrID(r.Inputs[m.corrid])
		key := idKey{num: num, str: str}
		var sum int32
		for _, v := range vals {
			sum += v
		}
		if start {
			m.ids[key] = sum
		} else {
			m.ids[key] += sum
		}
		acc := m.ids[key]
		if end {
			id, err := idValue(num, str, isStr)
			if err != nil {
				delete(m.ids, key)
				return backend.Result{Err: err}
			}
			acc += id
			delete(m.ids, key)
		}
		fill(res, acc)
	}
	return backend.Result{Response: &backend.Response{Outputs: []*tensor.Tensor{tensor.NewInt32(m.out, t.Shape, res)}}}
}

// idValue is a correlation id as the models add it: the low 32 bits of an
// integer id, or a string id parsed as an integer (std::stoi in Triton's
// backend).
func idValue(num uint64, str string, isStr bool) (int32, error) {
	if !isStr {
		return int32(num), nil
	}
	v, err := strconv.ParseInt(str, 10, 32)
	if err != nil {
		return 0, backend.Errorf(codes.InvalidArgument, "unable to convert correlation ID '%s' to an integer", str)
	}
	return int32(v), nil
}

func fill(s []int32, v int32) {
	for i := range s {
		s[i] = v
	}
}
