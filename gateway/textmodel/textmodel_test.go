package textmodel

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

func meta(name string, ins []string, outs ...string) *pb.ModelMetadataResponse {
	md := &pb.ModelMetadataResponse{Name: name}
	types := map[string]string{"stream": "BOOL", "exclude_input_in_output": "BOOL", "max_tokens": "INT32",
		"temperature": "FP32", "top_p": "FP32", "random_seed": "UINT64",
		"top_k": "INT32", "repetition_penalty": "FP32"}
	for _, n := range ins {
		dt := types[n]
		if dt == "" {
			dt = "BYTES"
		}
		shape := []int64{1}
		if n == "stop_words" {
			shape = []int64{-1}
		}
		md.Inputs = append(md.Inputs, &pb.ModelMetadataResponse_TensorMetadata{Name: n, Datatype: dt, Shape: shape})
	}
	for _, n := range outs {
		md.Outputs = append(md.Outputs, &pb.ModelMetadataResponse_TensorMetadata{Name: n, Datatype: "BYTES", Shape: []int64{-1}})
	}
	return md
}

func inputsOf(t *testing.T, req *pb.ModelInferRequest) map[string]*tensor.Tensor {
	t.Helper()
	ts, err := tensor.FromRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]*tensor.Tensor{}
	for _, x := range ts {
		m[x.Name] = x
	}
	return m
}

func TestVLLM(t *testing.T) {
	a, err := Select(meta("echo", []string{"text_input", "stream", "sampling_parameters", "exclude_input_in_output"}, "text_output", "finish_reason"))
	if err != nil || a.Convention() != "vllm" {
		t.Fatalf("Select = %v, %v", a, err)
	}
	mt, temp, seed := 5, 0.5, int64(42)
	req, err := a.Request("echo", "", "hi there", Params{MaxTokens: &mt, Temperature: &temp, Seed: &seed, Stop: []string{"x", "y"}})
	if err != nil {
		t.Fatal(err)
	}
	in := inputsOf(t, req)
	if s, _ := in["text_input"].Strings(); string(s[0]) != "hi there" {
		t.Fatalf("text_input %q", s)
	}
	if b, _ := in["stream"].Bools(); !b[0] {
		t.Fatal("stream not true")
	}
	s, _ := in["sampling_parameters"].Strings()
	var sp map[string]any
	if err := json.Unmarshal(s[0], &sp); err != nil {
		t.Fatal(err)
	}
	if sp["max_tokens"] != 5.0 || sp["temperature"] != 0.5 || sp["seed"] != 42.0 || len(sp["stop"].([]any)) != 2 || sp["top_p"] != nil {
		t.Fatalf("sampling_parameters %s", s[0])
	}

	// No limit asked: vLLM's own default (16) must not apply.
	req, err = a.Request("echo", "", "hi", Params{})
	if err != nil {
		t.Fatal(err)
	}
	s, _ = inputsOf(t, req)["sampling_parameters"].Strings()
	if string(s[0]) != `{"max_tokens":2147483647}` {
		t.Fatalf("sampling_parameters without a limit: %s", s[0])
	}
}

