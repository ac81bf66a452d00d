package tritonhttp

import (
	"encoding/binary"
	"math"
	"sort"
	"strconv"
	"unsafe"

	"google.golang.org/grpc/codes"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// finalParam is the stream protocol's end marker; Triton's HTTP responses
// never carry it.
const finalParam = "triton_final_response"

// AppendResponse appends the /infer answer to resp, a response to r, to
// dst: the JSON ({"id" if r has one, "model_name", "model_version",
// "parameters" if the response has any, "outputs"}), then the data of every
// binary output with data, in output order. headerLen is the JSON's length
// when binary data follows it (the answer is then application/octet-stream
// with header HeaderLength), -1 when the JSON is the whole answer
// (application/json).
func (r *Request) AppendResponse(dst []byte, resp *pb.ModelInferResponse) (body []byte, headerLen int, err error) {
	b := append(dst, '{')
	if r.ID != "" {
		b = append(b, `"id":`...)
		b = appendString(b, r.ID)
		b = append(b, ',')
	}
	b = append(b, `"model_name":`...)
	b = appendString(b, resp.GetModelName())
	b = append(b, `,"model_version":`...)
	b = appendString(b, resp.GetModelVersion())
	b = appendParams(b, resp.GetParameters())
	b = append(b, `,"outputs":[`...)
	var blobs [][]byte
	first := true
	err = tensor.EachOutput(resp, func(t tensor.Tensor) error {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, `{"name":`...)
		b = appendString(b, t.Name)
		b = append(b, `,"datatype":`...)
		b = appendString(b, t.Datatype)
		b = append(b, `,"shape":[`...)
		for j, d := range t.Shape {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, uint64(d), 10)
		}
		b = append(b, ']')
		if r.binary(t.Name) {
			b = append(b, `,"parameters":{"binary_data_size":`...)
			b = strconv.AppendInt(b, int64(len(t.Raw)), 10)
			b = append(b, '}', '}')
			if len(t.Raw) > 0 {
				blobs = append(blobs, t.Raw)
			}
			return nil
		}
		b = append(b, `,"data":[`...)
		var e *Error
		if b, e = appendData(b, &t); e != nil {
			return e
		}
		b = append(b, ']', '}')
		return nil
	})
	if err != nil {
		if _, ok := err.(*Error); !ok {
			err = &Error{Code: codes.Internal, Msg: err.Error()}
		}
		return nil, 0, err
	}
	b = append(b, ']', '}')
	if len(blobs) == 0 {
		return b, -1, nil
	}
	headerLen = len(b) - len(dst)
	for _, blob := range blobs {
		b = append(b, blob...)
	}
	return b, headerLen, nil
}

// appendParams appends `,"parameters":{...}` for the response's
// parameters but the final flag, in key order; nothing when there are
// none.
func appendParams(b []byte, params map[string]*pb.InferParameter) []byte {
	keys := make([]string, 0, len(params))
	for k := range params {
		if k != finalParam {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return b
	}
	sort.Strings(keys)
	b = append(b, `,"parameters":{`...)
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		switch v := params[k].GetParameterChoice().(type) {
		case *pb.InferParameter_BoolParam:
			b = strconv.AppendBool(b, v.BoolParam)
		case *pb.InferParameter_Int64Param:
			b = strconv.AppendInt(b, v.Int64Param, 10)
		case *pb.InferParameter_Uint64Param:
			b = strconv.AppendUint(b, v.Uint64Param, 10)
		case *pb.InferParameter_DoubleParam:
			if math.IsNaN(v.DoubleParam) || math.IsInf(v.DoubleParam, 0) {
				b = append(b, "null"...)
			} else {
				b = appendDouble(b, v.DoubleParam)
			}
		case *pb.InferParameter_StringParam:
			b = appendString(b, v.StringParam)
		default:
			b = append(b, "null"...)
		}
	}
	return append(b, '}')
}

// appendData appends the elements of t (checked against its shape by
// tensor.EachOutput) as Triton's WriteDataToJson does.
func appendData(b []byte, t *tensor.Tensor) ([]byte, *Error) {
	dt, raw := t.Datatype, t.Raw
	n, size := int(t.Count()), tensor.ElementSize(dt)
	switch dt {
	case "FP16", "BF16":
		return b, invalid("sending %s data via JSON is not supported. Please use the binary data format for output", dt)
	}
	le := binary.LittleEndian
	rest := raw // BYTES: the elements not yet appended
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		if size == 0 { // BYTES: 4-byte little-endian length, then the bytes
			l := int(le.Uint32(rest))
			b = appendString(b, unsafe.String(unsafe.SliceData(rest[4:]), l))
			rest = rest[4+l:]
			continue
		}
		e := raw[i*size : (i+1)*size]
		var ok bool
		if b, ok = tensor.AppendInteger(b, dt, e); ok {
			continue
		}
		f, _ := tensor.Float(dt, e) // FP32 or FP64: FP16 and BF16 were refused
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return b, &Error{Code: codes.Internal, Msg: "output '" + t.Name + "' holds NaN or infinity, which JSON cannot represent: request it with binary_data"}
		}
		b = appendDouble(b, f)
	}
	return b, nil
}
