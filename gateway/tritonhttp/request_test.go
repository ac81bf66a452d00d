package tritonhttp

import (
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/streamgate/streamgate/gateway/internal/jsonobj"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// body is a request body of the binary extension: the JSON header, then
// the blobs; it returns the body and the header's length.
func body(header string, blobs ...[]byte) ([]byte, int) {
	b := []byte(header)
	for _, blob := range blobs {
		b = append(b, blob...)
	}
	return b, len(header)
}

func le32(vs ...uint32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

func le16(vs ...uint16) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint16(b, v)
	}
	return b
}

func le64(vs ...uint64) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

// identityConfig is a one-input model config for raw binary requests.
func identityConfig(dt pb.DataType, maxBatch int32, dims ...int64) *pb.ModelConfig {
	return &pb.ModelConfig{Name: "m", MaxBatchSize: maxBatch,
		Input:  []*pb.ModelInput{{Name: "INPUT0", DataType: dt, Dims: dims}},
		Output: []*pb.ModelOutput{{Name: "OUTPUT0", DataType: dt, Dims: dims}}}
}

func mustParse(t *testing.T, b []byte, n int, cfg *pb.ModelConfig) *Request {
	t.Helper()
	r, err := Parse(b, n, "m", cfg)
	if err != nil {
		t.Fatalf("Parse(%q): %v", b, err)
	}
	return r
}

// JSON data of every datatype JSON carries, as Triton's ReadDataFromJson
// converts it: nested arrays flattened, integers truncated to the width.
func TestParseJSONData(t *testing.T) {
	f32 := func(fs ...float32) []byte {
		var b []byte
		for _, f := range fs {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
		}
		return b
	}
	for _, tc := range []struct {
		dt, shape, data string
		want            []byte
	}{
		{"BOOL", "[3]", "[true,false,true]", []byte{1, 0, 1}},
		{"UINT8", "[3]", "[0,255,256]", []byte{0, 255, 0}},
		{"UINT16", "[2]", "[65535,65536]", le16(65535, 0)},
		{"UINT32", "[1]", "[4294967295]", le32(math.MaxUint32)},
		{"UINT64", "[1]", "[18446744073709551615]", le64(math.MaxUint64)},
		{"INT8", "[3]", "[-1,127,200]", []byte{0xff, 127, 200}},
		{"INT16", "[2]", "[-2,32768]", le16(0xfffe, 0x8000)},
		{"INT32", "[2,2]", "[[1,2],[3,-4]]", le32(1, 2, 3, 0xfffffffc)},
		{"INT32", "[3]", "[[1],[],[[2]],3]", le32(1, 2, 3)},
		{"INT64", "[1]", "[-9223372036854775808]", le64(1 << 63)},
		{"FP32", "[3]", "[0.1,2,-1e3]", f32(0.1, 2, -1000)},
		{"FP64", "[2]", "[0.1,-0.0]", le64(math.Float64bits(0.1), 1<<63)},
		{"BYTES", "[3]", `["a","","é\u0000"]`, append(append(le32(1), 'a'), append(le32(0), append(le32(3), "é\x00"...)...)...)},
		{"INT32", "[0]", `"not even read"`, []byte{}},
		{"INT32", "[2,0]", `[]`, []byte{}},
	} {
		hdr := `{"inputs":[{"name":"X","shape":` + tc.shape + `,"datatype":"` + tc.dt + `","data":` + tc.data + `}]}`
		r := mustParse(t, []byte(hdr), len(hdr), nil)
		got := r.Inputs[0]
		if !reflect.DeepEqual(got.Raw, tc.want) || got.Datatype != tc.dt || got.Name != "X" {
			t.Errorf("%s %s %s: got %s %x, want %x", tc.dt, tc.shape, tc.data, got.Datatype, got.Raw, tc.want)
		}
	}
}

