package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"

	"github.com/streamgate/streamgate/engine/internal/mmap"
)

// ErrFormat marks a file that is not a well-formed GGUF file.
var ErrFormat = errors.New("not a valid GGUF file")

// Magic is the first four bytes of every GGUF file.
const Magic = "GGUF"

// DefaultAlignment is the alignment of tensor data when the file does not
// set general.alignment.
const DefaultAlignment = 32

// TensorInfo describes one tensor: its name, shape (ggml order: Dims[0] is
// the length of a row) and element type, and where its data is.
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   Type
	Offset uint64 // from the start of the data section
}

// Elements is the number of elements of the tensor.
func (t TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Bytes is the size of the tensor's data.
func (t TensorInfo) Bytes() uint64 {
	return t.Elements() / uint64(t.Type.BlockSize()) * uint64(t.Type.BlockBytes())
}

// File is a parsed GGUF file. Its tensor data are views of the file's
// bytes (memory-mapped by Open), never copies.
type File struct {
	Version   uint32
	Alignment int
	Metadata  map[string]any
	// Keys lists the metadata keys in file order.
	Keys    []string
	Tensors []TensorInfo

	data    []byte // the whole file
	start   int    // data section offset
	byName  map[string]int
	release func() error
	size    int64
}

// Open maps the GGUF file at path read-only and parses it. Close unmaps it.
// Errors for malformed files wrap ErrFormat and name the path.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("gguf %s: not a regular file", path)
	}
	if st.Size() < 24 {
		return nil, fmt.Errorf("gguf %s: %w: %d bytes, too short for a header", path, ErrFormat, st.Size())
	}
	data, release, err := mmap.Map(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("gguf %s: %w", path, err)
	}
	g, err := Parse(data)
	if err != nil {
		release()
		return nil, fmt.Errorf("gguf %s: %w", path, err)
	}
	g.release = release
	return g, nil
}

// Close releases the file's mapping. Tensor data must not be used after.
func (f *File) Close() error {
	r := f.release
	f.release = nil
	if r == nil {
		return nil
	}
	return r()
}

// Mapped reports whether the file's data is its mapping (Open), which a
// loader may drop from the resident set (mmap.Drop) once it has copied
// the tensors out; a Parse'd file's data is the caller's memory.
func (f *File) Mapped() bool { return f.release != nil }

// Size is the file's size in bytes.
func (f *File) Size() int64 { return f.size }

