package gguf

import "fmt"

// Type is a tensor element type, numbered as ggml numbers them.
type Type uint32

// The element types. Only some are supported by the engine's kernels; the
// reader knows the block sizes of all of these so it can lay out any file
// and name what it cannot run.
const (
	F32  Type = 0
	F16  Type = 1
	Q4_0 Type = 2
	Q4_1 Type = 3
	Q5_0 Type = 6
	Q5_1 Type = 7
	Q8_0 Type = 8
	Q8_1 Type = 9
	Q2_K Type = 10
	Q3_K Type = 11
	Q4_K Type = 12
	Q5_K Type = 13
	Q6_K Type = 14
	Q8_K Type = 15
	I8   Type = 24
	I16  Type = 25
	I32  Type = 26
	I64  Type = 27
	F64  Type = 28
	BF16 Type = 30
)

// layout is a type's block: elements per block and bytes per block.
type layout struct {
	name   string
	block  int
	bytes  int
	quants bool
}

var layouts = map[Type]layout{
	F32:  {"F32", 1, 4, false},
	F16:  {"F16", 1, 2, false},
	BF16: {"BF16", 1, 2, false},
	F64:  {"F64", 1, 8, false},
	I8:   {"I8", 1, 1, false},
	I16:  {"I16", 1, 2, false},
	I32:  {"I32", 1, 4, false},
	I64:  {"I64", 1, 8, false},
	Q4_0: {"Q4_0", 32, 18, true},
	Q4_1: {"Q4_1", 32, 20, true},
	Q5_0: {"Q5_0", 32, 22, true},
	Q5_1: {"Q5_1", 32, 24, true},
	Q8_0: {"Q8_0", 32, 34, true},
	Q8_1: {"Q8_1", 32, 36, true},
	Q2_K: {"Q2_K", 256, 84, true},
	Q3_K: {"Q3_K", 256, 110, true},
	Q4_K: {"Q4_K", 256, 144, true},
	Q5_K: {"Q5_K", 256, 176, true},
	Q6_K: {"Q6_K", 256, 210, true},
	Q8_K: {"Q8_K", 256, 292, true},
}

// String is ggml's name of the type ("Q4_K"), or "type N" for a number
// this package does not know.
func (t Type) String() string {
	if l, ok := layouts[t]; ok {
		return l.name
	}
	return fmt.Sprintf("type %d", uint32(t))
}

// Known reports whether the reader knows the type's block layout.
func (t Type) Known() bool { _, ok := layouts[t]; return ok }

// BlockSize is the number of elements in one block of the type.
func (t Type) BlockSize() int { return layouts[t].block }

// BlockBytes is the size in bytes of one block of the type.
func (t Type) BlockBytes() int { return layouts[t].bytes }

// RowBytes is the size in bytes of n consecutive elements, n a multiple of
// the block size.
func (t Type) RowBytes(n int) int { return n / t.BlockSize() * t.BlockBytes() }

// ValueType is a metadata value's type, numbered as in the GGUF format.
type ValueType uint32

// The metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)
