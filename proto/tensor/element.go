package tensor

import (
	"encoding/binary"
	"math"
	"strconv"
)

// One element of a fixed-size datatype, as the JSON writers of the
// gateway print it.

// AppendInteger appends element e (ElementSize(dt) bytes, little-endian)
// of a BOOL or integer datatype as text: true or false, or its decimal
// value. ok is false, and dst unchanged, for any other datatype.
func AppendInteger(dst []byte, dt string, e []byte) (b []byte, ok bool) {
	le := binary.LittleEndian
	switch dt {
	case "BOOL":
		return strconv.AppendBool(dst, e[0] != 0), true
	case "INT8":
		return strconv.AppendInt(dst, int64(int8(e[0])), 10), true
	case "INT16":
		return strconv.AppendInt(dst, int64(int16(le.Uint16(e))), 10), true
	case "INT32":
		return strconv.AppendInt(dst, int64(int32(le.Uint32(e))), 10), true
	case "INT64":
		return strconv.AppendInt(dst, int64(le.Uint64(e)), 10), true
	case "UINT8":
		return strconv.AppendUint(dst, uint64(e[0]), 10), true
	case "UINT16":
		return strconv.AppendUint(dst, uint64(le.Uint16(e)), 10), true
	case "UINT32":
		return strconv.AppendUint(dst, uint64(le.Uint32(e)), 10), true
	case "UINT64":
		return strconv.AppendUint(dst, le.Uint64(e), 10), true
	}
	return dst, false
}

// Float returns element e of a floating-point datatype (FP16, BF16, FP32,
// FP64) as a float64; ok is false for any other datatype.
func Float(dt string, e []byte) (f float64, ok bool) {
	le := binary.LittleEndian
	switch dt {
	case "FP16":
		return float64(F16ToF32(le.Uint16(e))), true
	case "BF16":
		return float64(BF16ToF32(le.Uint16(e))), true
	case "FP32":
		return float64(math.Float32frombits(le.Uint32(e))), true
	case "FP64":
		return math.Float64frombits(le.Uint64(e)), true
	}
	return 0, false
}
