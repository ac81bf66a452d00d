package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// seqID is a sequence's correlation id: an unsigned integer or a string
// (Triton's InferenceRequest::SequenceId). Id 0 and "" mean "not in a
// sequence".
type seqID struct {
	num   uint64
	str   string
	isStr bool
}

func (id seqID) none() bool { return id.num == 0 && id.str == "" }

// String is the id as Triton prints it in errors: decimal, or the string.
func (id seqID) String() string {
	if id.isStr {
		return id.str
	}
	return strconv.FormatUint(id.num, 10)
}

// seqFlags is what a request's parameters say about its sequence.
type seqFlags struct {
	id         seqID
	start, end bool
}

// defaultSequenceIdle is max_sequence_idle_microseconds when the config
// leaves it 0 (Triton's SEQUENCE_IDLE_DEFAULT_MICROSECONDS).
const defaultSequenceIdle = time.Second

// seqConfig is a model's sequence_batching in the form the sequencer uses.
type seqConfig struct {
	oldest    bool          // the oldest strategy (else direct)
	slots     int           // sequence slots per instance
	maxBatch  int           // requests in one execution: max(1, max_batch_size)
	batchDim  bool          // max_batch_size > 0: control and state tensors have a batch dimension
	idle      time.Duration // max_sequence_idle_microseconds
	delay     time.Duration // the strategy's max_queue_delay_microseconds
	minUtil   float64       // direct: minimum_slot_utilization
	preferred []int         // oldest: preferred batch sizes, ascending; never empty

	start, end, ready *boolControl // nil: the model has no such control input
	corrid            *corridControl
	states            []stateConfig
}

// boolControl is a START, END or READY control input: its false and true
// tensors, shared by every request (backends never write their inputs).
type boolControl struct{ off, on *tensor.Tensor }

func (b *boolControl) tensor(v bool) *tensor.Tensor {
	if v {
		return b.on
	}
	return b.off
}

// corridControl is the CORRID control input.
type corridControl struct {
	name     string
	datatype pb.DataType
}

// stateConfig is one implicit state: the input the model reads it from,
// the output it writes its next value to, and its value at START.
type stateConfig struct {
	input, output string
	initial       *tensor.Tensor
}

// normalizeSequenceBatching fills the defaults Triton's config
// normalization fills, so that ModelConfig reports them: the idle limit
// and the oldest strategy's preferred batch size.
func normalizeSequenceBatching(cfg *pb.ModelConfig) {
	sb := cfg.GetSequenceBatching()
	if sb == nil {
		return
	}
	if sb.GetMaxSequenceIdleMicroseconds() == 0 {
		sb.MaxSequenceIdleMicroseconds = uint64(defaultSequenceIdle / time.Microsecond)
	}
	if o := sb.GetOldest(); o != nil && len(o.GetPreferredBatchSize()) == 0 && cfg.GetMaxBatchSize() > 0 {
		o.PreferredBatchSize = []int32{cfg.GetMaxBatchSize()}
	}
}