func TestTRTLLM(t *testing.T) {
	a, err := Select(meta("ensemble", []string{"text_input", "max_tokens", "stream", "temperature", "stop_words", "random_seed"}, "text_output"))
	if err != nil || a.Convention() != "tensorrt_llm" {
		t.Fatalf("Select = %v, %v", a, err)
	}
	topP := 0.9
	req, err := a.Request("ensemble", "1", "p", Params{TopP: &topP, Stop: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	in := inputsOf(t, req)
	if v, _ := in["max_tokens"].Int32s(); v[0] != DefaultTRTMaxTokens {
		t.Fatalf("max_tokens %v", v)
	}
	if _, ok := in["top_p"]; ok {
		t.Fatal("top_p sent to a model without that input")
	}
	if s, _ := in["stop_words"].Strings(); len(s) != 2 {
		t.Fatalf("stop_words %q", s)
	}
}

// The sampling extras go in sampling_parameters (vLLM), as inputs of
// their names (TensorRT-LLM), or are refused naming the parameter when the
// model has no such input; unset, nothing is sent.
func TestSamplingExtras(t *testing.T) {
	k, minP, rep, freq, pres := int64(40), 0.05, 1.3, 0.5, -0.5
	p := Params{TopK: &k, MinP: &minP, RepetitionPenalty: &rep, FrequencyPenalty: &freq, PresencePenalty: &pres}
	v, _ := Select(meta("echo", []string{"text_input", "sampling_parameters"}, "text_output"))
	req, err := v.Request("echo", "", "hi", p)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := inputsOf(t, req)["sampling_parameters"].Strings()
	want := `{"frequency_penalty":0.5,"max_tokens":2147483647,"min_p":0.05,"presence_penalty":-0.5,"repetition_penalty":1.3,"top_k":40}`
	if string(s[0]) != want {
		t.Fatalf("sampling_parameters %s, want %s", s[0], want)
	}

	trt, _ := Select(meta("ensemble", []string{"text_input", "max_tokens", "top_k", "repetition_penalty"}, "text_output"))
	req, err = trt.Request("ensemble", "", "hi", Params{TopK: &k, RepetitionPenalty: &rep})
	if err != nil {
		t.Fatal(err)
	}
	in := inputsOf(t, req)
	if in["top_k"] == nil || in["repetition_penalty"] == nil {
		t.Fatalf("extras not sent as inputs: %v", in)
	}
	_, err = trt.Request("ensemble", "", "hi", Params{MinP: &minP})
	var ue *UnsupportedError
	if !errors.As(err, &ue) || ue.Param != "min_p" || !strings.Contains(err.Error(), "'min_p'") {
		t.Fatalf("min_p on a model without it: %v", err)
	}
	if _, err := trt.Request("ensemble", "", "hi", Params{}); err != nil {
		t.Fatalf("no extras: %v", err)
	}
}

func TestSelectNotText(t *testing.T) {
	_, err := Select(meta("repeat_int32", []string{"IN"}, "OUT"))
	if !errors.Is(err, ErrNotText) || !strings.Contains(err.Error(), "repeat_int32") {
		t.Fatalf("err = %v", err)
	}
	if _, err := Select(meta("x", []string{"text_input"}, "text_output")); !errors.Is(err, ErrNotText) {
		t.Fatalf("err = %v", err)
	}
}

func TestDecode(t *testing.T) {
	resp := &pb.ModelInferResponse{}
	tensor.ToResponse(resp, []*tensor.Tensor{
		tensor.NewString("text_output", " world"),
		tensor.NewString("finish_reason", "length"),
		tensor.NewUint32("num_input_tokens", []int64{1}, []uint32{3}),
		tensor.NewUint32("num_output_tokens", []int64{1}, []uint32{2}),
	})
	p, err := decode(resp)
	if err != nil || string(p.Text) != " world" || p.FinishReason != "length" || p.InputTokens != 3 || p.OutputTokens != 2 {
		t.Fatalf("decode = %+v, %v", p, err)
	}
	p, err = decode(&pb.ModelInferResponse{})
	if err != nil || p.InputTokens != -1 || p.FinishReason != "" {
		t.Fatalf("empty decode = %+v, %v", p, err)
	}
}

var joinCases = [][]string{
	{"abc"},
	{"h\xc3", "\xa9llo"},
	{"\xe2\x82", "\xac"},
	{"\xe2", "\x82", "\xac!"},
	{"\xf0\x9f\x98", "\x80"},
	{"x\xff", "y"},
}

func TestJoiner(t *testing.T) {
	for _, parts := range joinCases {
		var j Joiner
		var out []string
		for _, p := range parts {
			whole := j.Whole([]byte(p))
			got := j.Next([]byte(p))
			if exact := got == p && len(j.carry) == 0; whole != exact {
				t.Fatalf("%q: Whole(%q) %v, but Next gave %q holding %q", parts, p, whole, got, j.carry)
			}
			out = append(out, got)
		}
		out = append(out, j.Flush())
		if strings.Join(out, "") != strings.Join(parts, "") {
			t.Fatalf("%q joined to %q", parts, out)
		}
		for _, o := range out[:len(out)-1] {
			if utf8.ValidString(strings.Join(parts, "")) && !utf8.ValidString(o) {
				t.Fatalf("%q: piece %q splits a character", parts, o)
			}
		}
	}
}

func FuzzJoiner(f *testing.F) {
	for _, c := range joinCases {
		f.Add(strings.Join(c, ""), uint8(len(c[0])))
	}
	f.Fuzz(func(t *testing.T, s string, cut uint8) {
		i := int(cut) % (len(s) + 1)
		var j Joiner
		a, b := j.Next([]byte(s[:i])), j.Next([]byte(s[i:]))
		c := j.Flush()
		if a+b+c != s {
			t.Fatalf("lost bytes: %q+%q+%q != %q", a, b, c, s)
		}
		if utf8.ValidString(s) && (!utf8.ValidString(a) || !utf8.ValidString(b) || c != "") {
			t.Fatalf("split a character: %q | %q | %q", a, b, c)
		}
	})
}

// samplingJSON writes what encoding/json writes for the same map.
func TestSamplingJSONMatchesMarshal(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	n := func(v int) *int { return &v }
	floats := []float64{0, -0.0, 0.1, 1, 2, -2, 1e-7, 1.5e-7, 1e-6, 123456789, 1e20, 1e21, 1.2345e25, 0.30000000000000004, 5e-324}
	cases := []Params{
		{},
		{MaxTokens: n(100)},
		{MaxTokens: n(1), Seed: i(-3), Stop: []string{"a", "<\"\\\u2028\n>"}, TopK: i(40)},
		{Stop: []string{"\xff"}},
	}
	for _, v := range floats {
		cases = append(cases, Params{Temperature: f(v), TopP: f(-v), MinP: f(v), RepetitionPenalty: f(v),
			FrequencyPenalty: f(v), PresencePenalty: f(-v), Seed: i(int64(v))})
	}
	for _, p := range cases {
		got, err := samplingJSON(p)
		want, werr := json.Marshal(samplingMap(p))
		if err != nil || werr != nil || string(got) != string(want) {
			t.Errorf("%+v:\n got %s (%v)\nwant %s (%v)", p, got, err, want, werr)
		}
	}
	nan := math.NaN()
	if _, err := samplingJSON(Params{Temperature: &nan}); err == nil {
		t.Error("NaN temperature encoded")
	}
}

func TestDelayMsParameter(t *testing.T) {
	d := int64(40)
	for _, ad := range []Adapter{&vllm{}, &trtllm{}} {
		req, err := ad.Request("m", "", "hi", Params{DelayMs: &d})
		if err != nil {
			t.Fatal(err)
		}
		if got := req.GetParameters()["delay_ms"].GetInt64Param(); got != 40 {
			t.Errorf("%s: delay_ms %d, want 40", ad.Convention(), got)
		}
	}
}
