package generate

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/streamgate/streamgate/engine/tensor"
	"github.com/streamgate/streamgate/gateway/internal/jsonstr"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// FinalParam is the response parameter marking a request's last response;
// it is protocol bookkeeping and never shown to clients.
const FinalParam = "triton_final_response"

// Response renders resp as the generate JSON object: "id" (id, only if not
// empty), "model_name", "model_version", every response parameter, then
// every output: one element as a scalar, otherwise a flat array (BYTES as
// strings, FP16/BF16 as numbers, NaN and infinities as null).
func Response(resp *pb.ModelInferResponse, id string) ([]byte, error) {
	outs, err := tensor.FromResponse(resp)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, 128)
	b = append(b, '{')
	if id != "" {
		b = appendKey(b, "id")
		b = AppendString(b, id)
		b = append(b, ',')
	}
	b = appendKey(b, "model_name")
	b = AppendString(b, resp.GetModelName())
	b = append(b, ',')
	b = appendKey(b, "model_version")
	b = AppendString(b, resp.GetModelVersion())

	keys := make([]string, 0, len(resp.GetParameters()))
	for k := range resp.GetParameters() {
		if k != FinalParam {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		b = append(b, ',')
		b = appendKey(b, k)
		b = appendParam(b, resp.GetParameters()[k])
	}
	for _, t := range outs {
		b = append(b, ',')
		b = appendKey(b, t.Name)
		if b, err = appendTensor(b, t); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// ErrorBody is Triton's error object {"error":"<msg>"}.
func ErrorBody(msg string) []byte {
	b := append([]byte(`{"error":`), AppendString(nil, msg)...)
	return append(b, '}')
}

func appendKey(dst []byte, k string) []byte {
	return append(AppendString(dst, k), ':')
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
		return AppendString(b, v.StringParam)
	}
	return append(b, "null"...)
}

func appendFloat(b []byte, f float64, bits int) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, bits)
}

func appendTensor(b []byte, t *tensor.Tensor) ([]byte, error) {
	n := t.Count()
	var elems [][]byte
	if t.Datatype == "BYTES" {
		var err error
		if elems, err = tensor.SplitBytes(t.Raw, n); err != nil {
			return nil, fmt.Errorf("output '%s': %w", t.Name, err)
		}
	}
	size := tensor.ElementSize(t.Datatype)
	if n != 1 {
		b = append(b, '[')
	}
	le := binary.LittleEndian
	for i := range int(n) {
		if i > 0 {
			b = append(b, ',')
		}
		if t.Datatype == "BYTES" {
			b = jsonstr.AppendBytes(b, elems[i])
			continue
		}
		e := t.Raw[i*size : (i+1)*size]
		switch t.Datatype {
		case "BOOL":
			b = strconv.AppendBool(b, e[0] != 0)
		case "INT8":
			b = strconv.AppendInt(b, int64(int8(e[0])), 10)
		case "INT16":
			b = strconv.AppendInt(b, int64(int16(le.Uint16(e))), 10)
		case "INT32":
			b = strconv.AppendInt(b, int64(int32(le.Uint32(e))), 10)
		case "INT64":
			b = strconv.AppendInt(b, int64(le.Uint64(e)), 10)
		case "UINT8":
			b = strconv.AppendUint(b, uint64(e[0]), 10)
		case "UINT16":
			b = strconv.AppendUint(b, uint64(le.Uint16(e)), 10)
		case "UINT32":
			b = strconv.AppendUint(b, uint64(le.Uint32(e)), 10)
		case "UINT64":
			b = strconv.AppendUint(b, le.Uint64(e), 10)
		case "FP16":
			b = appendFloat(b, float64(F16ToF32(le.Uint16(e))), 32)
		case "BF16":
			b = appendFloat(b, float64(BF16ToF32(le.Uint16(e))), 32)
		case "FP32":
			b = appendFloat(b, float64(math.Float32frombits(le.Uint32(e))), 32)
		case "FP64":
			b = appendFloat(b, math.Float64frombits(le.Uint64(e)), 64)
		}
	}
	if n != 1 {
		b = append(b, ']')
	}
	return b, nil
}

// AppendString appends s as a JSON string, exactly as encoding/json
// would write it.
func AppendString(dst []byte, s string) []byte { return jsonstr.Append(dst, s) }