// newSeqConfig validates cfg's sequence_batching as Triton does, with its
// texts after the field at fault, and reads it.
func newSeqConfig(cfg *pb.ModelConfig) (seqConfig, error) {
	sb := cfg.GetSequenceBatching()
	name, mbs := cfg.GetName(), int(cfg.GetMaxBatchSize())
	sc := seqConfig{
		slots:    max(1, mbs),
		maxBatch: max(1, mbs),
		batchDim: mbs > 0,
		idle:     time.Duration(sb.GetMaxSequenceIdleMicroseconds()) * time.Microsecond,
	}
	if sc.idle <= 0 {
		sc.idle = defaultSequenceIdle
	}
	if cfg.GetResponseCache().GetEnable() {
		return sc, fmt.Errorf("response_cache: the response cache cannot be enabled with sequence_batching for %s", name)
	}
	if sb.GetIterativeSequence() {
		return sc, errors.New("sequence_batching.iterative_sequence: iterative sequences are not supported")
	}
	if o := sb.GetOldest(); o != nil {
		sc.oldest = true
		if n := int(o.GetMaxCandidateSequences()); n > 0 {
			sc.slots = n
		}
		sc.delay = time.Duration(o.GetMaxQueueDelayMicroseconds()) * time.Microsecond
		for _, n := range o.GetPreferredBatchSize() {
			if n <= 0 {
				return sc, fmt.Errorf("sequence_batching.oldest.preferred_batch_size: sequence batching preferred batch size must be positive for %s", name)
			}
			if int(n) > mbs {
				return sc, fmt.Errorf("sequence_batching.oldest.preferred_batch_size: sequence batching preferred batch size must be <= max batch size for %s", name)
			}
			sc.preferred = append(sc.preferred, int(n))
		}
	} else {
		d := sb.GetDirect()
		u := d.GetMinimumSlotUtilization()
		if u < 0 || u > 1 || math.IsNaN(float64(u)) {
			return sc, fmt.Errorf("sequence_batching.direct.minimum_slot_utilization: sequence batching minimum slot utilization must be in range (0.0, 1.0] for %s", name)
		}
		sc.minUtil = float64(u)
		sc.delay = time.Duration(d.GetMaxQueueDelayMicroseconds()) * time.Microsecond
	}
	if len(sc.preferred) == 0 {
		sc.preferred = []int{sc.maxBatch}
	}
	slices.Sort(sc.preferred)
	sc.preferred = slices.Compact(sc.preferred)

	if err := sc.readControls(cfg); err != nil {
		return sc, fmt.Errorf("sequence_batching.control_input: %w", err)
	}
	for i, st := range sb.GetState() {
		s, err := newStateConfig(st, sc.batchDim)
		if err != nil {
			return sc, fmt.Errorf("sequence_batching.state[%d]: %w", i, err)
		}
		sc.states = append(sc.states, s)
	}
	return sc, nil
}

// readControls reads the control inputs with the checks of Triton's
// GetBooleanSequenceControlProperties and GetTypedSequenceControlProperties.
func (sc *seqConfig) readControls(cfg *pb.ModelConfig) error {
	name := cfg.GetName()
	seen := map[string]bool{}
	kinds := map[pb.ModelSequenceBatching_Control_Kind]bool{}
	for _, ci := range cfg.GetSequenceBatching().GetControlInput() {
		if ci.GetName() == "" {
			return fmt.Errorf("sequence batching control tensor must have a name for %s", name)
		}
		if seen[ci.GetName()] {
			return fmt.Errorf("sequence batching control tensor '%s' is specified for multiple control kinds for %s", ci.GetName(), name)
		}
		seen[ci.GetName()] = true
		for _, c := range ci.GetControl() {
			kind := c.GetKind()
			if kinds[kind] {
				return fmt.Errorf("sequence batching specifies multiple %s tensors for %s", kind, name)
			}
			kinds[kind] = true
			if kind == pb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_CORRID {
				if len(c.GetInt32FalseTrue())+len(c.GetFp32FalseTrue())+len(c.GetBoolFalseTrue()) > 0 {
					return fmt.Errorf("sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for %s for %s", kind, name)
				}
				switch c.GetDataType() {
				case pb.DataType_TYPE_UINT64, pb.DataType_TYPE_INT64, pb.DataType_TYPE_UINT32, pb.DataType_TYPE_INT32, pb.DataType_TYPE_STRING:
				default:
					return fmt.Errorf("unexpected data type for control %s for %s. Allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING", kind, name)
				}
				sc.corrid = &corridControl{name: ci.GetName(), datatype: c.GetDataType()}
				continue
			}
			bc, err := newBoolControl(ci.GetName(), c, sc.batchDim, name)
			if err != nil {
				return err
			}
			switch kind {
			case pb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_START:
				sc.start = bc
			case pb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_END:
				sc.end = bc
			case pb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_READY:
				sc.ready = bc
			}
		}
	}
	return nil
}

