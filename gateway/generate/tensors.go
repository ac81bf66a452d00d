package generate

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// toTensor converts a JSON scalar or 1-D array into the input md describes.
func toTensor(key string, raw json.RawMessage, md *pb.ModelMetadataResponse_TensorMetadata) (*tensor.Tensor, *Error) {
	if t := intTensor(key, raw, md); t != nil {
		return t, nil
	}
	return decodedTensor(key, raw, md)
}

// decodedTensor is toTensor decoding raw into Go values first.
func decodedTensor(key string, raw json.RawMessage, md *pb.ModelMetadataResponse_TensorMetadata) (*tensor.Tensor, *Error) {
	v, err := decodeValue(raw)
	if err != nil {
		return nil, errorf("unable to parse input '%s'", key)
	}
	elems, ok := v.([]any)
	if !ok {
		elems = []any{v}
	}
	dt := md.GetDatatype()
	size := tensor.ElementSize(dt)
	if size < 0 {
		return nil, errorf("input '%s' has unsupported datatype %s", key, dt)
	}
	var rawData []byte
	if size > 0 {
		rawData = make([]byte, 0, size*len(elems))
	}
	for i, e := range elems {
		var err *Error
		rawData, err = appendElem(rawData, dt, e)
		if err != nil {
			return nil, errorf("unable to convert element %d of input '%s' to %s: %s", i, key, dt, err.Msg)
		}
	}
	shape, ok := tensor.FitShape(md.GetShape(), int64(len(elems)))
	if !ok {
		return nil, errorf("The schema can not convert input '%s' to tensor with proper shape", key)
	}
	return &tensor.Tensor{Name: key, Datatype: dt, Shape: shape, Raw: rawData}, nil
}

func appendElem(dst []byte, dt string, v any) ([]byte, *Error) {
	le := binary.LittleEndian
	switch dt {
	case "BYTES":
		s, ok := v.(string)
		if !ok {
			return nil, typeErr(v, "a string")
		}
		dst = le.AppendUint32(dst, uint32(len(s)))
		return append(dst, s...), nil
	case "BOOL":
		b, ok := v.(bool)
		if !ok {
			return nil, typeErr(v, "a boolean")
		}
		if b {
			return append(dst, 1), nil
		}
		return append(dst, 0), nil
	case "FP16", "BF16", "FP32", "FP64":
		n, ok := v.(json.Number)
		if !ok {
			return nil, typeErr(v, "a number")
		}
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil {
			return nil, &Error{Msg: "number " + string(n) + " is out of range"}
		}
		switch dt {
		case "FP16":
			return le.AppendUint16(dst, tensor.F32ToF16(float32(f))), nil
		case "BF16":
			return le.AppendUint16(dst, tensor.F32ToBF16(float32(f))), nil
		case "FP32":
			return le.AppendUint32(dst, math.Float32bits(float32(f))), nil
		}
		return le.AppendUint64(dst, math.Float64bits(f)), nil
	}
	n, ok := v.(json.Number)
	if !ok {
		return nil, typeErr(v, "an integer")
	}
	switch dt {
	case "UINT8", "UINT16", "UINT32", "UINT64":
		bits := 8 * tensor.ElementSize(dt)
		u, err := strconv.ParseUint(string(n), 10, bits)
		if err != nil {
			return nil, &Error{Msg: string(n) + " is not an integer in range"}
		}
		switch bits {
		case 8:
			return append(dst, byte(u)), nil
		case 16:
			return le.AppendUint16(dst, uint16(u)), nil
		case 32:
			return le.AppendUint32(dst, uint32(u)), nil
		}
		return le.AppendUint64(dst, u), nil
	default: // INT8..INT64
		bits := 8 * tensor.ElementSize(dt)
		i, err := strconv.ParseInt(string(n), 10, bits)
		if err != nil {
			return nil, &Error{Msg: string(n) + " is not an integer in range"}
		}
		switch bits {
		case 8:
			return append(dst, byte(int8(i))), nil
		case 16:
			return le.AppendUint16(dst, uint16(int16(i))), nil
		case 32:
			return le.AppendUint32(dst, uint32(int32(i))), nil
		}
		return le.AppendUint64(dst, uint64(i)), nil
	}
}

func typeErr(v any, want string) *Error {
	got := "null"
	switch v.(type) {
	case string:
		got = "a string"
	case bool:
		got = "a boolean"
	case json.Number:
		got = "a number"
	case []any:
		got = "an array (only scalars or 1-D arrays are accepted)"
	case map[string]any:
		got = "an object"
	}
	return &Error{Msg: "expected " + want + ", got " + got}
}

// NewTensor builds the input md describes from Go values: string for BYTES,
// bool for BOOL, and int, int64, uint32, float64 or json.Number for the
// numeric types. The shape follows Shape. Errors are *Error.
func NewTensor(md *pb.ModelMetadataResponse_TensorMetadata, values ...any) (*tensor.Tensor, error) {
	if t := directTensor(md, values); t != nil {
		return t, nil
	}
	return jsonTensor(md, values)
}

