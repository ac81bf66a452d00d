package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// FromRequest decodes every input of req, taking each input's data from
// raw_input_contents (same order as inputs) or from its typed contents, and
// checks the data against the declared shape. Error texts follow Triton's.
func FromRequest(req *pb.ModelInferRequest) ([]*Tensor, error) {
	model := req.GetModelName()
	raw := req.GetRawInputContents()
	if len(raw) > 0 {
		for _, in := range req.GetInputs() {
			if in.GetContents() != nil {
				return nil, fmt.Errorf("contents field must not be specified when using raw_input_contents for '%s' for model '%s'", in.GetName(), model)
			}
		}
		if len(raw) != len(req.GetInputs()) {
			return nil, fmt.Errorf("expected %d raw input contents for model '%s', got %d", len(req.GetInputs()), model, len(raw))
		}
	}
	out := make([]*Tensor, 0, len(req.GetInputs()))
	for i, in := range req.GetInputs() {
		t := &Tensor{Name: in.GetName(), Datatype: in.GetDatatype(), Shape: in.GetShape()}
		if ElementSize(t.Datatype) < 0 {
			return nil, fmt.Errorf("invalid datatype '%s' for input '%s' for model '%s'", t.Datatype, t.Name, model)
		}
		n := t.Count()
		if n < 0 {
			return nil, fmt.Errorf("invalid shape %s for input '%s' for model '%s'", ShapeString(t.Shape), t.Name, model)
		}
		switch {
		case len(raw) > 0:
			t.Raw = raw[i]
		case in.GetContents() != nil:
			r, err := fromContents(t.Datatype, n, in.GetContents())
			if err != nil {
				return nil, fmt.Errorf("%v for input '%s' for model '%s'", err, t.Name, model)
			}
			t.Raw = r
		default:
			return nil, fmt.Errorf("unable to find data for input tensor '%s' for model '%s' in request.", t.Name, model)
		}
		if err := checkSize(t, n); err != nil {
			return nil, fmt.Errorf("%v for input '%s' for model '%s'", err, t.Name, model)
		}
		out = append(out, t)
	}
	return out, nil
}

func checkSize(t *Tensor, n int64) error {
	size := ElementSize(t.Datatype)
	if size == 0 {
		if wellFormed(t.Raw, n) {
			return nil
		}
		_, err := SplitBytes(t.Raw, n) // for the precise error
		if err == nil {
			err = ErrBytesLayout
		}
		return err
	}
	if want := n * int64(size); int64(len(t.Raw)) != want {
		return fmt.Errorf("unexpected total byte size %d, expecting %d", len(t.Raw), want)
	}
	return nil
}