func newBoolControl(input string, c *pb.ModelSequenceBatching_Control, batchDim bool, model string) (*boolControl, error) {
	kind := c.GetKind()
	i32, f32, b := c.GetInt32FalseTrue(), c.GetFp32FalseTrue(), c.GetBoolFalseTrue()
	given := 0
	for _, n := range []int{len(i32), len(f32), len(b)} {
		if n > 0 {
			given++
		}
	}
	switch {
	case given > 1:
		return nil, fmt.Errorf("sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and 'bool_false_true' for %s for %s", kind, model)
	case given == 0:
		return nil, fmt.Errorf("sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for %s for %s", kind, model)
	}
	shape := func() []int64 {
		if batchDim {
			return []int64{1, 1}
		}
		return []int64{1}
	}
	var off, on *tensor.Tensor
	switch {
	case len(i32) > 0:
		if len(i32) != 2 {
			return nil, fmt.Errorf("sequence batching control 'int32_false_true' must have exactly 2 entries for %s for %s", kind, model)
		}
		off, on = tensor.NewInt32(input, shape(), i32[:1]), tensor.NewInt32(input, shape(), i32[1:])
	case len(f32) > 0:
		if len(f32) != 2 {
			return nil, fmt.Errorf("sequence batching control 'fp32_false_true' must have exactly 2 entries for %s for %s", kind, model)
		}
		fp := func(v float32) *tensor.Tensor {
			return &tensor.Tensor{Name: input, Datatype: "FP32", Shape: shape(), Raw: binary.LittleEndian.AppendUint32(nil, math.Float32bits(v))}
		}
		off, on = fp(f32[0]), fp(f32[1])
	default:
		if len(b) != 2 {
			return nil, fmt.Errorf("sequence batching control 'bool_false_true' must have exactly 2 entries for %s for %s", kind, model)
		}
		off, on = tensor.NewBool(input, shape(), b[:1]), tensor.NewBool(input, shape(), b[1:])
	}
	return &boolControl{off: off, on: on}, nil
}

// newStateConfig checks one implicit state as Triton's scheduler does at
// load (its texts) and builds its initial value: initial_state's zero
// data, or zeros of the state's dims (-1 as 1) when there is none (Triton
// leaves that state's first value undefined).
func newStateConfig(st *pb.ModelSequenceBatching_State, batchDim bool) (stateConfig, error) {
	in, out := st.GetInputName(), st.GetOutputName()
	if in == "" || out == "" {
		return stateConfig{}, errors.New("a state needs input_name and output_name")
	}
	dt := Datatype(st.GetDataType())
	if st.GetDataType() == pb.DataType_TYPE_INVALID {
		return stateConfig{}, fmt.Errorf("state '%s' needs a data_type", in)
	}
	if len(st.GetDims()) == 0 {
		return stateConfig{}, fmt.Errorf("state '%s' needs dims", in)
	}
	dims := slices.Clone(st.GetDims())
	switch inits := st.GetInitialState(); {
	case len(inits) > 1:
		return stateConfig{}, fmt.Errorf("initial_state field for state input '%s' must contain exactly one or zero element. Found '%d' elements.", in, len(inits))
	case len(inits) == 1:
		is := inits[0]
		if is.GetDataType() != st.GetDataType() {
			return stateConfig{}, fmt.Errorf("The data type used for 'initial_state' field of state '%s' does not match the state data type.", in)
		}
		if is.GetName() == "" {
			return stateConfig{}, fmt.Errorf("Field 'name' must be set when using initial_state for state input '%s'.", in)
		}
		if len(is.GetDims()) != len(dims) {
			return stateConfig{}, fmt.Errorf("Number of dimensions in 'initial_state' doesn't match the size of 'state' dimensions for state input '%s'. %d != %d", in, len(is.GetDims()), len(dims))
		}
		for i, d := range is.GetDims() {
			if d < 0 {
				return stateConfig{}, fmt.Errorf("'initial_state' field for state input name '%s' contains variable dimensions.", in)
			}
			if dims[i] >= 0 && d != dims[i] {
				return stateConfig{}, fmt.Errorf("'initial_state' dim for input name '%s' doesn't match 'state' dim description. %d != %d", in, d, dims[i])
			}
			dims[i] = d
		}
		if _, ok := is.GetStateData().(*pb.ModelSequenceBatching_InitialState_ZeroData); !ok {
			return stateConfig{}, fmt.Errorf("initial_state: only zero_data is supported for state input '%s' (data_file is not)", in)
		}
	}
	for i, d := range dims {
		if d < 0 {
			dims[i] = 1
		}
	}
	if batchDim {
		dims = append([]int64{1}, dims...)
	}
	n := tensor.ElementCount(dims)
	size := tensor.ElementSize(dt)
	if n < 0 || n > 1<<20 || size < 0 {
		return stateConfig{}, fmt.Errorf("state '%s' has an unusable shape %s or data type %s", in, tensor.ShapeString(dims), dt)
	}
	if size == 0 {
		size = 4 // BYTES: every element the empty string, a zero length
	}
	return stateConfig{input: in, output: out, initial: &tensor.Tensor{Name: in, Datatype: dt, Shape: dims, Raw: make([]byte, n*int64(size))}}, nil
}

