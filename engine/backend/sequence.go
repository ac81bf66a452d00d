package backend

import (
	"bytes"
	"encoding/binary"
	"math"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// Control is a boolean sequence control input (START, END or READY) of a
// model with sequence_batching, as its backend reads it: the engine puts
// the control's configured false or true value into each request's input
// of that name.
type Control struct {
	Input string
	on    []byte // the true value's raw element
}

// SequenceControl returns the model's control input of kind, or nil when
// the config has none (a model may use any subset of the controls).
func SequenceControl(cfg *pb.ModelConfig, kind pb.ModelSequenceBatching_Control_Kind) *Control {
	for _, ci := range cfg.GetSequenceBatching().GetControlInput() {
		for _, c := range ci.GetControl() {
			if c.GetKind() != kind {
				continue
			}
			ctl := &Control{Input: ci.GetName()}
			switch {
			case len(c.GetInt32FalseTrue()) == 2:
				ctl.on = binary.LittleEndian.AppendUint32(nil, uint32(c.GetInt32FalseTrue()[1]))
			case len(c.GetFp32FalseTrue()) == 2:
				ctl.on = binary.LittleEndian.AppendUint32(nil, math.Float32bits(c.GetFp32FalseTrue()[1]))
			case len(c.GetBoolFalseTrue()) == 2:
				ctl.on = []byte{0}
				if c.GetBoolFalseTrue()[1] {
					ctl.on[0] = 1
				}
			default:
				return nil
			}
			return ctl
		}
	}
	return nil
}

// Of reports whether r's control input holds the true value; false when
// c is nil or r lacks the input.
func (c *Control) Of(r *Request) bool {
	if c == nil {
		return false
	}
	t := r.Inputs[c.Input]
	return t != nil && bytes.Equal(t.Raw, c.on)
}

// CorrIDInput names the model's CORRID control input, "" when it has none.
func CorrIDInput(cfg *pb.ModelConfig) string {
	for _, ci := range cfg.GetSequenceBatching().GetControlInput() {
		for _, c := range ci.GetControl() {
			if c.GetKind() == pb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_CORRID {
				return ci.GetName()
			}
		}
	}
	return ""
}

// CorrID reads a CORRID control tensor: an integer id (the low bytes the
// engine copied, little-endian) or a string id.
func CorrID(t *tensor.Tensor) (num uint64, str string, isStr bool) {
	if t == nil {
		return 0, "", false
	}
	if t.Datatype == "BYTES" {
		s, err := t.Strings()
		if err != nil || len(s) != 1 {
			return 0, "", true
		}
		return 0, string(s[0]), true
	}
	var b [8]byte
	copy(b[:], t.Raw)
	return binary.LittleEndian.Uint64(b[:]), "", false
}
