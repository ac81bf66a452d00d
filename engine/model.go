package engine

import (
	"context"
	"fmt"
	"sync"

	"github.com/streamgate/streamgate/engine/backend"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// modelVersion is the one version every model has.
const modelVersion = "1"

// Model is one loaded model: its config, backend and scheduler. The
// scheduler runs at most `instances` requests on the backend at once (until
// they Release their instance) and lets at most maxQueue wait for one.
type Model struct {
	Name      string
	Config    *pb.ModelConfig
	Decoupled bool
	backend   backend.Backend
	metadata  *pb.ModelMetadataResponse
	inputs    map[string]*pb.ModelInput
	outputs   map[string]*pb.ModelOutput
	required  int

	slots    chan struct{} // one token per idle instance
	mu       sync.Mutex
	waiting  int
	maxQueue int
}

func newModel(cfg *pb.ModelConfig, b backend.Backend, instances, maxQueue int) *Model {
	m := &Model{
		Name:      cfg.GetName(),
		Config:    cfg,
		Decoupled: cfg.GetModelTransactionPolicy().GetDecoupled(),
		backend:   b,
		inputs:    map[string]*pb.ModelInput{},
		outputs:   map[string]*pb.ModelOutput{},
		slots:     make(chan struct{}, instances),
		maxQueue:  maxQueue,
	}
	for range instances {
		m.slots <- struct{}{}
	}
	platform := cfg.GetPlatform()
	if platform == "" {
		platform = cfg.GetBackend()
	}
	m.metadata = &pb.ModelMetadataResponse{Name: m.Name, Versions: []string{modelVersion}, Platform: platform}
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

// close releases the backend's resources.
func (m *Model) close() error {
	if c, ok := m.backend.(backend.Closer); ok {
		return c.Close()
	}
	return nil
}

// acquire waits for an idle instance. It fails at once when maxQueue
// requests are already waiting, and when ctx ends first.
func (m *Model) acquire(ctx context.Context) error {
	select {
	case <-m.slots:
		return nil
	default:
	}
	m.mu.Lock()
	if m.waiting >= m.maxQueue {
		m.mu.Unlock()
		return errQueueFull
	}
	m.waiting++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.waiting--
		m.mu.Unlock()
	}()
	select {
	case <-m.slots:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *Model) release() { m.slots <- struct{}{} }

// decode validates req's inputs and requested outputs against the model's
// config and returns the backend request. Texts follow Triton's.
func (m *Model) decode(req *pb.ModelInferRequest, params map[string]*pb.InferParameter) (*backend.Request, map[string]bool, error) {
	ins := req.GetInputs()
	if len(ins) < m.required || len(ins) > len(m.inputs) {
		if m.required == len(m.inputs) {
			return nil, nil, fmt.Errorf("expected %d inputs but got %d inputs for model '%s'", m.required, len(ins), m.Name)
		}
		return nil, nil, fmt.Errorf("expected number of inputs between %d and %d but got %d inputs for model '%s'", m.required, len(m.inputs), len(ins), m.Name)
	}
	seen := make(map[string]bool, len(ins))
	for _, in := range ins {
		cfg, ok := m.inputs[in.GetName()]
		if !ok {
			return nil, nil, fmt.Errorf("unexpected inference input '%s' for model '%s'", in.GetName(), m.Name)
		}
		if seen[in.GetName()] {
			return nil, nil, fmt.Errorf("input '%s' already exists in request", in.GetName())
		}
		seen[in.GetName()] = true
		if want := Datatype(cfg.GetDataType()); in.GetDatatype() != want {
			return nil, nil, fmt.Errorf("inference input '%s' data-type is '%s', but model '%s' expects '%s'", in.GetName(), in.GetDatatype(), m.Name, want)
		}
		if err := m.checkShape(cfg, in.GetShape()); err != nil {
			return nil, nil, err
		}
	}
	for name, cfg := range m.inputs {
		if !seen[name] && !cfg.GetOptional() {
			return nil, nil, fmt.Errorf("expected %d inputs but got %d inputs for model '%s'", m.required, len(ins), m.Name)
		}
	}
	tensors, err := tensor.FromRequest(req)
	if err != nil {
		return nil, nil, err
	}
	var wanted map[string]bool
	for _, o := range req.GetOutputs() {
		if _, ok := m.outputs[o.GetName()]; !ok {
			return nil, nil, fmt.Errorf("unexpected inference output '%s' for model '%s'", o.GetName(), m.Name)
		}
		if wanted == nil {
			wanted = map[string]bool{}
		}
		wanted[o.GetName()] = true
	}
	br := &backend.Request{
		ID: req.GetId(), ModelName: m.Name, ModelVersion: modelVersion,
		Inputs: make(map[string]*tensor.Tensor, len(tensors)), Parameters: params,
	}
	for _, t := range tensors {
		br.Inputs[t.Name] = t
	}
	return br, wanted, nil
}

func (m *Model) checkShape(cfg *pb.ModelInput, shape []int64) error {
	dims := cfg.GetDims()
	got := shape
	if mbs := int64(m.Config.GetMaxBatchSize()); mbs > 0 {
		if len(shape) == 0 {
			return fmt.Errorf("unexpected shape for input '%s' for model '%s'. Expected %s, got %s", cfg.GetName(), m.Name, tensor.ShapeString(append([]int64{-1}, dims...)), tensor.ShapeString(shape))
		}
		if shape[0] < 1 || shape[0] > mbs {
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
