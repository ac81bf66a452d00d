package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/streamgate/streamgate/engine/backend"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// Model is one loaded version of a model: its config, backend, scheduler
// and statistics.
type Model struct {
	Name      string
	Version   string // the version's number, "1" when the repository has no version directories
	Config    *pb.ModelConfig
	Decoupled bool
	backend   backend.Backend
	metadata  *pb.ModelMetadataResponse
	inputs    map[string]*pb.ModelInput
	outputs   map[string]*pb.ModelOutput
	required  int

	sched batcher
	seqs  *sequencer // sched, for models with sequence_batching; else nil
	stats modelStats
}

// batcher chooses which queued requests run together on which instance:
// the scheduler (dynamic batching, or none) or the sequencer (sequence
// batching). release is called once per batch, when its instance is free.
type batcher interface {
	submit(ctx context.Context, c *call) (*batch, error)
	release(instance int)
	stalled(now time.Time, after time.Duration) bool
	pending() int
	close()
}

var (
	_ batcher = (*scheduler)(nil)
	_ batcher = (*sequencer)(nil)
)

// newModel builds a model version; seq is its sequence_batching, read by
// newSeqConfig, when it has one.
func newModel(cfg *pb.ModelConfig, version string, b backend.Backend, instances int, seq *seqConfig) *Model {
	m := &Model{
		Name:      cfg.GetName(),
		Version:   version,
		Config:    cfg,
		Decoupled: cfg.GetModelTransactionPolicy().GetDecoupled(),
		backend:   b,
		inputs:    map[string]*pb.ModelInput{},
		outputs:   map[string]*pb.ModelOutput{},
	}
	if seq != nil {
		m.seqs = newSequencer(*seq, m.Name, instances)
		m.sched = m.seqs
	} else {
		m.sched = newScheduler(newSchedConfig(cfg), instances)
	}
	platform := cfg.GetPlatform()
	if platform == "" {
		platform = cfg.GetBackend()
	}
	m.metadata = &pb.ModelMetadataResponse{Name: m.Name, Versions: []string{version}, Platform: platform}
	batch := cfg.GetMaxBatchSize() > 0
	shape := func(dims []int64) []int64 {
		if batch {
			return append([]int64{-1}, dims...)
		}
		return append([]int64(nil), dims...)
	}
	for _, in := range cfg.GetInput() {
		m.inputs[in.GetName()] = in
		if !in.GetOptional() {
			m.required++
		}
		m.metadata.Inputs = append(m.metadata.Inputs, &pb.ModelMetadataResponse_TensorMetadata{
			Name: in.GetName(), Datatype: Datatype(in.GetDataType()), Shape: shape(in.GetDims())})
	}
	for _, out := range cfg.GetOutput() {
		m.outputs[out.GetName()] = out
		m.metadata.Outputs = append(m.metadata.Outputs, &pb.ModelMetadataResponse_TensorMetadata{
			Name: out.GetName(), Datatype: Datatype(out.GetDataType()), Shape: shape(out.GetDims())})
	}
	return m
}

// close fails the requests still queued and releases the backend's
// resources.
func (m *Model) close() error {
	m.sched.close()
	if c, ok := m.backend.(backend.Closer); ok {
		return c.Close()
	}
	return nil
}

// decode validates req's inputs and requested outputs against the model's
// config and returns the backend request and the request's batch size (its
// inputs' first dimension for a batching model, else 1). Texts follow
// Triton's.
func (m *Model) decode(req *pb.ModelInferRequest, params map[string]*pb.InferParameter) (*backend.Request, map[string]bool, int, error) {
	ins := req.GetInputs()
	if len(ins) < m.required || len(ins) > len(m.inputs) {
		if m.required == len(m.inputs) {
			return nil, nil, 0, fmt.Errorf("expected %d inputs but got %d inputs for model '%s'", m.required, len(ins), m.Name)
		}
		return nil, nil, 0, fmt.Errorf("expected number of inputs between %d and %d but got %d inputs for model '%s'", m.required, len(m.inputs), len(ins), m.Name)
	}
	seen := make(map[string]bool, len(ins))
	batchSize := 0
	for _, in := range ins {
		cfg, ok := m.inputs[in.GetName()]
		if !ok {
			return nil, nil, 0, fmt.Errorf("unexpected inference input '%s' for model '%s'", in.GetName(), m.Name)
		}
		if seen[in.GetName()] {
			return nil, nil, 0, fmt.Errorf("input '%s' already exists in request", in.GetName())
		}
		seen[in.GetName()] = true
		if want := Datatype(cfg.GetDataType()); in.GetDatatype() != want {
			return nil, nil, 0, fmt.Errorf("inference input '%s' data-type is '%s', but model '%s' expects '%s'", in.GetName(), in.GetDatatype(), m.Name, want)
		}
		if err := m.checkShape(cfg, in.GetShape()); err != nil {
			return nil, nil, 0, err
		}
		if m.Config.GetMaxBatchSize() > 0 {
			if batchSize == 0 {
				batchSize = int(in.GetShape()[0])
			} else if int(in.GetShape()[0]) != batchSize {
				return nil, nil, 0, fmt.Errorf("input '%s' batch size does not match other inputs for '%s'", in.GetName(), m.Name)
			}
		}
	}
	for name, cfg := range m.inputs {
		if !seen[name] && !cfg.GetOptional() {
			return nil, nil, 0, fmt.Errorf("expected %d inputs but got %d inputs for model '%s'", m.required, len(ins), m.Name)
		}
	}
	tensors, err := tensor.FromRequest(req)
	if err != nil {
		return nil, nil, 0, err
	}
	var wanted map[string]bool
	for _, o := range req.GetOutputs() {
		if _, ok := m.outputs[o.GetName()]; !ok {
			return nil, nil, 0, fmt.Errorf("unexpected inference output '%s' for model '%s'", o.GetName(), m.Name)
		}
		if wanted == nil {
			wanted = map[string]bool{}
		}
		wanted[o.GetName()] = true
	}
	br := &backend.Request{
		ID: req.GetId(), ModelName: m.Name, ModelVersion: m.Version,
		Inputs: make(map[string]*tensor.Tensor, len(tensors)), Parameters: params,
	}
	for _, t := range tensors {
		br.Inputs[t.Name] = t
	}
	return br, wanted, max(batchSize, 1), nil
}

func (m *Model) checkShape(cfg *pb.ModelInput, shape []int64) error {
	dims := cfg.GetDims()
	got := shape
	if mbs := int64(m.Config.GetMaxBatchSize()); mbs > 0 {
		if len(shape) == 0 {
			return fmt.Errorf("input '%s' has no shape but model requires batch dimension for '%s'", cfg.GetName(), m.Name)
		}
		if shape[0] < 1 {
			return fmt.Errorf("inference request batch-size must be >= 1 for '%s'", m.Name)
		}
		if shape[0] > mbs {
			return fmt.Errorf("inference request batch-size must be <= %d for '%s'", mbs, m.Name)
		}
		got = shape[1:]
	}
	ok := len(got) == len(dims)
	for i := 0; ok && i < len(dims); i++ {
		ok = got[i] >= 0 && (dims[i] == -1 || dims[i] == got[i])
	}
	if !ok {
		want := dims
		if m.Config.GetMaxBatchSize() > 0 {
			want = append([]int64{-1}, dims...)
		}
		return fmt.Errorf("unexpected shape for input '%s' for model '%s'. Expected %s, got %s", cfg.GetName(), m.Name, tensor.ShapeString(want), tensor.ShapeString(shape))
	}
	return nil
}
