package generate

import (
	"encoding/binary"
	"math"
	"sort"
	"strconv"

	"github.com/streamgate/streamgate/gateway/internal/jsonstr"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// FinalParam is the response parameter marking a request's last response;
// it is protocol bookkeeping and never shown to clients.
const FinalParam = "triton_final_response"

// Response renders resp as the generate JSON object: "id" (id, only if not
// empty), "model_name", "model_version", every response parameter, then
// every output: one element as a scalar, otherwise a flat array (BYTES as
// strings, FP16/BF16 as numbers, NaN and infinities as null).
func Response(resp *pb.ModelInferResponse, id string) ([]byte, error) {
	return AppendResponse(make([]byte, 0, 128), resp, id)
}

// AppendResponse is Response appending to dst, for callers that reuse one
// buffer per stream. Outputs in raw_output_contents (what Triton and the
// engine send) are read in place, allocating nothing; typed contents are
// converted first. On error the returned slice is nil.
func AppendResponse(dst []byte, resp *pb.ModelInferResponse, id string) ([]byte, error) {
	b := append(dst, '{')
	if id != "" {
		b = append(b, `"id":`...)
		b = jsonstr.Append(b, id)
		b = append(b, ',')
	}
	b = append(b, `"model_name":`...)
	b = jsonstr.Append(b, resp.GetModelName())
	b = append(b, ',')
	b = append(b, `"model_version":`...)
	b = jsonstr.Append(b, resp.GetModelVersion())
	b = appendParams(b, resp.GetParameters())

	err := tensor.EachOutput(resp, func(t tensor.Tensor) error {
		b = appendOutput(b, &t)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// appendParams appends ",<key>:<value>" for every parameter but
// FinalParam, in key order.
func appendParams(b []byte, params map[string]*pb.InferParameter) []byte {
	n := len(params)
	if _, ok := params[FinalParam]; ok {
		n--
	}
	if n == 0 {
		return b
	}
	keys := make([]string, 0, n)
	for k := range params {
		if k != FinalParam {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		b = append(b, ',')
		b = appendKey(b, k)
		b = appendParam(b, params[k])
	}
	return b
}

// ErrorBody is Triton's error object {"error":"<msg>"}.
func ErrorBody(msg string) []byte {
	b := append([]byte(`{"error":`), jsonstr.Append(nil, msg)...)
	return append(b, '}')
}

func appendKey(dst []byte, k string) []byte {
	return append(jsonstr.Append(dst, k), ':')
}

func appendParam(b []byte, p *pb.InferParameter) []byte {
	switch v := p.GetParameterChoice().(type) {
	case *pb.InferParameter_BoolParam:
		return strconv.AppendBool(b, v.BoolParam)
	case *pb.InferParameter_Int64Param:
		return strconv.AppendInt(b, v.Int64Param, 10)
	case *pb.InferParameter_Uint64Param:
		return strconv.AppendUint(b, v.Uint64Param, 10)
	case *pb.InferParameter_DoubleParam:
		return appendFloat(b, v.DoubleParam, 64)
	case *pb.InferParameter_StringParam:
		return jsonstr.Append(b, v.StringParam)
	}
	return append(b, "null"...)
}

func appendFloat(b []byte, f float64, bits int) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, bits)
}

// appendOutput appends ",<name>:<value>" for one output tensor whose data
// tensor.EachOutput has checked against its shape and datatype.
func appendOutput(b []byte, t *tensor.Tensor) []byte {
	name, dt, raw := t.Name, t.Datatype, t.Raw
	n, size := t.Count(), tensor.ElementSize(dt)
	b = append(b, ',')
	b = appendKey(b, name)
	if n != 1 {
		b = append(b, '[')
	}
	le := binary.LittleEndian
	rest := raw // BYTES: the elements not yet appended
	for i := range int(n) {
		if i > 0 {
			b = append(b, ',')
		}
		if size == 0 { // BYTES: 4-byte little-endian length, then the bytes
			l := int(le.Uint32(rest))
			b = jsonstr.AppendBytes(b, rest[4:4+l])
			rest = rest[4+l:]
			continue
		}
		e := raw[i*size : (i+1)*size]
		var ok bool
		if b, ok = tensor.AppendInteger(b, dt, e); !ok {
			f, _ := tensor.Float(dt, e)
			bits := 64
			if dt != "FP64" {
				bits = 32
			}
			b = appendFloat(b, f, bits)
		}
	}
	if n != 1 {
		b = append(b, ']')
	}
	return b
}
