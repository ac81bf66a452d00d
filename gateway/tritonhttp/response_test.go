package tritonhttp

import (
	"errors"
	"math"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

func resp(params map[string]*pb.InferParameter, outs ...*tensor.Tensor) *pb.ModelInferResponse {
	r := &pb.ModelInferResponse{ModelName: "m", ModelVersion: "1", Id: "ignored", Parameters: params}
	tensor.ToResponse(r, outs)
	return r
}

func raw(name, dt string, shape []int64, b []byte) *tensor.Tensor {
	return &tensor.Tensor{Name: name, Datatype: dt, Shape: shape, Raw: b}
}

// Every datatype JSON carries, printed as Triton's WriteDataToJson and
// rapidjson print it.
func TestResponseJSON(t *testing.T) {
	f32 := math.Float32bits(0.1)
	r := &Request{ID: "a\"1"}
	got, n, err := r.AppendResponse([]byte("prefix"), resp(
		map[string]*pb.InferParameter{
			finalParam: {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}},
			"z":        {ParameterChoice: &pb.InferParameter_DoubleParam{DoubleParam: 2}},
			"a":        {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "x"}},
			"i":        {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: -1}},
		},
		tensor.NewBool("B", []int64{2}, []bool{true, false}),
		raw("U8", "UINT8", []int64{1}, []byte{255}),
		raw("U16", "UINT16", []int64{1}, le16(65535)),
		tensor.NewUint32("U32", []int64{1}, []uint32{math.MaxUint32}),
		raw("U64", "UINT64", []int64{1}, le64(math.MaxUint64)),
		raw("I8", "INT8", []int64{1}, []byte{0x80}),
		raw("I16", "INT16", []int64{1}, le16(0x8000)),
		tensor.NewInt32("I32", []int64{2, 1}, []int32{-1, 2}),
		raw("I64", "INT64", []int64{1}, le64(1<<63)),
		raw("F32", "FP32", []int64{3}, le32(f32, math.Float32bits(1), math.Float32bits(-1e-7))),
		raw("F64", "FP64", []int64{2}, le64(math.Float64bits(0.1), math.Float64bits(1e21))),
		tensor.NewBytes("S", []int64{3}, [][]byte{[]byte("é"), {}, []byte("\n\xff")}),
		raw("E", "INT32", []int64{0}, []byte{}),
	))
	want := `{"id":"a\"1","model_name":"m","model_version":"1","parameters":{"a":"x","i":-1,"z":2.0},"outputs":[` +
		`{"name":"B","datatype":"BOOL","shape":[2],"data":[true,false]},` +
		`{"name":"U8","datatype":"UINT8","shape":[1],"data":[255]},` +
		`{"name":"U16","datatype":"UINT16","shape":[1],"data":[65535]},` +
		`{"name":"U32","datatype":"UINT32","shape":[1],"data":[4294967295]},` +
		`{"name":"U64","datatype":"UINT64","shape":[1],"data":[18446744073709551615]},` +
		`{"name":"I8","datatype":"INT8","shape":[1],"data":[-128]},` +
		`{"name":"I16","datatype":"INT16","shape":[1],"data":[-32768]},` +
		`{"name":"I32","datatype":"INT32","shape":[2,1],"data":[-1,2]},` +
		`{"name":"I64","datatype":"INT64","shape":[1],"data":[-9223372036854775808]},` +
		`{"name":"F32","datatype":"FP32","shape":[3],"data":[0.10000000149011612,1.0,-1.0000000116860974e-7]},` +
		`{"name":"F64","datatype":"FP64","shape":[2],"data":[0.1,1e21]},` +
		`{"name":"S","datatype":"BYTES","shape":[3],"data":["é","","\n` + "\xff" + `"]},` +
		`{"name":"E","datatype":"INT32","shape":[0],"data":[]}]}`
	if err != nil || n != -1 || string(got) != "prefix"+want {
		t.Errorf("got %d %v\n%s\nwant\n%s", n, err, got, "prefix"+want)
	}
}

// Binary outputs: JSON with binary_data_size, then their data in output
// order; zero-size ones add no data, and with no data at all the answer
// is plain JSON.
func TestResponseBinary(t *testing.T) {
	r := &Request{Outputs: []Output{{"A", true}, {"B", false}}, BinaryOutput: true}
	out := resp(nil,
		tensor.NewInt32("A", []int64{2}, []int32{1, 2}),
		tensor.NewInt32("B", []int64{1}, []int32{3}),
		raw("C", "FP16", []int64{1}, le16(0x3c00)),
		raw("D", "BYTES", []int64{0}, []byte{}))
	got, n, err := r.AppendResponse(nil, out)
	header := `{"model_name":"m","model_version":"1","outputs":[` +
		`{"name":"A","datatype":"INT32","shape":[2],"parameters":{"binary_data_size":8}},` +
		`{"name":"B","datatype":"INT32","shape":[1],"data":[3]},` +
		`{"name":"C","datatype":"FP16","shape":[1],"parameters":{"binary_data_size":2}},` +
		`{"name":"D","datatype":"BYTES","shape":[0],"parameters":{"binary_data_size":0}}]}`
	want := header + string(le32(1, 2)) + string(le16(0x3c00))
	if err != nil || n != len(header) || string(got) != want {
		t.Errorf("got %d %v %q\nwant %d %q", n, err, got, len(header), want)
	}

	r = &Request{BinaryOutput: true}
	got, n, err = r.AppendResponse(nil, resp(nil, raw("D", "BYTES", []int64{0}, []byte{})))
	if err != nil || n != -1 || string(got) != `{"model_name":"m","model_version":"1","outputs":[{"name":"D","datatype":"BYTES","shape":[0],"parameters":{"binary_data_size":0}}]}` {
		t.Errorf("zero-size binary: %d %v %s", n, err, got)
	}
}

func TestResponseErrors(t *testing.T) {
	for _, tc := range []struct {
		out  *tensor.Tensor
		code codes.Code
		want string
	}{
		{raw("H", "FP16", []int64{1}, le16(0)), codes.InvalidArgument, "sending FP16 data via JSON is not supported. Please use the binary data format for output"},
		{raw("H", "BF16", []int64{1}, le16(0)), codes.InvalidArgument, "sending BF16 data via JSON is not supported. Please use the binary data format for output"},
		{raw("N", "FP32", []int64{1}, le32(math.Float32bits(float32(math.NaN())))), codes.Internal, "output 'N' holds NaN or infinity, which JSON cannot represent: request it with binary_data"},
		{raw("N", "FP64", []int64{1}, le64(math.Float64bits(math.Inf(-1)))), codes.Internal, "output 'N' holds NaN or infinity, which JSON cannot represent: request it with binary_data"},
		{raw("X", "INT32", []int64{2}, le32(1)), codes.Internal, "output 'X': unexpected total byte size 4, expecting 8"},
	} {
		_, _, err := (&Request{}).AppendResponse(nil, resp(nil, tc.out))
		var e *Error
		if !errors.As(err, &e) || e.Code != tc.code || e.Msg != tc.want {
			t.Errorf("%s: %v, want %v %q", tc.out.Name, err, tc.code, tc.want)
		}
	}
}