// Binary inputs take their bytes in input order from after the header;
// the tensors alias the body.
func TestParseBinary(t *testing.T) {
	hdr := `{"id":"r1","inputs":[` +
		`{"name":"A","shape":[2],"datatype":"INT32","parameters":{"binary_data_size":8}},` +
		`{"name":"B","shape":[1],"datatype":"FP16","parameters":{"binary_data_size":2}},` +
		`{"name":"C","shape":[0],"datatype":"BF16","parameters":{"binary_data_size":0}},` +
		`{"name":"D","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":7}},` +
		`{"name":"E","shape":[1],"datatype":"INT32","data":[9]}],` +
		`"outputs":[{"name":"O1","parameters":{"binary_data":true}},{"name":"O2"},{"name":"O1","parameters":{"binary_data":false}}]}`
	b, n := body(hdr, le32(1, 2), le16(tensor.F32ToF16(1.5)), append(le32(3), "xyz"...))
	r := mustParse(t, b, n, nil)
	want := []*tensor.Tensor{
		{Name: "A", Datatype: "INT32", Shape: []int64{2}, Raw: le32(1, 2)},
		{Name: "B", Datatype: "FP16", Shape: []int64{1}, Raw: le16(0x3e00)},
		{Name: "C", Datatype: "BF16", Shape: []int64{0}, Raw: []byte{}},
		{Name: "D", Datatype: "BYTES", Shape: []int64{1}, Raw: append(le32(3), "xyz"...)},
		{Name: "E", Datatype: "INT32", Shape: []int64{1}, Raw: le32(9)},
	}
	if !reflect.DeepEqual(r.Inputs, want) {
		t.Errorf("inputs %+v\nwant %+v", r.Inputs, want)
	}
	if r.ID != "r1" || r.BinaryOutput || !reflect.DeepEqual(r.Outputs, []Output{{"O1", true}, {"O2", false}}) {
		t.Errorf("id %q binary %v outputs %+v", r.ID, r.BinaryOutput, r.Outputs)
	}
	if &r.Inputs[0].Raw[0] != &b[n] {
		t.Error("binary data is copied, not aliased")
	}
	req := r.Proto("m", "1")
	wantReq := &pb.ModelInferRequest{ModelName: "m", ModelVersion: "1", Id: "r1",
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "O1"}, {Name: "O2"}}}
	tensor.ToRequest(wantReq, want)
	if !proto.Equal(req, wantReq) {
		t.Errorf("Proto = %v\nwant %v", req, wantReq)
	}
}

func TestParseParameters(t *testing.T) {
	hdr := `{"parameters":{"sequence_id":5,"sequence_start":true,"sequence_end":false,"priority":1,"timeout":100,` +
		`"binary_data_output":true,"d":1.5,"s":"x","b":true,"i":-3,"big":18446744073709551615,"i":"dup"},"inputs":[]}`
	r := mustParse(t, []byte(hdr), len(hdr), nil)
	i64 := func(v int64) *pb.InferParameter {
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: v}}
	}
	bl := func(v bool) *pb.InferParameter {
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: v}}
	}
	dbl := func(v float64) *pb.InferParameter {
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_DoubleParam{DoubleParam: v}}
	}
	want := map[string]*pb.InferParameter{
		"sequence_id": i64(5), "sequence_start": bl(true), "sequence_end": bl(false),
		"priority": {ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: 1}},
		"timeout":  i64(100), "d": dbl(1.5), "s": stringParam("x"), "b": bl(true), "i": i64(-3),
		"big": dbl(18446744073709551615),
	}
	if !r.BinaryOutput || len(r.Parameters) != len(want) {
		t.Fatalf("binary %v params %v", r.BinaryOutput, r.Parameters)
	}
	for k, v := range want {
		if !proto.Equal(r.Parameters[k], v) {
			t.Errorf("%s = %v, want %v", k, r.Parameters[k], v)
		}
	}
	hdr = `{"parameters":{"sequence_id":"abc"},"inputs":[]}`
	if r := mustParse(t, []byte(hdr), len(hdr), nil); !proto.Equal(r.Parameters["sequence_id"], stringParam("abc")) {
		t.Errorf("string sequence_id = %v", r.Parameters["sequence_id"])
	}
	// A uint64 id keeps its bits in the int64_param; a timeout that does
	// not fit is the server's to refuse.
	hdr = `{"parameters":{"sequence_id":18446744073709551615,"timeout":18446744073709551615},"inputs":[]}`
	r = mustParse(t, []byte(hdr), len(hdr), nil)
	if !proto.Equal(r.Parameters["sequence_id"], i64(-1)) ||
		!proto.Equal(r.Parameters["timeout"], &pb.InferParameter{ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: math.MaxUint64}}) {
		t.Errorf("big sequence_id, timeout = %v, %v", r.Parameters["sequence_id"], r.Parameters["timeout"])
	}
}

