// Package tensor holds inference tensors in Triton's raw wire layout and
// converts them to and from the gRPC protocol's raw and typed contents.
//
// Start with FromRequest (decode every input of a ModelInferRequest, with
// Triton's error texts) and the typed constructors (NewInt32, NewBytes, ...)
// used by model backends to build outputs.
package tensor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Tensor is one named tensor. Raw holds the row-major data in the raw wire
// layout: fixed-size elements little-endian, BYTES elements each prefixed by
// a 4-byte little-endian length.
type Tensor struct {
	Name     string
	Datatype string
	Shape    []int64
	Raw      []byte
}

// ElementSize returns the byte size of one element of datatype dt, 0 for
// BYTES (variable) and -1 for an unknown datatype.
func ElementSize(dt string) int {
	switch dt {
	case "BOOL", "UINT8", "INT8":
		return 1
	case "UINT16", "INT16", "FP16", "BF16":
		return 2
	case "UINT32", "INT32", "FP32":
		return 4
	case "UINT64", "INT64", "FP64":
		return 8
	case "BYTES":
		return 0
	}
	return -1
}

// ElementCount is the product of shape, or -1 if a dimension is negative or
// the product overflows.
func ElementCount(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return -1
		}
		if d != 0 && n > math.MaxInt32/d {
			return -1
		}
		n *= d
	}
	return n
}

// ShapeString formats a shape the way Triton prints it: [1,2].
func ShapeString(shape []int64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range shape {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(d, 10))
	}
	b.WriteByte(']')
	return b.String()
}

// FitShape gives n elements the shape dims describes (a model input's
// dims, -1 for a variable dimension), as Triton's generate extension does:
// fixed dims must divide n, the innermost -1 takes the remainder and every
// other -1 becomes 1. ok is false when that is impossible.
func FitShape(dims []int64, n int64) (shape []int64, ok bool) {
	shape = make([]int64, len(dims))
	fixed, last := int64(1), -1
	for i, d := range dims {
		if d < 0 {
			last = i
			shape[i] = 1
			continue
		}
		shape[i] = d
		fixed *= d
	}
	if last < 0 {
		return shape, fixed == n
	}
	if fixed == 0 {
		shape[last] = 1
		return shape, n == 0
	}
	if n%fixed != 0 {
		return nil, false
	}
	shape[last] = n / fixed
	return shape, true
}

// Count returns the number of elements the shape declares.
func (t *Tensor) Count() int64 { return ElementCount(t.Shape) }

// Validate checks that Raw holds exactly the data Shape and Datatype call for.
func (t *Tensor) Validate() error {
	size := ElementSize(t.Datatype)
	if size < 0 {
		return fmt.Errorf("invalid datatype '%s' for tensor '%s'", t.Datatype, t.Name)
	}
	n := t.Count()
	if n < 0 {
		return fmt.Errorf("invalid shape %s for tensor '%s'", ShapeString(t.Shape), t.Name)
	}
	if size == 0 {
		_, err := SplitBytes(t.Raw, n)
		if err != nil {
			return fmt.Errorf("tensor '%s': %w", t.Name, err)
		}
		return nil
	}
	if int64(len(t.Raw)) != n*int64(size) {
		return fmt.Errorf("unexpected total byte size %d for tensor '%s', expecting %d", len(t.Raw), t.Name, n*int64(size))
	}
	return nil
}

// ErrBytesLayout is wrapped by every BYTES length-prefix error.
var ErrBytesLayout = errors.New("malformed BYTES tensor")

// SplitBytes splits raw length-prefixed BYTES data into exactly n elements.
// The returned slices alias raw.
func SplitBytes(raw []byte, n int64) ([][]byte, error) {
	if n < 0 || n > int64(len(raw))/4 {
		return nil, fmt.Errorf("%w: %d bytes cannot hold %d elements", ErrBytesLayout, len(raw), n)
	}
	out := make([][]byte, 0, n)
	for len(raw) > 0 {
		if len(raw) < 4 {
			return nil, fmt.Errorf("%w: element %d has a truncated length prefix", ErrBytesLayout, len(out))
		}
		l := binary.LittleEndian.Uint32(raw)
		raw = raw[4:]
		if uint64(l) > uint64(len(raw)) {
			return nil, fmt.Errorf("%w: element %d declares %d bytes but %d remain", ErrBytesLayout, len(out), l, len(raw))
		}
		out = append(out, raw[:l:l])
		raw = raw[l:]
		if int64(len(out)) > n {
			break
		}
	}
	if int64(len(out)) != n || len(raw) != 0 {
		return nil, fmt.Errorf("%w: expected %d elements, found %d", ErrBytesLayout, n, countPrefixed(out, raw))
	}
	return out, nil
}

