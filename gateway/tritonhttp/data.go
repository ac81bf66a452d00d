package tritonhttp

import (
	"encoding/binary"
	"math"

	"github.com/streamgate/streamgate/proto/tensor"
)

// An input's JSON "data": nested arrays checked against the shape and
// written in the raw tensor layout.

var errShapeData = invalid("Shape does not match true shape of 'data' field")

// jsonData converts an input's "data" (nested arrays, flattened in order)
// into the raw layout, as Triton's ReadDataFromJson does: integers are
// truncated to the datatype's width, FP32 is rounded from the double.
func (p *parser) jsonData(in node, name, dt string, shape []int64) ([]byte, *Error) {
	want := tensor.ElementCount(shape)
	if want == 0 {
		return []byte{}, nil // Triton reads no data at all
	}
	if want < 0 { // overflowing: no data can match it
		want = math.MaxInt64
	}
	data, _ := in.find("data")
	if data.kind != '[' {
		return nil, wrap("Unable to parse 'data'", errNotArray)
	}
	if dt == "BYTES" {
		if e := checkStrings(data); e != nil {
			return nil, wrap("Unable to parse JSON bytes array", e)
		}
	}
	size := tensor.ElementSize(dt)
	switch {
	case dt == "FP16" || dt == "BF16":
		return nil, invalid("receiving %s data via JSON is not supported. Please use the binary data format for input %s", dt, name)
	case size < 0:
		return nil, invalid("invalid datatype for input %s", name)
	}
	out := make([]byte, 0, min(len(data.kids), 1<<16)*max(size, 1))
	var n int64
	var walk func(v node) *Error
	walk = func(v node) *Error {
		if v.kind == '[' {
			for _, e := range v.kids {
				if err := walk(e); err != nil {
					return err
				}
			}
			return nil
		}
		if dt != "BYTES" && n >= want {
			return errShapeData
		}
		var e *Error
		out, e = appendElement(out, dt, v)
		n++
		return e
	}
	if e := walk(data); e != nil {
		return nil, wrap("Unable to parse 'data'", e)
	}
	if dt != "BYTES" && n != want { // BYTES counts are the server's to check
		return nil, wrap("Unable to parse 'data'", errShapeData)
	}
	return out, nil
}

// checkStrings fails unless every leaf of nested arrays is a string
// (Triton's JsonBytesArrayByteSize).
func checkStrings(v node) *Error {
	if v.kind == '[' {
		for _, e := range v.kids {
			if err := checkStrings(e); err != nil {
				return err
			}
		}
		return nil
	}
	_, e := asString(v)
	return e
}

// appendElement appends one JSON element of datatype dt.
func appendElement(dst []byte, dt string, v node) ([]byte, *Error) {
	le := binary.LittleEndian
	switch dt {
	case "BOOL":
		b, e := asBool(v)
		if e != nil {
			return dst, e
		}
		if b {
			return append(dst, 1), nil
		}
		return append(dst, 0), nil
	case "UINT8", "UINT16", "UINT32", "UINT64":
		u, e := asUint(v)
		if e != nil {
			return dst, e
		}
		switch dt {
		case "UINT8":
			return append(dst, byte(u)), nil
		case "UINT16":
			return le.AppendUint16(dst, uint16(u)), nil
		case "UINT32":
			return le.AppendUint32(dst, uint32(u)), nil
		}
		return le.AppendUint64(dst, u), nil
	case "INT8", "INT16", "INT32", "INT64":
		i, e := asInt(v)
		if e != nil {
			return dst, e
		}
		switch dt {
		case "INT8":
			return append(dst, byte(int8(i))), nil
		case "INT16":
			return le.AppendUint16(dst, uint16(int16(i))), nil
		case "INT32":
			return le.AppendUint32(dst, uint32(int32(i))), nil
		}
		return le.AppendUint64(dst, uint64(i)), nil
	case "FP32", "FP64":
		f, e := asDouble(v)
		if e != nil {
			return dst, e
		}
		if dt == "FP32" {
			return le.AppendUint32(dst, math.Float32bits(float32(f))), nil
		}
		return le.AppendUint64(dst, math.Float64bits(f)), nil
	}
	s, e := asString(v) // BYTES
	if e != nil {
		return dst, e
	}
	dst = le.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...), nil
}