// A raw binary request (header length 0) is the data of the model's one
// input, shaped from its config as Triton's core deduces it.
func TestParseRaw(t *testing.T) {
	for _, tc := range []struct {
		cfg   *pb.ModelConfig
		body  []byte
		shape []int64
		raw   []byte
	}{
		{identityConfig(pb.DataType_TYPE_INT32, 0, -1), le32(1, 2, 3), []int64{3}, le32(1, 2, 3)},
		{identityConfig(pb.DataType_TYPE_FP32, 8, 2, -1), make([]byte, 16), []int64{1, 2, 2}, make([]byte, 16)},
		{identityConfig(pb.DataType_TYPE_UINT8, 0, 4), []byte{1, 2, 3, 4}, []int64{4}, []byte{1, 2, 3, 4}},
		{identityConfig(pb.DataType_TYPE_STRING, 0, 1), []byte("427"), []int64{1}, append(le32(3), "427"...)},
		{identityConfig(pb.DataType_TYPE_INT32, 0, -1), []byte{}, []int64{0}, []byte{}},
	} {
		r := mustParse(t, tc.body, 0, tc.cfg)
		in := r.Inputs[0]
		want := Datatype(tc.cfg.Input[0].DataType)
		if !r.BinaryOutput || in.Name != "INPUT0" || in.Datatype != want || !reflect.DeepEqual(in.Shape, tc.shape) || !reflect.DeepEqual(in.Raw, tc.raw) {
			t.Errorf("%v: got %+v binary %v", tc.cfg, in, r.BinaryOutput)
		}
	}
}

func TestParseHeaderLength(t *testing.T) {
	for _, tc := range []struct {
		value   string
		present bool
		want    int
		err     string
	}{
		{"", false, 10, ""},
		{"4", true, 4, ""},
		{" +7xyz", true, 7, ""},
		{"abc", true, 0, ""}, // atoi: a raw binary request
		{"10", true, 10, ""},
		{"11", true, 0, "inference header size should be in range (0, 10), got: 11"},
		{"-1", true, 0, "inference header size should be in range (0, 10), got: -1"},
		{"99999999999999999999999", true, 0, "inference header size should be in range (0, 10), got: 99999999999999999999999"},
	} {
		n, err := ParseHeaderLength(tc.value, tc.present, 10)
		if n != tc.want || (err == nil) != (tc.err == "") || err != nil && err.Error() != tc.err {
			t.Errorf("ParseHeaderLength(%q, %v) = %d, %v; want %d, %q", tc.value, tc.present, n, err, tc.want, tc.err)
		}
	}
}