func countPrefixed(done [][]byte, rest []byte) int {
	n := len(done)
	for len(rest) >= 4 {
		l := binary.LittleEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(l) > uint64(len(rest)) {
			break
		}
		rest = rest[l:]
		n++
	}
	return n
}

// JoinBytes encodes elements in the raw BYTES layout.
func JoinBytes(elems [][]byte) []byte {
	size := 0
	for _, e := range elems {
		size += 4 + len(e)
	}
	out := make([]byte, 0, size)
	for _, e := range elems {
		out = binary.LittleEndian.AppendUint32(out, uint32(len(e)))
		out = append(out, e...)
	}
	return out
}

func (t *Tensor) want(dt string) error {
	if t.Datatype != dt {
		return fmt.Errorf("tensor '%s' has datatype %s, not %s", t.Name, t.Datatype, dt)
	}
	return t.Validate()
}

// Int32s returns the elements of an INT32 tensor.
func (t *Tensor) Int32s() ([]int32, error) {
	if err := t.want("INT32"); err != nil {
		return nil, err
	}
	out := make([]int32, len(t.Raw)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(t.Raw[4*i:]))
	}
	return out, nil
}

// Uint32s returns the elements of a UINT32 tensor.
func (t *Tensor) Uint32s() ([]uint32, error) {
	if err := t.want("UINT32"); err != nil {
		return nil, err
	}
	out := make([]uint32, len(t.Raw)/4)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(t.Raw[4*i:])
	}
	return out, nil
}

// Bools returns the elements of a BOOL tensor.
func (t *Tensor) Bools() ([]bool, error) {
	if err := t.want("BOOL"); err != nil {
		return nil, err
	}
	out := make([]bool, len(t.Raw))
	for i, b := range t.Raw {
		out[i] = b != 0
	}
	return out, nil
}

// Strings returns the elements of a BYTES tensor.
func (t *Tensor) Strings() ([][]byte, error) {
	if t.Datatype != "BYTES" {
		return nil, fmt.Errorf("tensor '%s' has datatype %s, not BYTES", t.Name, t.Datatype)
	}
	n := t.Count()
	if n < 0 {
		return nil, fmt.Errorf("invalid shape %s for tensor '%s'", ShapeString(t.Shape), t.Name)
	}
	out, err := SplitBytes(t.Raw, n)
	if err != nil {
		return nil, fmt.Errorf("tensor '%s': %w", t.Name, err)
	}
	return out, nil
}

// NewInt32 builds an INT32 tensor.
func NewInt32(name string, shape []int64, vals []int32) *Tensor {
	raw := make([]byte, 0, 4*len(vals))
	for _, v := range vals {
		raw = binary.LittleEndian.AppendUint32(raw, uint32(v))
	}
	return &Tensor{Name: name, Datatype: "INT32", Shape: shape, Raw: raw}
}

// NewUint32 builds a UINT32 tensor.
func NewUint32(name string, shape []int64, vals []uint32) *Tensor {
	raw := make([]byte, 0, 4*len(vals))
	for _, v := range vals {
		raw = binary.LittleEndian.AppendUint32(raw, v)
	}
	return &Tensor{Name: name, Datatype: "UINT32", Shape: shape, Raw: raw}
}

// NewBool builds a BOOL tensor.
func NewBool(name string, shape []int64, vals []bool) *Tensor {
	raw := make([]byte, len(vals))
	for i, v := range vals {
		if v {
			raw[i] = 1
		}
	}
	return &Tensor{Name: name, Datatype: "BOOL", Shape: shape, Raw: raw}
}

// NewBytes builds a BYTES tensor.
func NewBytes(name string, shape []int64, vals [][]byte) *Tensor {
	return &Tensor{Name: name, Datatype: "BYTES", Shape: shape, Raw: JoinBytes(vals)}
}

// NewString builds a BYTES tensor of shape [1] holding s.
func NewString(name, s string) *Tensor {
	return NewBytes(name, []int64{1}, [][]byte{[]byte(s)})
}
