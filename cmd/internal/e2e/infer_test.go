package e2e

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/streamgate/streamgate/cmd/internal/stack"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// Triton's HTTP/REST inference protocol through the gateway, against the
// engine over loopback gRPC. tritonclient (NVIDIA's Python client) cannot
// be installed here (no PyPI), so httpClient below reproduces its wire
// behaviour (tritonclient/http/_utils.py _get_inference_request,
// _infer_input.py, _requested_output.py, _infer_result.py) byte for byte.

// identityDatatypes are the datatypes of the identity_<type> test models.
var identityDatatypes = []string{"BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "BF16", "FP32", "FP64", "BYTES"}

// identityModels adds identity_<type> for every datatype: Triton's
// identity backend, INPUT0 [-1] -> OUTPUT0, not decoupled.
func identityModels(c *stack.Config) {
	for _, dt := range identityDatatypes {
		cfgType := pb.DataType(pb.DataType_value["TYPE_"+dt])
		if dt == "BYTES" {
			cfgType = pb.DataType_TYPE_STRING
		}
		c.Engine.Extra = append(c.Engine.Extra, &pb.ModelConfig{
			Name: "identity_" + strings.ToLower(dt), Backend: "identity",
			Input:  []*pb.ModelInput{{Name: "INPUT0", DataType: cfgType, Dims: []int64{-1}}},
			Output: []*pb.ModelOutput{{Name: "OUTPUT0", DataType: cfgType, Dims: []int64{-1}}},
		})
	}
}

// inferInput is tritonclient.http.InferInput after set_data_from_numpy:
// binary (raw set, binary_data=True, the default) or JSON (data set).
type inferInput struct {
	name     string
	shape    []int64
	datatype string
	raw      []byte // binary data; nil for JSON
	data     []any  // JSON data (flattened, as numpy's flatten gives)
}

// requestedOutput is tritonclient.http.InferRequestedOutput.
type requestedOutput struct {
	name   string
	binary bool
}

// inferBody builds the body exactly as tritonclient's
// _get_inference_request and rapidjson.dumps do: keys in insertion order
// (id, inputs, outputs, parameters), compact separators, inputs as
// {name, shape, datatype[, parameters][, data]}, then the binary data of
// every binary input. jsonSize is the Inference-Header-Content-Length the
// client sends, -1 when it sends none (no binary input).
func inferBody(id string, inputs []inferInput, outputs []requestedOutput, params [][2]any) (body []byte, jsonSize int) {
	var b bytes.Buffer
	b.WriteByte('{')
	if id != "" {
		fmt.Fprintf(&b, `"id":%s,`, mustJSON(id))
	}
	b.WriteString(`"inputs":[`)
	for i, in := range inputs {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":%s,"shape":%s,"datatype":%s`, mustJSON(in.name), mustJSON(in.shape), mustJSON(in.datatype))
		if in.raw != nil {
			fmt.Fprintf(&b, `,"parameters":{"binary_data_size":%d}`, len(in.raw))
		} else {
			fmt.Fprintf(&b, `,"data":%s`, mustJSON(in.data))
		}
		b.WriteByte('}')
	}
	b.WriteByte(']')
	if len(outputs) > 0 {
		b.WriteString(`,"outputs":[`)
		for i, o := range outputs {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"name":%s,"parameters":{"binary_data":%t}}`, mustJSON(o.name), o.binary)
		}
		b.WriteByte(']')
	} else {
		params = append([][2]any{{"binary_data_output", true}}, params...)
	}
	if len(params) > 0 {
		b.WriteString(`,"parameters":{`)
		for i, p := range params {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `%s:%s`, mustJSON(p[0]), mustJSON(p[1]))
		}
		b.WriteByte('}')
	}
	b.WriteByte('}')
	jsonSize = -1
	if n := b.Len(); slicesAny(inputs, func(in inferInput) bool { return in.raw != nil }) {
		jsonSize = n
		for _, in := range inputs {
			b.Write(in.raw)
		}
	}
	return b.Bytes(), jsonSize
}

func slicesAny[T any](s []T, f func(T) bool) bool {
	for _, v := range s {
		if f(v) {
			return true
		}
	}
	return false
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// inferResult is tritonclient.http.InferResult: the JSON part, and each
// binary output's data located by walking binary_data_size in output
// order.
type inferResult struct {
	json    map[string]any
	outputs map[string]map[string]any
	binary  map[string][]byte
}

func readInferResult(t *testing.T, resp *http.Response, body []byte) *inferResult {
	t.Helper()
	header := body
	var buffer []byte
	if hl := resp.Header.Get("Inference-Header-Content-Length"); hl != "" {
		n, err := strconv.Atoi(hl)
		if err != nil || n > len(body) {
			t.Fatalf("Inference-Header-Content-Length %q of a %d-byte body", hl, len(body))
		}
		header, buffer = body[:n], body[n:]
	}
	r := &inferResult{outputs: map[string]map[string]any{}, binary: map[string][]byte{}}
	dec := json.NewDecoder(bytes.NewReader(header))
	dec.UseNumber()
	if err := dec.Decode(&r.json); err != nil {
		t.Fatalf("response JSON %q: %v", header, err)
	}
	outs, _ := r.json["outputs"].([]any)
	at := 0
	for _, o := range outs {
		out := o.(map[string]any)
		name := out["name"].(string)
		r.outputs[name] = out
		if p, ok := out["parameters"].(map[string]any); ok {
			if size, ok := p["binary_data_size"].(json.Number); ok {
				n, _ := size.Int64()
				if at+int(n) > len(buffer) {
					t.Fatalf("output %s: %d bytes past a %d-byte buffer", name, n, len(buffer))
				}
				r.binary[name] = buffer[at : at+int(n)]
				at += int(n)
			}
		}
	}
	if at != len(buffer) {
		t.Fatalf("%d bytes of binary data, outputs account for %d", len(buffer), at)
	}
	return r
}

// infer posts a request as tritonclient.http's infer() does: the
// Inference-Header-Content-Length header only when binary data follows.
// headers adds name, value pairs. The answer is checked against
// openapi.yaml.
func (s *testStack) infer(t *testing.T, path string, body []byte, jsonSize int, headers ...string) (*http.Response, []byte) {
	t.Helper()
	h := http.Header{}
	if jsonSize >= 0 {
		h.Set("Inference-Header-Content-Length", strconv.Itoa(jsonSize))
	}
	for i := 0; i+1 < len(headers); i += 2 {
		h.Set(headers[i], headers[i+1])
	}
	return s.do(t, http.MethodPost, path, body, h)
}

func le32s(vs ...int32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	return b
}

// The binary extension byte for byte: the request tritonclient sends for
// identity_int32 with INPUT0 = [1, 2, 3] as binary data and OUTPUT0 asked
// for as binary data, and the exact answer Triton gives.
func TestInferBinaryExtension(t *testing.T) {
	s := newStack(t, nil, identityModels)
	in := inferInput{name: "INPUT0", shape: []int64{3}, datatype: "INT32", raw: le32s(1, 2, -3)}
	body, n := inferBody("1", []inferInput{in}, []requestedOutput{{"OUTPUT0", true}}, nil)
	wantReq := `{"id":"1","inputs":[{"name":"INPUT0","shape":[3],"datatype":"INT32","parameters":{"binary_data_size":12}}],"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}}]}`
	if string(body) != wantReq+string(in.raw) || n != len(wantReq) {
		t.Fatalf("client body %q (json %d), want %q", body, n, wantReq)
	}
	resp, got := s.infer(t, "/v2/models/identity_int32/infer", body, n)
	wantJSON := `{"id":"1","model_name":"identity_int32","model_version":"1","outputs":[{"name":"OUTPUT0","datatype":"INT32","shape":[3],"parameters":{"binary_data_size":12}}]}`
	want := wantJSON + "\x01\x00\x00\x00\x02\x00\x00\x00\xfd\xff\xff\xff"
	if resp.StatusCode != 200 || string(got) != want {
		t.Fatalf("status %d body %q\nwant %q", resp.StatusCode, got, want)
	}
	for k, v := range map[string]string{
		"Content-Type":                    "application/octet-stream",
		"Inference-Header-Content-Length": strconv.Itoa(len(wantJSON)),
		"Content-Length":                  strconv.Itoa(len(want)),
	} {
		if resp.Header.Get(k) != v {
			t.Errorf("%s = %q, want %q", k, resp.Header.Get(k), v)
		}
	}
	r := readInferResult(t, resp, got)
	if !bytes.Equal(r.binary["OUTPUT0"], in.raw) {
		t.Errorf("OUTPUT0 %x, want %x", r.binary["OUTPUT0"], in.raw)
	}

	// No outputs named: tritonclient asks for every output in binary
	// (binary_data_output). The version route answers the same.
	body, n = inferBody("", []inferInput{in}, nil, nil)
	if !bytes.HasSuffix(body[:n], []byte(`,"parameters":{"binary_data_output":true}}`)) {
		t.Fatalf("client body %q", body[:n])
	}
	resp, got = s.infer(t, "/v2/models/identity_int32/versions/1/infer", body, n)
	if want := strings.TrimPrefix(want, `{"id":"1",`); resp.StatusCode != 200 || string(got) != "{"+want {
		t.Fatalf("binary_data_output: %d %q", resp.StatusCode, got)
	}

	// BYTES both ways in binary, each element length-prefixed; and a JSON
	// output beside nothing binary is plain JSON.
	bs := append(append(le32s(2), "hi"...), append(le32s(0), append(le32s(1), 0xff)...)...)
	body, n = inferBody("b", []inferInput{{name: "INPUT0", shape: []int64{3}, datatype: "BYTES", raw: bs}}, []requestedOutput{{"OUTPUT0", true}}, nil)
	resp, got = s.infer(t, "/v2/models/identity_bytes/infer", body, n)
	if r := readInferResult(t, resp, got); resp.StatusCode != 200 || !bytes.Equal(r.binary["OUTPUT0"], bs) {
		t.Fatalf("BYTES: %d %q", resp.StatusCode, got)
	}
	body, n = inferBody("", []inferInput{in}, []requestedOutput{{"OUTPUT0", false}}, nil)
	resp, got = s.infer(t, "/v2/models/identity_int32/infer", body, n)
	wantJSON = `{"model_name":"identity_int32","model_version":"1","outputs":[{"name":"OUTPUT0","datatype":"INT32","shape":[3],"data":[1,2,-3]}]}`
	if resp.StatusCode != 200 || string(got) != wantJSON || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Inference-Header-Content-Length") != "" {
		t.Fatalf("JSON output: %d %v %q", resp.StatusCode, resp.Header, got)
	}
}

// Every datatype the engine serves, JSON in and JSON out, in Triton's
// JSON mapping; FP16 and BF16 only as binary data, as in Triton.
func TestInferEveryDatatypeJSON(t *testing.T) {
	s := newStack(t, nil, identityModels)
	for _, tc := range []struct {
		dt, data, want string
	}{
		{"BOOL", `[true,false]`, `[true,false]`},
		{"UINT8", `[0,255]`, `[0,255]`},
		{"UINT16", `[0,65535]`, `[0,65535]`},
		{"UINT32", `[0,4294967295]`, `[0,4294967295]`},
		{"UINT64", `[0,18446744073709551615]`, `[0,18446744073709551615]`},
		{"INT8", `[-128,127]`, `[-128,127]`},
		{"INT16", `[-32768,32767]`, `[-32768,32767]`},
		{"INT32", `[-2147483648,2147483647]`, `[-2147483648,2147483647]`},
		{"INT64", `[-9223372036854775808,9223372036854775807]`, `[-9223372036854775808,9223372036854775807]`},
		{"FP32", `[0.5,0.1]`, `[0.5,0.10000000149011612]`},
		{"FP64", `[1,0.1]`, `[1.0,0.1]`},
		{"BYTES", `["a","é\"\n"]`, `["a","é\"\n"]`},
	} {
		model := "identity_" + strings.ToLower(tc.dt)
		req := `{"id":"j","inputs":[{"name":"INPUT0","shape":[2],"datatype":"` + tc.dt + `","data":` + tc.data + `}],"outputs":[{"name":"OUTPUT0"}]}`
		resp, got := s.post(t, "/v2/models/"+model+"/infer", req)
		want := `{"id":"j","model_name":"` + model + `","model_version":"1","outputs":[{"name":"OUTPUT0","datatype":"` + tc.dt + `","shape":[2],"data":` + tc.want + `}]}`
		if resp.StatusCode != 200 || got != want {
			t.Errorf("%s: %d %s\nwant %s", tc.dt, resp.StatusCode, got, want)
		}
	}
	for _, dt := range []string{"FP16", "BF16"} {
		model := "identity_" + strings.ToLower(dt)
		resp, got := s.post(t, "/v2/models/"+model+"/infer", `{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"`+dt+`","data":[1]}]}`)
		if want := `{"error":"receiving ` + dt + ` data via JSON is not supported. Please use the binary data format for input INPUT0"}`; resp.StatusCode != 400 || got != want {
			t.Errorf("%s JSON in: %d %s", dt, resp.StatusCode, got)
		}
		half := []byte{0x00, 0x3c, 0x00, 0xc0} // FP16 1, -2 (BF16: tiny values, same bytes)
		body, n := inferBody("", []inferInput{{name: "INPUT0", shape: []int64{2}, datatype: dt, raw: half}}, []requestedOutput{{"OUTPUT0", false}}, nil)
		r, b := s.infer(t, "/v2/models/"+model+"/infer", body, n)
		if want := `{"error":"sending ` + dt + ` data via JSON is not supported. Please use the binary data format for output"}`; r.StatusCode != 400 || string(b) != want {
			t.Errorf("%s JSON out: %d %s", dt, r.StatusCode, b)
		}
		body, n = inferBody("", []inferInput{{name: "INPUT0", shape: []int64{2}, datatype: dt, raw: half}}, []requestedOutput{{"OUTPUT0", true}}, nil)
		r, b = s.infer(t, "/v2/models/"+model+"/infer", body, n)
		if res := readInferResult(t, r, b); r.StatusCode != 200 || !bytes.Equal(res.binary["OUTPUT0"], half) {
			t.Errorf("%s binary: %d %q", dt, r.StatusCode, b)
		}
	}
	// Every type in binary too, each element as numpy's tobytes gives it.
	for _, dt := range identityDatatypes {
		if dt == "BYTES" {
			continue
		}
		size := tensor.ElementSize(dt)
		raw := make([]byte, 3*size)
		for i := range raw {
			raw[i] = byte(i + 1)
		}
		if dt == "BOOL" {
			raw = []byte{1, 0, 1}
		}
		body, n := inferBody("", []inferInput{{name: "INPUT0", shape: []int64{3}, datatype: dt, raw: raw}}, nil, nil)
		r, b := s.infer(t, "/v2/models/identity_"+strings.ToLower(dt)+"/infer", body, n)
		if res := readInferResult(t, r, b); r.StatusCode != 200 || !bytes.Equal(res.binary["OUTPUT0"], raw) || fmt.Sprint(res.outputs["OUTPUT0"]["shape"]) != "[3]" {
			t.Errorf("%s binary: %d %q", dt, r.StatusCode, b)
		}
	}
}

// Raw binary requests (Inference-Header-Content-Length: 0), compressed
// bodies and request parameters.
func TestInferRawAndCompressed(t *testing.T) {
	s := newStack(t, nil, identityModels)
	resp, got := s.infer(t, "/v2/models/identity_int32/infer", le32s(7, 8), 0)
	want := `{"model_name":"identity_int32","model_version":"1","outputs":[{"name":"OUTPUT0","datatype":"INT32","shape":[2],"parameters":{"binary_data_size":8}}]}` + string(le32s(7, 8))
	if resp.StatusCode != 200 || string(got) != want {
		t.Fatalf("raw: %d %q", resp.StatusCode, got)
	}
	resp, got = s.infer(t, "/v2/models/identity_bytes/infer", []byte("427"), 0)
	if want := `{"error":"For BYTE datatype raw input 'INPUT0', the model must have input shape [1]"}`; resp.StatusCode != 400 || string(got) != want {
		t.Fatalf("raw BYTES: %d %s", resp.StatusCode, got)
	}

	body, n := inferBody("z", []inferInput{{name: "INPUT0", shape: []int64{2}, datatype: "INT32", data: []any{4, 5}}}, []requestedOutput{{"OUTPUT0", false}}, [][2]any{{"delay_ms", 1}})
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(body)
	zw.Close()
	resp, got = s.infer(t, "/v2/models/identity_int32/infer", gz.Bytes(), n, "Content-Encoding", "gzip")
	if want := `{"id":"z","model_name":"identity_int32","model_version":"1","outputs":[{"name":"OUTPUT0","datatype":"INT32","shape":[2],"data":[4,5]}]}`; resp.StatusCode != 200 || string(got) != want {
		t.Fatalf("gzip: %d %s", resp.StatusCode, got)
	}
	resp, got = s.infer(t, "/v2/models/identity_int32/infer", body, n, "Content-Encoding", "br")
	if resp.StatusCode != 501 || string(got) != `{"error":"Unsupported compression type"}` || resp.Header.Get("Accept-Encoding") != "gzip, deflate" {
		t.Fatalf("br: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	// The engine refuses a bad request parameter in its own words.
	body, n = inferBody("", []inferInput{{name: "INPUT0", shape: []int64{1}, datatype: "INT32", data: []any{1}}}, nil, [][2]any{{"delay_ms", -1}})
	resp, got = s.infer(t, "/v2/models/identity_int32/infer", body, n)
	if resp.StatusCode != 400 || string(got) != `{"error":"delay_ms must be between 0 and 60000, got -1"}` {
		t.Fatalf("delay_ms -1: %d %s", resp.StatusCode, got)
	}
}

// Triton's sequence parameters on /infer, as tritonclient.http sends
// them (sequence_id, sequence_start, sequence_end in parameters), against
// the accumulator: every request of the sequence reaches its state.
func TestInferSequence(t *testing.T) {
	s := newStack(t, nil)
	const url = "/v2/models/custom_sequence_int32/infer"
	step := func(id any, start, end bool, v int32) (*http.Response, []byte) {
		in := inferInput{name: "INPUT", shape: []int64{1, 1}, datatype: "INT32", raw: le32s(v)}
		var params [][2]any
		if id != nil {
			params = [][2]any{{"sequence_id", id}, {"sequence_start", start}, {"sequence_end", end}}
		}
		body, n := inferBody("", []inferInput{in}, []requestedOutput{{"OUTPUT", false}}, params)
		return s.infer(t, url, body, n)
	}
	for _, tc := range []struct {
		id         any
		start, end bool
		in         int32
		out        string
	}{
		{77, true, false, 4, "4"}, {77, false, false, 5, "9"}, {"mic-1", true, true, 2, "2"}, {77, false, true, 1, "10"},
	} {
		resp, got := step(tc.id, tc.start, tc.end, tc.in)
		if want := `"shape":[1,1],"data":[` + tc.out + `]}]}`; resp.StatusCode != 200 || !strings.HasSuffix(string(got), want) {
			t.Fatalf("sequence %v += %d: %d %s, want ...%s", tc.id, tc.in, resp.StatusCode, got, want)
		}
	}
	for _, tc := range []struct {
		id   any
		want string
	}{
		{77, "inference request for sequence 77 to model 'custom_sequence_int32' must specify the START flag on the first request of the sequence"},
		{nil, "inference request to model 'custom_sequence_int32' must specify a non-zero or non-empty correlation ID"},
		{-3, "Unable to parse 'sequence_id': attempt to access JSON non-string as string"},
	} {
		resp, got := step(tc.id, false, false, 1)
		if resp.StatusCode != 400 || string(got) != `{"error":`+mustJSON(tc.want)+`}` {
			t.Errorf("sequence %v: %d %s, want %s", tc.id, resp.StatusCode, got, tc.want)
		}
	}
}

// Wrong shapes, datatypes, sizes and models: Triton's statuses and texts.
func TestInferErrors(t *testing.T) {
	s := newStack(t, nil)
	in := func(fields string) string {
		return `{"inputs":[{"name":"INPUT0",` + fields + `}]}`
	}
	for _, tc := range []struct {
		path, body string
		status     int
		want       string
	}{
		{"/v2/models/nope/infer", `{}`, 404, "Request for unknown model: 'nope' is not found"},
		{"/v2/models/identity_int32/versions/9/infer", `{}`, 404, "Request for unknown model: 'identity_int32' version 9 is not found"},
		{"/v2/models/repeat_int32/infer", `{}`, 501, "HTTP end point doesn't support models with decoupled transaction policy"},
		{"/v2/models/square_int32/infer", `{"inputs":[{"name":"IN","shape":[1],"datatype":"INT32","data":[1]}]}`, 501, "HTTP end point doesn't support models with decoupled transaction policy"},
		{"/v2/models/identity_int32/infer", in(`"shape":[1],"datatype":"INT64","data":[1]`), 400, "inference input 'INPUT0' data-type is 'INT64', but model 'identity_int32' expects 'INT32'"},
		{"/v2/models/identity_int32/infer", in(`"shape":[1,2],"datatype":"INT32","data":[1,2]`), 400, "unexpected shape for input 'INPUT0' for model 'identity_int32'. Expected [-1], got [1,2]"},
		{"/v2/models/identity_int32/infer", in(`"shape":[3],"datatype":"INT32","data":[1,2]`), 400, "Unable to parse 'data': Shape does not match true shape of 'data' field"},
		{"/v2/models/identity_int32/infer", in(`"shape":[1],"datatype":"INT32","data":[1.5]`), 400, "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"},
		{"/v2/models/identity_int32/infer", in(`"shape":[1],"datatype":"INT32","data":[1],"parameters":{"binary_data_size":4}`), 400, "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But set 'data' 'binary_data_size'"},
		{"/v2/models/identity_int32/infer", in(`"shape":[1],"datatype":"INT32","parameters":{"binary_data_size":4}`), 400, "unexpected size for input 'INPUT0', expecting 4 additional bytes for model 'identity_int32'"},
		{"/v2/models/identity_int32/infer", `{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"INT32","data":[1]}],"outputs":[{"name":"NOPE"}]}`, 400, "unexpected inference output 'NOPE' for model 'identity_int32'"},
		{"/v2/models/identity_int32/infer", `{"inputs":[]}`, 400, "expected 1 inputs but got 0 inputs for model 'identity_int32'"},
		{"/v2/models/identity_int32/infer", `{"parameters":{"triton_x":1},"inputs":[]}`, 400, "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified."},
		{"/v2/models/identity_int32/infer", `{"inputs":[1,]}`, 400, "failed to parse the request JSON buffer: invalid character ']' looking for beginning of value at line 1, column 14 (offset 13)"},
	} {
		resp, got := s.post(t, tc.path, tc.body)
		if want := `{"error":` + mustJSON(tc.want) + `}`; resp.StatusCode != tc.status || got != want {
			t.Errorf("POST %s %s = %d %s, want %d %s", tc.path, tc.body, resp.StatusCode, got, tc.status, want)
		}
	}
	// Binary data that does not fit the shape is the server's to refuse.
	body, n := inferBody("", []inferInput{{name: "INPUT0", shape: []int64{2}, datatype: "INT32", raw: le32s(1)}}, nil, nil)
	resp, got := s.infer(t, "/v2/models/identity_int32/infer", body, n)
	if resp.StatusCode != 400 || !strings.Contains(string(got), "unexpected total byte size 4, expecting 8") {
		t.Errorf("short binary: %d %s", resp.StatusCode, got)
	}
	resp, got = s.infer(t, "/v2/models/identity_int32/infer", body, n+1000)
	if want := fmt.Sprintf(`{"error":"inference header size should be in range (0, %d), got: %d"}`, len(body), n+1000); resp.StatusCode != 400 || string(got) != want {
		t.Errorf("header length: %d %s", resp.StatusCode, got)
	}
	if resp, _ := s.get(t, "/v2/models/identity_int32/infer"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET infer = %d", resp.StatusCode)
	}
}

// The model config as Triton prints it.
func TestModelConfigRoute(t *testing.T) {
	s := newStack(t, nil)
	want := `{"name":"identity_int32","platform":"","backend":"identity","runtime":"","max_batch_size":0,` +
		`"input":[{"name":"INPUT0","data_type":"TYPE_INT32","format":"FORMAT_NONE","dims":[-1],"is_shape_tensor":false,"allow_ragged_batch":false,"optional":false,"is_non_linear_format_io":false}],` +
		`"output":[{"name":"OUTPUT0","data_type":"TYPE_INT32","dims":[-1],"label_filename":"","is_shape_tensor":false,"is_non_linear_format_io":false}],` +
		`"instance_group":[{"name":"","kind":"KIND_CPU","count":4,"gpus":[],"secondary_devices":[],"profile":[],"passive":false,"host_policy":""}],` +
		`"default_model_filename":"","parameters":{}}`
	for _, p := range []string{"/v2/models/identity_int32/config", "/v2/models/identity_int32/versions/1/config"} {
		if resp, got := s.get(t, p); resp.StatusCode != 200 || got != want {
			t.Errorf("GET %s = %d\n%s\nwant\n%s", p, resp.StatusCode, got, want)
		}
	}
	resp, got := s.get(t, "/v2/models/repeat_int32/config")
	if resp.StatusCode != 200 || !strings.Contains(got, `"model_transaction_policy":{"decoupled":true}`) || !strings.Contains(got, `"data_type":"TYPE_UINT32"`) {
		t.Errorf("repeat_int32 config: %d %s", resp.StatusCode, got)
	}
	if resp, got := s.get(t, "/v2/models/nope/config"); resp.StatusCode != 404 || got != `{"error":"Request for unknown model: 'nope' is not found"}` {
		t.Errorf("nope: %d %s", resp.StatusCode, got)
	}
}

type statDuration struct{ Count, Ns uint64 }

type modelStat struct {
	Name           string                  `json:"name"`
	Version        string                  `json:"version"`
	LastInference  uint64                  `json:"last_inference"`
	InferenceCount uint64                  `json:"inference_count"`
	ExecutionCount uint64                  `json:"execution_count"`
	InferenceStats map[string]statDuration `json:"inference_stats"`
	BatchStats     []struct {
		BatchSize    uint64       `json:"batch_size"`
		ComputeInfer statDuration `json:"compute_infer"`
	} `json:"batch_stats"`
}

// Statistics of the engine's ModelStatistics, as Triton's HTTP endpoint
// prints them: counts of what the test did, durations in ns.
func TestModelStatsRoute(t *testing.T) {
	s := newStack(t, nil)
	for i := range 3 {
		resp, got := s.post(t, "/v2/models/identity_int32/infer", `{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"INT32","data":[`+strconv.Itoa(i)+`]}]}`)
		if resp.StatusCode != 200 {
			t.Fatalf("infer: %d %s", resp.StatusCode, got)
		}
	}
	// One that fails in the backend: an execution, no inference.
	s.post(t, "/v2/models/identity_int32/infer", `{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"INT32","data":[1]}],"parameters":{"delay_ms":-1}}`)
	var st struct {
		ModelStats []modelStat `json:"model_stats"`
	}
	resp, got := s.get(t, "/v2/models/identity_int32/stats")
	if resp.StatusCode != 200 || json.Unmarshal([]byte(got), &st) != nil || len(st.ModelStats) != 1 {
		t.Fatalf("stats: %d %s", resp.StatusCode, got)
	}
	m := st.ModelStats[0]
	is := m.InferenceStats
	if m.Name != "identity_int32" || m.Version != "1" || m.InferenceCount != 3 || m.ExecutionCount != 4 || m.LastInference == 0 ||
		is["success"].Count != 3 || is["success"].Ns == 0 || is["fail"].Count != 1 || is["queue"].Count != 3 || is["compute_infer"].Count != 3 ||
		is["cache_hit"] != (statDuration{}) || len(m.BatchStats) != 1 || m.BatchStats[0].BatchSize != 1 || m.BatchStats[0].ComputeInfer.Count != 4 {
		t.Errorf("stats %s", got)
	}
	if resp, got := s.get(t, "/v2/models/identity_int32/versions/1/stats"); resp.StatusCode != 200 || !strings.HasPrefix(got, `{"model_stats":[{"name":"identity_int32","version":"1","last_inference":`) {
		t.Errorf("version stats: %d %s", resp.StatusCode, got)
	}
	resp, got = s.get(t, "/v2/models/stats")
	st.ModelStats = nil
	if resp.StatusCode != 200 || json.Unmarshal([]byte(got), &st) != nil {
		t.Fatalf("all stats: %d %s", resp.StatusCode, got)
	}
	var names []string
	for _, m := range st.ModelStats {
		names = append(names, m.Name)
	}
	if want := strings.Join(s.eng.Models(), " "); strings.Join(names, " ") != want {
		t.Errorf("all stats name %v, want %s", names, want)
	}
	for p, want := range map[string]string{
		"/v2/models/nope/stats":                      "requested model 'nope' is not available",
		"/v2/models/identity_int32/versions/7/stats": "requested model version is not available for model 'identity_int32'",
	} {
		if resp, got := s.get(t, p); resp.StatusCode != 400 || got != `{"error":"`+want+`"}` {
			t.Errorf("GET %s = %d %s", p, resp.StatusCode, got)
		}
	}
}

func TestRepositoryIndexRoute(t *testing.T) {
	s := newStack(t, nil)
	var want strings.Builder
	want.WriteByte('[')
	for i, name := range s.eng.Models() {
		if i > 0 {
			want.WriteByte(',')
		}
		fmt.Fprintf(&want, `{"name":%q,"version":"1","state":"READY"}`, name)
	}
	want.WriteByte(']')
	for _, body := range []string{"", `{}`, `{"ready":true}`, `{"ready":false}`} {
		if resp, got := s.post(t, "/v2/repository/index", body); resp.StatusCode != 200 || got != want.String() {
			t.Errorf("POST index %q = %d %s, want %s", body, resp.StatusCode, got, want.String())
		}
	}
	if !strings.Contains(want.String(), `{"name":"repeat_int32","version":"1","state":"READY"}`) {
		t.Errorf("index %s lacks repeat_int32", want.String())
	}
	if resp, got := s.post(t, "/v2/repository/index", `{"ready":"yes"}`); resp.StatusCode != 400 || got != `{"error":"attempt to access JSON non-boolean as boolean"}` {
		t.Errorf("bad ready: %d %s", resp.StatusCode, got)
	}
	if resp, _ := s.get(t, "/v2/repository/index"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET index = %d", resp.StatusCode)
	}
}