// setControls puts a row's control inputs into inputs: real rows have
// ready true and the request's flags and id; padding rows (ready false)
// have every flag false and id 0 (or "").
func (sc *seqConfig) setControls(inputs map[string]*tensor.Tensor, f seqFlags, ready bool) {
	for _, c := range []struct {
		ctl *boolControl
		v   bool
	}{{sc.start, f.start && ready}, {sc.end, f.end && ready}, {sc.ready, ready}} {
		if c.ctl != nil {
			t := c.ctl.tensor(c.v)
			inputs[t.Name] = t
		}
	}
	if sc.corrid != nil {
		id := f.id
		if !ready {
			id = seqID{}
		}
		inputs[sc.corrid.name] = sc.corrid.tensor(id, sc.batchDim)
	}
}

// tensor is the CORRID input for id: its low bytes, little-endian, for the
// integer types; one BYTES element for TYPE_STRING.
func (c *corridControl) tensor(id seqID, batchDim bool) *tensor.Tensor {
	shape := []int64{1}
	if batchDim {
		shape = []int64{1, 1}
	}
	dt := Datatype(c.datatype)
	if c.datatype == pb.DataType_TYPE_STRING {
		return tensor.NewBytes(c.name, shape, [][]byte{[]byte(id.str)})
	}
	raw := binary.LittleEndian.AppendUint64(nil, id.num)
	return &tensor.Tensor{Name: c.name, Datatype: dt, Shape: shape, Raw: raw[:tensor.ElementSize(dt)]}
}

// checkCorrID is Triton's ValidateCorrelationId: a string id needs a
// TYPE_STRING CORRID control, an integer id one of the integer types.
func (sc *seqConfig) checkCorrID(model, requestID string, id seqID) error {
	if sc.corrid == nil || id.none() {
		return nil
	}
	got := ""
	switch {
	case id.isStr && sc.corrid.datatype != pb.DataType_TYPE_STRING:
		got = "BYTES"
	case !id.isStr && sc.corrid.datatype == pb.DataType_TYPE_STRING:
		got = "UINT64"
	default:
		return nil
	}
	if requestID == "" {
		requestID = "<id_unknown>"
	}
	return errorf(codes.InvalidArgument, "[request id: %s] sequence batching control '%s' data-type is '%s', but model '%s' expects '%s'",
		requestID, sc.corrid.name, got, model, Datatype(sc.corrid.datatype))
}