// Parse parses a GGUF file held in memory; the File aliases data.
func Parse(data []byte) (*File, error) {
	r := &reader{b: data}
	if len(data) < 4 || string(data[:4]) != Magic {
		return nil, fmt.Errorf("%w: no %q magic", ErrFormat, Magic)
	}
	r.off = 4
	f := &File{Version: r.u32(), Metadata: map[string]any{}, byName: map[string]int{}, data: data, size: int64(len(data))}
	if f.Version != 2 && f.Version != 3 {
		return nil, fmt.Errorf("%w: version %d; versions 2 and 3 are read", ErrFormat, f.Version)
	}
	nt, nkv := r.u64(), r.u64()
	if r.err != nil {
		return nil, r.err
	}
	// Every tensor info and key/value takes at least 8 bytes: bound the
	// counts by the file's size before allocating.
	if nt > uint64(len(data))/8 || nkv > uint64(len(data))/8 {
		return nil, fmt.Errorf("%w: %d tensors and %d metadata keys cannot fit %d bytes", ErrFormat, nt, nkv, len(data))
	}
	for range nkv {
		k := r.str()
		v := r.value(ValueType(r.u32()), 0)
		if r.err != nil {
			return nil, fmt.Errorf("metadata key %d (%q): %w", len(f.Keys), k, r.err)
		}
		if _, dup := f.Metadata[k]; dup {
			return nil, fmt.Errorf("%w: metadata key %q appears twice", ErrFormat, k)
		}
		f.Metadata[k] = v
		f.Keys = append(f.Keys, k)
	}
	f.Alignment = DefaultAlignment
	if v, ok := f.Metadata["general.alignment"]; ok {
		a, ok := v.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 || a > 1<<16 {
			return nil, fmt.Errorf("%w: general.alignment %v is not a power of two (uint32)", ErrFormat, v)
		}
		f.Alignment = int(a)
	}
	for range nt {
		t := TensorInfo{Name: r.str()}
		nd := r.u32()
		if nd > 4 {
			return nil, fmt.Errorf("%w: tensor %q has %d dimensions (at most 4)", ErrFormat, t.Name, nd)
		}
		for range nd {
			t.Dims = append(t.Dims, r.u64())
		}
		t.Type, t.Offset = Type(r.u32()), r.u64()
		if r.err != nil {
			return nil, fmt.Errorf("tensor info %d: %w", len(f.Tensors), r.err)
		}
		if _, dup := f.byName[t.Name]; dup {
			return nil, fmt.Errorf("%w: tensor %q appears twice", ErrFormat, t.Name)
		}
		f.byName[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	a := f.Alignment
	f.start = (r.off + a - 1) / a * a
	if f.start > len(data) {
		return nil, fmt.Errorf("%w: data section starts at %d, beyond the file's %d bytes", ErrFormat, f.start, len(data))
	}
	size := uint64(len(data) - f.start)
	for _, t := range f.Tensors {
		if err := f.checkTensor(t, size); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (f *File) checkTensor(t TensorInfo, size uint64) error {
	n := uint64(1)
	for _, d := range t.Dims {
		if d == 0 || d > 1<<40 || n > (1<<50)/d {
			return fmt.Errorf("%w: tensor %q has implausible dimensions %v", ErrFormat, t.Name, t.Dims)
		}
		n *= d
	}
	if t.Offset%uint64(f.Alignment) != 0 {
		return fmt.Errorf("%w: tensor %q at offset %d is not aligned to %d", ErrFormat, t.Name, t.Offset, f.Alignment)
	}
	if !t.Type.Known() {
		// Its size is unknown, so only its start can be checked.
		if t.Offset > size {
			return fmt.Errorf("%w: tensor %q starts beyond the end of the file", ErrFormat, t.Name)
		}
		return nil
	}
	if len(t.Dims) == 0 || t.Dims[0]%uint64(t.Type.BlockSize()) != 0 {
		return fmt.Errorf("%w: tensor %q: row of %v elements is not a whole number of %s blocks (%d)", ErrFormat, t.Name, t.Dims, t.Type, t.Type.BlockSize())
	}
	if b := t.Bytes(); t.Offset > size || b > size-t.Offset {
		return fmt.Errorf("%w: tensor %q (%s %v, %d bytes at %d) extends beyond the end of the file (data section of %d bytes): truncated", ErrFormat, t.Name, t.Type, t.Dims, b, t.Offset, size)
	}
	return nil
}

// Tensor returns the named tensor's description and data, a view of the
// file (ok false when there is no such tensor). For a type whose layout
// the package does not know, data is nil.
func (f *File) Tensor(name string) (info TensorInfo, data []byte, ok bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, nil, false
	}
	t := f.Tensors[i]
	if !t.Type.Known() {
		return t, nil, true
	}
	at := f.start + int(t.Offset)
	return t, f.data[at : at+int(t.Bytes()) : at+int(t.Bytes())], true
}

// String returns a string metadata value ("" and false when absent or not
// a string).
func (f *File) String(key string) (string, bool) {
	s, ok := f.Metadata[key].(string)
	return s, ok
}

// Uint returns an unsigned or non-negative integer metadata value of any
// width.
func (f *File) Uint(key string) (uint64, bool) {
	switch v := f.Metadata[key].(type) {
	case uint8:
		return uint64(v), true
	case uint16:
		return uint64(v), true
	case uint32:
		return uint64(v), true
	case uint64:
		return v, true
	case int8:
		return uint64(v), v >= 0
	case int16:
		return uint64(v), v >= 0
	case int32:
		return uint64(v), v >= 0
	case int64:
		return uint64(v), v >= 0
	}
	return 0, false
}

// Float returns a floating-point (or integer) metadata value.
func (f *File) Float(key string) (float64, bool) {
	switch v := f.Metadata[key].(type) {
	case float32:
		return float64(v), true
	case float64:
		return v, true
	}
	if u, ok := f.Uint(key); ok {
		return float64(u), true
	}
	return 0, false
}

// Bool returns a boolean metadata value.
func (f *File) Bool(key string) (bool, bool) {
	b, ok := f.Metadata[key].(bool)
	return b, ok
}

// SortedKeys returns the metadata keys in lexical order.
func (f *File) SortedKeys() []string {
	k := append([]string(nil), f.Keys...)
	sort.Strings(k)
	return k
}

// reader decodes little-endian GGUF values from b, recording the first
// error (after which every read returns zero values).
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) take(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.off) {
		r.err = fmt.Errorf("%w: truncated at byte %d (want %d more bytes)", ErrFormat, r.off, n)
		return nil
	}
	p := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return p
}

func (r *reader) u8() uint8 {
	if p := r.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if p := r.take(2); p != nil {
		return binary.LittleEndian.Uint16(p)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if p := r.take(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if p := r.take(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

func (r *reader) str() string {
	n := r.u64()
	return string(r.take(n))
}

// maxNesting bounds arrays of arrays.
const maxNesting = 4

func (r *reader) value(t ValueType, depth int) any {
	switch t {
	case TypeUint8:
		return r.u8()
	case TypeInt8:
		return int8(r.u8())
	case TypeUint16:
		return r.u16()
	case TypeInt16:
		return int16(r.u16())
	case TypeUint32:
		return r.u32()
	case TypeInt32:
		return int32(r.u32())
	case TypeFloat32:
		return math.Float32frombits(r.u32())
	case TypeUint64:
		return r.u64()
	case TypeInt64:
		return int64(r.u64())
	case TypeFloat64:
		return math.Float64frombits(r.u64())
	case TypeBool:
		b := r.u8()
		if b > 1 && r.err == nil {
			r.err = fmt.Errorf("%w: bool value %d", ErrFormat, b)
		}
		return b == 1
	case TypeString:
		return r.str()
	case TypeArray:
		if depth >= maxNesting {
			r.err = fmt.Errorf("%w: arrays nested deeper than %d", ErrFormat, maxNesting)
			return nil
		}
		et, n := ValueType(r.u32()), r.u64()
		if r.err == nil && n > uint64(len(r.b)-r.off) {
			r.err = fmt.Errorf("%w: array of %d values cannot fit the file", ErrFormat, n)
		}
		if r.err != nil {
			return nil
		}
		return r.array(et, int(n), depth)
	}
	if r.err == nil {
		r.err = fmt.Errorf("%w: unknown metadata value type %d", ErrFormat, t)
	}
	return nil
}

func (r *reader) array(et ValueType, n int, depth int) any {
	switch et {
	case TypeString:
		out := make([]string, n)
		for i := range out {
			out[i] = r.str()
		}
		return out
	case TypeFloat32:
		out := make([]float32, n)
		for i := range out {
			out[i] = math.Float32frombits(r.u32())
		}
		return out
	case TypeInt32:
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(r.u32())
		}
		return out
	case TypeUint32:
		out := make([]uint32, n)
		for i := range out {
			out[i] = r.u32()
		}
		return out
	}
	out := make([]any, n)
	for i := range out {
		out[i] = r.value(et, depth+1)
		if r.err != nil {
			return nil
		}
	}
	return out
}
