package generate

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/streamgate/streamgate/gateway/internal/jsonobj"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

func md(name, dt string, shape ...int64) *pb.ModelMetadataResponse_TensorMetadata {
	return &pb.ModelMetadataResponse_TensorMetadata{Name: name, Datatype: dt, Shape: shape}
}

var repeatInputs = []*pb.ModelMetadataResponse_TensorMetadata{
	md("IN", "INT32", -1), md("DELAY", "UINT32", -1), md("WAIT", "UINT32", 1),
}

var allTypes = []*pb.ModelMetadataResponse_TensorMetadata{
	md("B", "BOOL", -1), md("I8", "INT8", -1), md("I64", "INT64", 2, -1), md("U16", "UINT16", -1),
	md("F16", "FP16", -1), md("BF", "BF16", -1), md("F32", "FP32", -1), md("F64", "FP64", -1),
	md("S", "BYTES", 1, -1, -1),
}

func TestParse(t *testing.T) {
	r, err := Parse([]byte(`{"id":"r1","IN":[1,2,3],"DELAY":[0,0,0],"WAIT":5,"temp":0.5,"greedy":true,"name":"x","n":7,
		"parameters":{"p":"q"}}`), repeatInputs)
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != "r1" || len(r.Inputs) != 3 {
		t.Fatalf("got %+v", r)
	}
	in, _ := r.Inputs[0].Int32s()
	if !reflect.DeepEqual(in, []int32{1, 2, 3}) || !reflect.DeepEqual(r.Inputs[0].Shape, []int64{3}) {
		t.Fatalf("IN = %v %v", in, r.Inputs[0].Shape)
	}
	if w, _ := r.Inputs[2].Uint32s(); !reflect.DeepEqual(w, []uint32{5}) || !reflect.DeepEqual(r.Inputs[2].Shape, []int64{1}) {
		t.Fatalf("WAIT = %v", w)
	}
	p := r.Parameters
	if p["temp"].GetDoubleParam() != 0.5 || !p["greedy"].GetBoolParam() || p["name"].GetStringParam() != "x" || p["n"].GetInt64Param() != 7 || p["p"].GetStringParam() != "q" {
		t.Fatalf("parameters %v", p)
	}
	req := r.Proto("repeat_int32", "")
	if req.GetModelName() != "repeat_int32" || len(req.GetRawInputContents()) != 3 || req.GetId() != "" {
		t.Fatalf("proto %v", req)
	}
}