// jsonTensor is NewTensor through the request JSON's own path: values
// as a JSON array, read as a request's input is.
func jsonTensor(md *pb.ModelMetadataResponse_TensorMetadata, values []any) (*tensor.Tensor, error) {
	elems := make([]any, len(values))
	for i, v := range values {
		switch x := v.(type) {
		case int:
			elems[i] = json.Number(strconv.Itoa(x))
		case int64:
			elems[i] = json.Number(strconv.FormatInt(x, 10))
		case uint32:
			elems[i] = json.Number(strconv.FormatUint(uint64(x), 10))
		case float64:
			elems[i] = json.Number(strconv.FormatFloat(x, 'g', -1, 64))
		default:
			elems[i] = v
		}
	}
	raw, err := json.Marshal(elems)
	if err != nil {
		return nil, &Error{Msg: err.Error()}
	}
	t, e := toTensor(md.GetName(), raw, md)
	if e != nil {
		return nil, e
	}
	return t, nil
}

// directTensor is NewTensor's fast path for the inputs every text request
// sends, strings into BYTES (the prompt, vLLM's sampling_parameters) and
// booleans into BOOL, encoded without the round trip through JSON (which,
// for valid UTF-8, gives the same bytes). Anything else is nil: jsonTensor
// builds it, or refuses it with its error.
func directTensor(md *pb.ModelMetadataResponse_TensorMetadata, values []any) *tensor.Tensor {
	dt := md.GetDatatype()
	size := 0
	for _, v := range values {
		switch x := v.(type) {
		case string:
			if dt != "BYTES" || !utf8.ValidString(x) {
				return nil
			}
			size += 4 + len(x)
		case bool:
			if dt != "BOOL" {
				return nil
			}
			size++
		default:
			return nil
		}
	}
	shape, ok := tensor.FitShape(md.GetShape(), int64(len(values)))
	if !ok {
		return nil
	}
	raw := make([]byte, 0, size)
	for _, v := range values {
		switch x := v.(type) {
		case string:
			raw = binary.LittleEndian.AppendUint32(raw, uint32(len(x)))
			raw = append(raw, x...)
		case bool:
			b := byte(0)
			if x {
				b = 1
			}
			raw = append(raw, b)
		}
	}
	return &tensor.Tensor{Name: md.GetName(), Datatype: dt, Shape: shape, Raw: raw}
}

// intTensor is toTensor's fast path for integer inputs (token ids, the
// arrays of repeat_int32): a scalar or a 1-D array of JSON integers in
// range is converted without decoding into Go values, allocating only the
// tensor. Anything else gives nil, and toTensor decodes it (with its
// error messages).
func intTensor(key string, raw []byte, md *pb.ModelMetadataResponse_TensorMetadata) *tensor.Tensor {
	dt := md.GetDatatype()
	signed := true
	switch dt {
	case "INT8", "INT16", "INT32", "INT64":
	case "UINT8", "UINT16", "UINT32", "UINT64":
		signed = false
	default:
		return nil
	}
	size := tensor.ElementSize(dt)
	b := trimSpace(raw)
	array := len(b) > 0 && b[0] == '['
	if array {
		if b[len(b)-1] != ']' {
			return nil
		}
		b = trimSpace(b[1 : len(b)-1])
	}
	n := 0
	if len(b) > 0 {
		n = 1 + bytes.Count(b, []byte{','})
	}
	if !array && n != 1 {
		return nil
	}
	data := make([]byte, 0, n*size)
	le := binary.LittleEndian
	for i := range n {
		var lit []byte
		if j := bytes.IndexByte(b, ','); j >= 0 && i < n-1 {
			lit, b = trimSpace(b[:j]), b[j+1:]
		} else {
			lit = trimSpace(b)
		}
		v, ok := parseJSONInt(lit, signed, 8*size)
		if !ok {
			return nil
		}
		switch size {
		case 1:
			data = append(data, byte(v))
		case 2:
			data = le.AppendUint16(data, uint16(v))
		case 4:
			data = le.AppendUint32(data, uint32(v))
		default:
			data = le.AppendUint64(data, v)
		}
	}
	shape, ok := tensor.FitShape(md.GetShape(), int64(n))
	if !ok {
		return nil
	}
	return &tensor.Tensor{Name: key, Datatype: dt, Shape: shape, Raw: data}
}

// parseJSONInt parses a JSON integer literal (-?(0|[1-9][0-9]*)) that fits
// bits bits, signed or not, into its two's complement bits.
func parseJSONInt(b []byte, signed bool, bits int) (uint64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		if !signed {
			return 0, false
		}
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 20 || (b[0] == '0' && len(b) > 1) {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if u > (math.MaxUint64-d)/10 {
			return 0, false
		}
		u = u*10 + d
	}
	switch {
	case !signed:
		return u, bits == 64 || u < 1<<bits
	case neg:
		return -u, u <= 1<<(bits-1)
	}
	return u, u < 1<<(bits-1)
}

func trimSpace(b []byte) []byte {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}
