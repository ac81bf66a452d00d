package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// KV is one metadata entry to write.
type KV struct {
	Key   string
	Value any // string, bool, (u)int8..64, float32/64, []string, []float32, []int32, []uint32
}

// NewTensor is one tensor to write: Data holds its encoded elements.
type NewTensor struct {
	Name string
	Dims []uint64
	Type Type
	Data []byte
}

// Write writes a GGUF version 3 file with the given metadata and tensors,
// in order, aligned to DefaultAlignment (or general.alignment when meta sets
// it as a uint32).
func Write(w io.Writer, meta []KV, tensors []NewTensor) error {
	align := uint64(DefaultAlignment)
	for _, kv := range meta {
		if a, ok := kv.Value.(uint32); ok && kv.Key == "general.alignment" {
			align = uint64(a)
		}
	}
	bw := bufio.NewWriter(w)
	e := &encoder{w: bw}
	e.raw([]byte(Magic))
	e.u32(3)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(meta)))
	for _, kv := range meta {
		e.str(kv.Key)
		if err := e.value(kv.Value); err != nil {
			return fmt.Errorf("metadata %s: %w", kv.Key, err)
		}
	}
	offsets := make([]uint64, len(tensors))
	var off uint64
	for i, t := range tensors {
		info := TensorInfo{Dims: t.Dims, Type: t.Type}
		if t.Type.Known() && uint64(len(t.Data)) != info.Bytes() {
			return fmt.Errorf("tensor %s: %d bytes of data, %s %v needs %d", t.Name, len(t.Data), t.Type, t.Dims, info.Bytes())
		}
		offsets[i] = off
		off += (uint64(len(t.Data)) + align - 1) / align * align
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(offsets[i])
	}
	e.pad(align)
	for _, t := range tensors {
		e.raw(t.Data)
		e.pad(align)
	}
	if e.err != nil {
		return e.err
	}
	return bw.Flush()
}

type encoder struct {
	w   *bufio.Writer
	n   uint64
	err error
}

func (e *encoder) raw(p []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(p)
		e.n += uint64(len(p))
	}
}

func (e *encoder) pad(align uint64) {
	if r := e.n % align; r != 0 {
		e.raw(make([]byte, align-r))
	}
}

func (e *encoder) u32(v uint32) { e.raw(binary.LittleEndian.AppendUint32(nil, v)) }
func (e *encoder) u64(v uint64) { e.raw(binary.LittleEndian.AppendUint64(nil, v)) }
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.raw([]byte(s)) }

func (e *encoder) value(v any) error {
	switch v := v.(type) {
	case uint8:
		e.u32(uint32(TypeUint8))
		e.raw([]byte{v})
	case int8:
		e.u32(uint32(TypeInt8))
		e.raw([]byte{byte(v)})
	case uint16:
		e.u32(uint32(TypeUint16))
		e.raw(binary.LittleEndian.AppendUint16(nil, v))
	case int16:
		e.u32(uint32(TypeInt16))
		e.raw(binary.LittleEndian.AppendUint16(nil, uint16(v)))
	case uint32:
		e.u32(uint32(TypeUint32))
		e.u32(v)
	case int32:
		e.u32(uint32(TypeInt32))
		e.u32(uint32(v))
	case uint64:
		e.u32(uint32(TypeUint64))
		e.u64(v)
	case int64:
		e.u32(uint32(TypeInt64))
		e.u64(uint64(v))
	case float32:
		e.u32(uint32(TypeFloat32))
		e.u32(math.Float32bits(v))
	case float64:
		e.u32(uint32(TypeFloat64))
		e.u64(math.Float64bits(v))
	case bool:
		e.u32(uint32(TypeBool))
		b := byte(0)
		if v {
			b = 1
		}
		e.raw([]byte{b})
	case string:
		e.u32(uint32(TypeString))
		e.str(v)
	case []string:
		e.u32(uint32(TypeArray))
		e.u32(uint32(TypeString))
		e.u64(uint64(len(v)))
		for _, s := range v {
			e.str(s)
		}
	case []float32:
		e.u32(uint32(TypeArray))
		e.u32(uint32(TypeFloat32))
		e.u64(uint64(len(v)))
		for _, f := range v {
			e.u32(math.Float32bits(f))
		}
	case []int32:
		e.u32(uint32(TypeArray))
		e.u32(uint32(TypeInt32))
		e.u64(uint64(len(v)))
		for _, x := range v {
			e.u32(uint32(x))
		}
	case []uint32:
		e.u32(uint32(TypeArray))
		e.u32(uint32(TypeUint32))
		e.u64(uint64(len(v)))
		for _, x := range v {
			e.u32(x)
		}
	default:
		return fmt.Errorf("value of type %T cannot be written", v)
	}
	return nil
}