func TestParseAllTypes(t *testing.T) {
	r, err := Parse([]byte(`{"B":[true,false],"I8":-128,"I64":[1,2,3,4],"U16":[65535],"F16":[1.5,-2],"BF":1,"F32":[0.25],"F64":[1e300],"S":["a","bc"]}`), allTypes)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]int64{}
	for _, in := range r.Inputs {
		got[in.Name] = in.Shape
		if err := in.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(got["I64"], []int64{2, 2}) || !reflect.DeepEqual(got["S"], []int64{1, 1, 2}) {
		t.Fatalf("shapes %v", got)
	}
	resp := &pb.ModelInferResponse{ModelName: "m", ModelVersion: "1"}
	tensor.ToResponse(resp, r.Inputs)
	out, err := Response(resp, "")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model_name":"m","model_version":"1","B":[true,false],"I8":-128,"I64":[1,2,3,4],"U16":65535,"F16":[1.5,-2],"BF":1,"F32":0.25,"F64":1e+300,"S":["a","bc"]}`
	if string(out) != want {
		t.Fatalf("Response =\n%s\nwant\n%s", out, want)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct{ body, want string }{
		{`{"id":1}`, "Unable to parse 'id'"},
		{`{"parameters":[1]}`, "Expected JSON object for keyword: 'parameters'"},
		{`{"x":{"a":1}}`, "parameter 'x' has invalid type. It should be either 'int', 'bool', or 'string'."},
		{`{"x":[1]}`, "parameter 'x' has invalid type. It should be either 'int', 'bool', or 'string'."},
		{`{"x":null}`, "parameter 'x' has invalid type. It should be either 'int', 'bool', or 'string'."},
		{`{"parameters":{"x":[1]}}`, "Converting keyword: 'parameters': parameter 'x' has invalid type. It should be either 'int', 'bool', or 'string'."},
		{`{"IN":[1],"IN":[2]}`, "input 'IN' already exists in request"},
		{`{"IN":[1],"parameters":{"IN":[2]}}`, "Converting keyword: 'parameters': input 'IN' already exists in request"},
		{`{"WAIT":[1,2]}`, "The schema can not convert input 'WAIT' to tensor with proper shape"},
		{`{"IN":["a"]}`, "unable to convert element 0 of input 'IN' to INT32: expected an integer, got a string"},
		{`{"IN":[1.5]}`, "unable to convert element 0 of input 'IN' to INT32: 1.5 is not an integer in range"},
		{`{"IN":[3000000000]}`, "unable to convert element 0 of input 'IN' to INT32: 3000000000 is not an integer in range"},
		{`{"DELAY":[-1]}`, "unable to convert element 0 of input 'DELAY' to UINT32: -1 is not an integer in range"},
		{`{"IN":[[1]]}`, "unable to convert element 0 of input 'IN' to INT32: expected an integer, got an array (only scalars or 1-D arrays are accepted)"},
		{`{"triton_x":1}`, "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: triton_enable_empty_final_response"},
		{`{"streamgate_cancel":true}`, "parameter keys starting with 'streamgate_' are reserved for streamgate usage"},
		{`[1]`, "Expected JSON object for the request body"},
	}
	for _, tc := range cases {
		_, err := Parse([]byte(tc.body), repeatInputs)
		var e *Error
		if !errors.As(err, &e) || e.Msg != tc.want {
			t.Errorf("Parse(%s) = %v, want %q", tc.body, err, tc.want)
		}
	}
}

func TestParseSyntaxErrorPosition(t *testing.T) {
	cases := []struct {
		body      string
		line, col int
	}{
		{"{\n  \"IN\": [1,,2]\n}", 2, 12},
		{`{"IN":`, 1, 7},
		{`{} x`, 1, 4},
		{`{"a":1 "b":2}`, 1, 8},
		{"nul", 1, 4},
	}
	for _, tc := range cases {
		_, err := Parse([]byte(tc.body), repeatInputs)
		var se *jsonobj.SyntaxError
		if !errors.As(err, &se) || se.Line != tc.line || se.Column != tc.col {
			t.Errorf("Parse(%q) = %v, want line %d column %d", tc.body, err, tc.line, tc.col)
		}
	}
	if r, err := Parse([]byte("  "), repeatInputs); err != nil || len(r.Inputs) != 0 {
		t.Fatalf("empty body: %v %v", r, err)
	}
}

func TestResponseParamsAndErrors(t *testing.T) {
	resp := &pb.ModelInferResponse{ModelName: "square_int32", ModelVersion: "1", Parameters: map[string]*pb.InferParameter{
		FinalParam: {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}},
		"b":        {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: -3}},
		"a":        {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "é\"<"}},
	}}
	tensor.ToResponse(resp, []*tensor.Tensor{tensor.NewInt32("OUT", []int64{1}, []int32{3}), tensor.NewInt32("E", []int64{0}, nil)})
	got, err := Response(resp, "x")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"x","model_name":"square_int32","model_version":"1","a":"é\"\u003c","b":-3,"OUT":3,"E":[]}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if !json.Valid(got) {
		t.Fatal("invalid JSON")
	}
	if e := string(ErrorBody("bad \"x\"")); e != `{"error":"bad \"x\""}` {
		t.Fatal(e)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"IN":[1,2],"DELAY":[0,0],"WAIT":1}`, `{"id":"a","parameters":{"x":1.5}}`, `{"S":["x"],"F16":[1e9]}`, `[`, `{"IN":[1,,]}`, ``} {
		f.Add([]byte(s))
	}
	inputs := append(append([]*pb.ModelMetadataResponse_TensorMetadata{}, repeatInputs...), allTypes...)
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := Parse(body, inputs)
		if err != nil {
			var e *Error
			var se *jsonobj.SyntaxError
			if !errors.As(err, &e) && !errors.As(err, &se) {
				t.Fatalf("unexpected error type %T: %v", err, err)
			}
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatal("empty error text")
			}
			return
		}
		for _, in := range r.Inputs {
			if err := in.Validate(); err != nil {
				t.Fatalf("invalid tensor %s: %v", in.Name, err)
			}
		}
	})
}

// TestIntTensorMatchesDecoding: the integer fast path gives exactly what
// decoding gives, and leaves everything else (and every error) to it.
func TestIntTensorMatchesDecoding(t *testing.T) {
	inputs := []string{
		`5`, `-5`, `0`, `-0`, `[]`, `[ ]`, `[1,2,3]`, ` [ 1 , -2 ,3 ] `, "[\n1,\t2]",
		`127`, `128`, `-128`, `-129`, `255`, `256`, `65535`, `65536`, `2147483647`, `2147483648`, `-2147483648`, `-2147483649`,
		`4294967295`, `4294967296`, `9223372036854775807`, `9223372036854775808`, `-9223372036854775808`, `-9223372036854775809`,
		`18446744073709551615`, `18446744073709551616`, `99999999999999999999999`,
		`01`, `-01`, `1.0`, `1e2`, `-`, `+1`, `[1,,2]`, `[1,2,]`, `[[1]]`, `["1"]`, `[true]`, `null`, `[1 2]`, `[1`, `1]`, `"x"`, ``,
	}
	for _, dt := range []string{"INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"} {
		md := &pb.ModelMetadataResponse_TensorMetadata{Name: "X", Datatype: dt, Shape: []int64{-1}}
		for _, in := range inputs {
			fast := intTensor("X", []byte(in), md)
			slow, err := decodedTensor("X", []byte(in), md)
			switch {
			case fast == nil:
				continue // decoding decides
			case err != nil:
				t.Errorf("%s %q: fast path accepted what decoding refuses: %s", dt, in, err.Msg)
			case !reflect.DeepEqual(fast, slow):
				t.Errorf("%s %q: fast %+v, decoded %+v", dt, in, fast, slow)
			}
		}
	}
	md := &pb.ModelMetadataResponse_TensorMetadata{Name: "IN", Datatype: "INT32", Shape: []int64{-1}}
	if intTensor("IN", []byte(`[1,2,3]`), md) == nil {
		t.Fatal("fast path not taken for an int32 array")
	}
}

// directTensor builds what the JSON path (jsonTensor) builds, and leaves
// to it what it does not build.
func TestDirectTensorMatchesNewTensor(t *testing.T) {
	md := func(dt string, shape ...int64) *pb.ModelMetadataResponse_TensorMetadata {
		return &pb.ModelMetadataResponse_TensorMetadata{Name: "x", Datatype: dt, Shape: shape}
	}
	for _, tc := range []struct {
		md     *pb.ModelMetadataResponse_TensorMetadata
		values []any
		direct bool
	}{
		{md("BYTES", 1), []any{"héllo <&> \u2028"}, true},
		{md("BYTES", -1), []any{"a", ""}, true},
		{md("BYTES", 1, -1), []any{"a", "b", "c"}, true},
		{md("BOOL", 1), []any{true}, true},
		{md("BOOL", -1), []any{false, true}, true},
		{md("BYTES", 1), []any{"bad \xff utf-8"}, false},
		{md("BYTES", 2), []any{"one"}, false},
		{md("INT32", 1), []any{"text"}, false},
		{md("BOOL", 1), []any{"text"}, false},
		{md("BYTES", 1), []any{true}, false},
		{md("INT32", 1), []any{5}, false},
	} {
		got := directTensor(tc.md, tc.values)
		if (got != nil) != tc.direct {
			t.Errorf("%v %q: direct %v, want %v", tc.md, tc.values, got != nil, tc.direct)
			continue
		}
		if got == nil {
			continue
		}
		want, err := jsonTensor(tc.md, tc.values)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%v %q:\n got %+v\nwant %+v (%v)", tc.md, tc.values, got, want, err)
		}
	}
}