// fromContents converts typed contents into the raw layout. The typed field
// must hold exactly n elements.
func fromContents(dt string, n int64, c *pb.InferTensorContents) ([]byte, error) {
	count := func(got int) error {
		if int64(got) != n {
			return fmt.Errorf("unexpected number of elements %d in typed contents, expecting %d", got, n)
		}
		return nil
	}
	le := binary.LittleEndian
	var b []byte
	switch dt {
	case "BOOL":
		v := c.GetBoolContents()
		if err := count(len(v)); err != nil {
			return nil, err
		}
		for _, x := range v {
			if x {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
		}
	case "INT8", "INT16", "INT32":
		v := c.GetIntContents()
		if err := count(len(v)); err != nil {
			return nil, err
		}
		for _, x := range v {
			switch dt {
			case "INT8":
				b = append(b, byte(int8(x)))
			case "INT16":
				b = le.AppendUint16(b, uint16(int16(x)))
			default:
				b = le.AppendUint32(b, uint32(x))
			}
		}
	case "INT64":
		v := c.GetInt64Contents()
		if err := count(len(v)); err != nil {
			return nil, err
		}
		for _, x := range v {
			b = le.AppendUint64(b, uint64(x))
		}
	case "UINT8", "UINT16", "UINT32":
		v := c.GetUintContents()
		if err := count(len(v)); err != nil {
			return nil, err
		}
		for _, x := range v {
			switch dt {
			case "UINT8":
				b = append(b, byte(x))
			case "UINT16":
				b = le.AppendUint16(b, uint16(x))
			default:
				b = le.AppendUint32(b, x)
			}
		}
	case "UINT64":
		v := c.GetUint64Contents()
		if err := count(len(v)); err != nil {
			return nil, err
		}
		for _, x := range v {
			b = le.AppendUint64(b, x)
		}
	case "FP32":
		v := c.GetFp32Contents()
		if err := count(len(v)); err != nil {
			return nil, err
		}
		for _, x := range v {
			b = le.AppendUint32(b, math.Float32bits(x))
		}
	case "FP64":
		v := c.GetFp64Contents()
		if err := count(len(v)); err != nil {
			return nil, err
		}
		for _, x := range v {
			b = le.AppendUint64(b, math.Float64bits(x))
		}
	case "BYTES":
		v := c.GetBytesContents()
		if err := count(len(v)); err != nil {
			return nil, err
		}
		b = JoinBytes(v)
	default: // FP16, BF16
		return nil, fmt.Errorf("%s tensors must use raw_input_contents", dt)
	}
	if b == nil {
		b = []byte{}
	}
	return b, nil
}

// ToRequest appends inputs to req in the raw layout Triton accepts: one
// inputs entry and one raw_input_contents entry per tensor.
func ToRequest(req *pb.ModelInferRequest, inputs []*Tensor) {
	// One allocation for the entries, and one for each list at most.
	entries := make([]pb.ModelInferRequest_InferInputTensor, len(inputs))
	req.Inputs = slices.Grow(req.Inputs, len(inputs))
	req.RawInputContents = slices.Grow(req.RawInputContents, len(inputs))
	for i, t := range inputs {
		e := &entries[i]
		e.Name, e.Datatype, e.Shape = t.Name, t.Datatype, t.Shape
		req.Inputs = append(req.Inputs, e)
		req.RawInputContents = append(req.RawInputContents, t.Raw)
	}
}

// ToResponse appends outs to resp in the raw layout Triton always answers
// with: one outputs entry and one raw_output_contents entry per tensor.
func ToResponse(resp *pb.ModelInferResponse, outs []*Tensor) {
	for _, t := range outs {
		resp.Outputs = append(resp.Outputs, &pb.ModelInferResponse_InferOutputTensor{
			Name: t.Name, Datatype: t.Datatype, Shape: t.Shape,
		})
		resp.RawOutputContents = append(resp.RawOutputContents, t.Raw)
	}
}

// FromResponse returns the output tensors of resp, from raw_output_contents
// or, for servers that fill them, typed contents.
func FromResponse(resp *pb.ModelInferResponse) ([]*Tensor, error) {
	out := make([]*Tensor, 0, len(resp.GetOutputs()))
	err := EachOutput(resp, func(t Tensor) error {
		out = append(out, &t)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// EachOutput calls fn with each output tensor of resp in order, after
// checking its data against its shape and datatype. Outputs in
// raw_output_contents are read in place without allocating: t.Raw aliases
// resp. Typed contents (which Triton never sends, but other servers may)
// are converted. It stops at the first error.
func EachOutput(resp *pb.ModelInferResponse, fn func(t Tensor) error) error {
	raw := resp.GetRawOutputContents()
	for i, o := range resp.GetOutputs() {
		t := Tensor{Name: o.GetName(), Datatype: o.GetDatatype(), Shape: o.GetShape()}
		n := t.Count()
		if n < 0 || ElementSize(t.Datatype) < 0 {
			return fmt.Errorf("output '%s' has invalid shape %s or datatype '%s'", t.Name, ShapeString(t.Shape), t.Datatype)
		}
		switch {
		case i < len(raw):
			t.Raw = raw[i]
		case o.GetContents() != nil:
			r, err := fromContents(t.Datatype, n, o.GetContents())
			if err != nil {
				return fmt.Errorf("output '%s': %v", t.Name, err)
			}
			t.Raw = r
		default:
			return fmt.Errorf("output '%s' has no data", t.Name)
		}
		if err := checkSize(&t, n); err != nil {
			return fmt.Errorf("output '%s': %v", t.Name, err)
		}
		if err := fn(t); err != nil {
			return err
		}
	}
	return nil
}

// wellFormed reports, without allocating, whether raw is exactly n
// length-prefixed BYTES elements.
func wellFormed(raw []byte, n int64) bool {
	for ; n > 0; n-- {
		if len(raw) < 4 || uint64(binary.LittleEndian.Uint32(raw)) > uint64(len(raw)-4) {
			return false
		}
		raw = raw[4+binary.LittleEndian.Uint32(raw):]
	}
	return len(raw) == 0
}