// Every refusal, with Triton's text and class.
func TestParseErrors(t *testing.T) {
	in := func(fields string) string { return `{"inputs":[{"name":"X",` + fields + `}]}` }
	data := func(dt, shape, d string) string {
		return in(`"datatype":"` + dt + `","shape":` + shape + `,"data":` + d)
	}
	bin := func(size string) string {
		return in(`"datatype":"INT32","shape":[1],"parameters":{"binary_data_size":` + size + `}`)
	}
	out := func(o string) string { return `{"inputs":[],"outputs":[` + o + `]}` }
	const shapeMsg = "Unable to parse 'data': Shape does not match true shape of 'data' field"
	const oneOf = "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But"
	for _, tc := range []struct {
		header string
		blob   []byte
		code   codes.Code
		want   string
	}{
		{`{}`, nil, codes.InvalidArgument, "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'"},
		{`[1]`, nil, codes.InvalidArgument, "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'"},
		{`{"inputs":{}}`, nil, codes.InvalidArgument, "Unable to parse 'inputs': attempt to access JSON non-array as array"},
		{`{"id":1,"inputs":[]}`, nil, codes.InvalidArgument, "Unable to parse 'id': attempt to access JSON non-string as string"},
		{`{"parameters":[],"inputs":[]}`, nil, codes.InvalidArgument, "failed to get request params.: attempt to get members for non-object"},
		{`{"parameters":{"triton_enable_empty_final_response":true},"inputs":[]}`, nil, codes.InvalidArgument, "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified."},
		{`{"parameters":{"streamgate_cancel":true},"inputs":[]}`, nil, codes.InvalidArgument, "parameter keys starting with 'streamgate_' are reserved for streamgate usage"},
		{`{"parameters":{"x":[1]},"inputs":[]}`, nil, codes.InvalidArgument, "parameter 'x' has invalid type. It should be either 'int', 'bool', or 'string'."},
		{`{"parameters":{"x":null},"inputs":[]}`, nil, codes.InvalidArgument, "parameter 'x' has invalid type. It should be either 'int', 'bool', or 'string'."},
		{`{"parameters":{"sequence_id":-1},"inputs":[]}`, nil, codes.InvalidArgument, "Unable to parse 'sequence_id': attempt to access JSON non-string as string"},
		{`{"parameters":{"sequence_start":1},"inputs":[]}`, nil, codes.InvalidArgument, "Unable to parse 'sequence_start': attempt to access JSON non-boolean as boolean"},
		{`{"parameters":{"priority":"1"},"inputs":[]}`, nil, codes.InvalidArgument, "Unable to parse 'priority': attempt to access JSON non-unsigned-integer as unsigned-integer"},
		{`{"parameters":{"timeout":-5},"inputs":[]}`, nil, codes.InvalidArgument, "Unable to parse 'timeout': attempt to access JSON non-unsigned-integer as unsigned-integer"},
		{`{"parameters":{"binary_data_output":1},"inputs":[]}`, nil, codes.InvalidArgument, "Unable to parse 'binary_data_output': attempt to access JSON non-boolean as boolean"},
		{in(`"datatype":"INT32","shape":[1]`), nil, codes.InvalidArgument, oneOf + " no field is set"},
		{`{"inputs":[7]}`, nil, codes.InvalidArgument, oneOf + " no field is set"},
		{in(`"datatype":"INT32","shape":[1],"data":[1],"parameters":{"binary_data_size":4,"shared_memory_region":"r"}`), nil, codes.InvalidArgument, oneOf + " set 'data' 'binary_data_size' 'shared_memory_region'"},
		{`{"inputs":[{"datatype":"INT32","shape":[1],"data":[1]}]}`, nil, codes.InvalidArgument, "Unable to parse 'name': attempt to access non-existing object member 'name'"},
		{`{"inputs":[{"name":1,"datatype":"INT32","shape":[1],"data":[1]}]}`, nil, codes.InvalidArgument, "Unable to parse 'name': attempt to access JSON non-string as string"},
		{in(`"shape":[1],"data":[1]`), nil, codes.InvalidArgument, "Unable to parse 'datatype': attempt to access non-existing object member 'datatype'"},
		{in(`"datatype":"INT32","data":[1]`), nil, codes.InvalidArgument, "Unable to parse 'shape': attempt to access non-existing object member 'shape'"},
		{data("INT32", `2`, `[1]`), nil, codes.InvalidArgument, "Unable to parse 'shape': attempt to access JSON non-array as array"},
		{data("INT32", `[-1]`, `[1]`), nil, codes.InvalidArgument, "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer"},
		{data("INT32", `[1.0]`, `[1]`), nil, codes.InvalidArgument, "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer"},
		{data("INT32", `[1]`, `[1,2]`), nil, codes.InvalidArgument, shapeMsg},
		{data("INT32", `[3]`, `[1,2]`), nil, codes.InvalidArgument, shapeMsg},
		{data("INT32", `[4294967296,4294967296]`, `[1]`), nil, codes.InvalidArgument, shapeMsg},
		{data("INT32", `[1]`, `1`), nil, codes.InvalidArgument, "Unable to parse 'data': attempt to access JSON non-array as array"},
		{data("INT32", `[1]`, `["1"]`), nil, codes.InvalidArgument, "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"},
		{data("INT64", `[1]`, `[1.0]`), nil, codes.InvalidArgument, "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"},
		{data("INT64", `[1]`, `[9223372036854775808]`), nil, codes.InvalidArgument, "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"},
		{data("UINT8", `[1]`, `[-1]`), nil, codes.InvalidArgument, "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer"},
		{data("BOOL", `[1]`, `[1]`), nil, codes.InvalidArgument, "Unable to parse 'data': attempt to access JSON non-boolean as boolean"},
		{data("FP32", `[1]`, `[null]`), nil, codes.InvalidArgument, "Unable to parse 'data': attempt to access JSON non-number as double"},
		{data("FP64", `[1]`, `[1e400]`), nil, codes.InvalidArgument, "Unable to parse 'data': Number too big to be stored in double."},
		{data("BYTES", `[2]`, `["a",1]`), nil, codes.InvalidArgument, "Unable to parse JSON bytes array: attempt to access JSON non-string as string"},
		{data("FP16", `[1]`, `[1]`), nil, codes.InvalidArgument, "receiving FP16 data via JSON is not supported. Please use the binary data format for input X"},
		{data("BF16", `[1]`, `[1]`), nil, codes.InvalidArgument, "receiving BF16 data via JSON is not supported. Please use the binary data format for input X"},
		{data("INT31", `[1]`, `[1]`), nil, codes.InvalidArgument, "invalid datatype for input X"},
		{`{"inputs":[{"name":"X","datatype":"INT32","shape":[1],"data":[1]},{"name":"X","datatype":"INT32","shape":[1],"data":[1]}]}`, nil, codes.InvalidArgument, "input 'X' already exists in request"},
		{`{"id":"a","inputs":[{"name":"X","datatype":"INT32","shape":[1],"data":[1]},{"name":"X","datatype":"INT32","shape":[1],"data":[1]}]}`, nil, codes.InvalidArgument, "[request id: a] input 'X' already exists in request"},
		{bin(`"4"`), le32(1), codes.InvalidArgument, "Unable to parse 'binary_data_size': attempt to access JSON non-unsigned-integer as unsigned-integer"},
		{bin(`4`), []byte{1, 2, 3}, codes.InvalidArgument, "unexpected size for input 'X', expecting 1 additional bytes for model 'm'"},
		{bin(`4`), nil, codes.InvalidArgument, "unexpected size for input 'X', expecting 4 additional bytes for model 'm'"},
		{bin(`4`), le32(1, 2), codes.InvalidArgument, "unexpected additional input data for model 'm'"},
		{data("INT32", `[1]`, `[1]`), []byte{0}, codes.InvalidArgument, "unexpected additional input data for model 'm'"},
		{in(`"datatype":"INT32","shape":[1],"parameters":{"shared_memory_region":"r","shared_memory_byte_size":4}`), nil, codes.NotFound, "Unable to find shared memory region: 'r'"},
		{in(`"datatype":"INT32","shape":[1],"parameters":{"shared_memory_region":5}`), nil, codes.InvalidArgument, "Unable to parse 'shared_memory_region': attempt to access JSON non-string as string"},
		{in(`"datatype":"INT32","shape":[1],"parameters":{"shared_memory_region":"r","shared_memory_offset":-1}`), nil, codes.InvalidArgument, "Unable to parse 'shared_memory_offset': attempt to access JSON non-unsigned-integer as unsigned-integer"},
		{`{"inputs":[],"outputs":{}}`, nil, codes.InvalidArgument, "Unable to parse 'outputs': attempt to access JSON non-array as array"},
		{out(`{}`), nil, codes.InvalidArgument, "Unable to parse 'name': attempt to access non-existing object member 'name'"},
		{out(`{"name":"O","parameters":{"binary_data":"yes"}}`), nil, codes.InvalidArgument, "Unable to parse 'binary_data': attempt to access JSON non-boolean as boolean"},
		{out(`{"name":"O","parameters":{"shared_memory_region":"r","binary_data":true}}`), nil, codes.InvalidArgument, "Output can't set both 'shared_memory_region' and 'binary_data'"},
		{out(`{"name":"O","parameters":{"shared_memory_region":"r","classification":1}}`), nil, codes.InvalidArgument, "Output can't set both 'shared_memory_region' and 'classification'"},
		{out(`{"name":"O","parameters":{"shared_memory_region":"r"}}`), nil, codes.NotFound, "Unable to find shared memory region: 'r'"},
		{out(`{"name":"O","parameters":{"classification":-1}}`), nil, codes.InvalidArgument, "Unable to set 'classification': attempt to access JSON non-unsigned-integer as unsigned-integer"},
		{out(`{"name":"O","parameters":{"classification":3}}`), nil, codes.Unimplemented, "output 'O': classification is not supported by streamgate"},
	} {
		b, n := body(tc.header, tc.blob)
		_, err := Parse(b, n, "m", nil)
		var e *Error
		if !errors.As(err, &e) || e.Code != tc.code || e.Msg != tc.want {
			t.Errorf("Parse(%s %x) = %v, want %v %q", tc.header, tc.blob, err, tc.code, tc.want)
		}
	}
	_, err := Parse([]byte(`{"inputs":[1,]}`), 15, "m", nil)
	var se *jsonobj.SyntaxError
	if !errors.As(err, &se) || !strings.HasPrefix(se.Error(), "failed to parse the request JSON buffer: ") {
		t.Errorf("bad JSON: %v", err)
	}
	for _, tc := range []struct {
		cfg  *pb.ModelConfig
		want string
	}{
		{&pb.ModelConfig{Input: []*pb.ModelInput{{Name: "A"}, {Name: "B"}}}, "Raw request must only have 1 input (found 1) to be deduced but got 2 inputs in 'm' model configuration"},
		{identityConfig(pb.DataType_TYPE_FP32, 0, -1, 2, -1), "The shape of the raw input 'INPUT0' can not be deduced because there are more than one variable-sized dimension"},
		{identityConfig(pb.DataType_TYPE_STRING, 0, -1), "For BYTE datatype raw input 'INPUT0', the model must have input shape [1]"},
		{identityConfig(pb.DataType_TYPE_STRING, 0, 2), "For BYTE datatype raw input 'INPUT0', the model must have input shape [1]"},
	} {
		_, err := Parse([]byte("abcd"), 0, "m", tc.cfg)
		var e *Error
		if !errors.As(err, &e) || e.Code != codes.InvalidArgument || e.Msg != tc.want {
			t.Errorf("raw %v = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
