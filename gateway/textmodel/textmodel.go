// Package textmodel drives text-generation models through the inference
// protocol. Select picks an Adapter from a model's metadata: the vLLM
// backend convention (text_input + sampling_parameters) or the TensorRT-LLM
// one (text_input + max_tokens, temperature, top_p, stop_words); the
// Adapter builds requests from a prompt and Params and reads Pieces back
// from responses. Joiner keeps multi-byte UTF-8 characters whole across
// responses.
package textmodel

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/streamgate/streamgate/gateway/generate"
	"github.com/streamgate/streamgate/gateway/internal/jsonstr"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// Params are the sampling settings of one request; nil fields are left to
// the model's defaults, except MaxTokens.
type Params struct {
	// MaxTokens limits the tokens generated. Nil means no limit but the
	// model's context, as OpenAI's and vLLM's chat completions have: the
	// vLLM convention is sent VLLMNoLimit (its own default, 16, would cut
	// an answer mid-word), the TensorRT-LLM one DefaultTRTMaxTokens.
	MaxTokens   *int
	Temperature *float64
	TopP        *float64
	Seed        *int64
	Stop        []string

	// The sampling extras of vLLM's sampling parameters; nil is off.
	// The vLLM convention passes them in sampling_parameters; the
	// TensorRT-LLM one as the inputs of the same names, and a model
	// without such an input cannot honour them (UnsupportedError).
	TopK              *int64
	MinP              *float64
	RepetitionPenalty *float64
	FrequencyPenalty  *float64
	PresencePenalty   *float64

	// DelayMs, streamgate's extension, asks the model to pause this many
	// milliseconds before each token (the request parameter delay_ms,
	// which the echo model honours), so that a stream can be watched;
	// nil is none.
	DelayMs *int64

	// Guided is vLLM's structured-output parameter guided_decoding, a
	// JSON object such as {"json": schema} or {"json_object": true}; nil
	// is none. The vLLM convention passes it in sampling_parameters (as
	// Triton's vLLM backend and our engine take it); the TensorRT-LLM
	// one cannot (UnsupportedError).
	Guided json.RawMessage
}

// extras are Params' sampling extras, by their vLLM (and TensorRT-LLM)
// names; nil values are unset.
func (p *Params) extras() []extra {
	var out []extra
	if p.TopK != nil {
		out = append(out, extra{"top_k", *p.TopK})
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"min_p", p.MinP}, {"repetition_penalty", p.RepetitionPenalty}, {"frequency_penalty", p.FrequencyPenalty}, {"presence_penalty", p.PresencePenalty}} {
		if f.v != nil {
			out = append(out, extra{f.name, *f.v})
		}
	}
	return out
}

type extra struct {
	name  string
	value any
}

// UnsupportedError is a sampling parameter the model has no way to
// honour: the client is told so (400) rather than have it ignored.
type UnsupportedError struct {
	Model, Param string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("The model '%s' does not support '%s': it has no input of that name.", e.Model, e.Param)
}

// Piece is the text-relevant content of one response.
type Piece struct {
	// Text is the response's text_output (a delta when streaming).
	Text []byte
	// FinishReason is "stop" or "length" when the model said, else "".
	FinishReason string
	// InputTokens and OutputTokens are the model's counts, -1 if absent.
	InputTokens, OutputTokens int
}

// Adapter maps prompts to requests and responses to pieces for one model.
// It is immutable and safe for concurrent use.
type Adapter interface {
	// Convention names the adapter: "vllm" or "tensorrt_llm".
	Convention() string
	// Request builds a streaming request for prompt.
	Request(model, version, prompt string, p Params) (*pb.ModelInferRequest, error)
	// Decode reads one response.
	Decode(resp *pb.ModelInferResponse) (Piece, error)
}

// ErrNotText is returned by Select for a model that follows neither
// convention.
var ErrNotText = errors.New("not a text model")

// Select returns the adapter for md: vLLM when the model has inputs
// text_input and sampling_parameters, TensorRT-LLM when it has text_input
// and max_tokens; both need output text_output.
func Select(md *pb.ModelMetadataResponse) (Adapter, error) {
	in := map[string]*pb.ModelMetadataResponse_TensorMetadata{}
	for _, t := range md.GetInputs() {
		in[t.GetName()] = t
	}
	hasOut := false
	for _, t := range md.GetOutputs() {
		hasOut = hasOut || t.GetName() == "text_output"
	}
	switch {
	case in["text_input"] == nil || !hasOut:
		return nil, fmt.Errorf("model '%s' is %w: it needs input text_input and output text_output", md.GetName(), ErrNotText)
	case in["sampling_parameters"] != nil:
		return &vllm{in: in}, nil
	case in["max_tokens"] != nil:
		return &trtllm{in: in}, nil
	}
	return nil, fmt.Errorf("model '%s' is %w: it has text_input but neither sampling_parameters (vLLM) nor max_tokens (TensorRT-LLM)", md.GetName(), ErrNotText)
}

type inputs map[string]*pb.ModelMetadataResponse_TensorMetadata

// add appends input name with values if the model has it.
func (in inputs) add(ts []*tensor.Tensor, name string, values ...any) ([]*tensor.Tensor, error) {
	md := in[name]
	if md == nil {
		return ts, nil
	}
	t, err := generate.NewTensor(md, values...)
	if err != nil {
		return nil, fmt.Errorf("input '%s': %w", name, err)
	}
	return append(ts, t), nil
}

// newRequest is the inference request for model with inputs ts and the
// request parameters of p.
func newRequest(model, version string, ts []*tensor.Tensor, p Params) *pb.ModelInferRequest {
	req := &pb.ModelInferRequest{ModelName: model, ModelVersion: version}
	tensor.ToRequest(req, ts)
	if p.DelayMs != nil {
		req.Parameters = map[string]*pb.InferParameter{
			"delay_ms": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: *p.DelayMs}},
		}
	}
	return req
}

// vllm is the vLLM backend convention.
type vllm struct{ in inputs }

func (a *vllm) Convention() string { return "vllm" }

// VLLMNoLimit is the max_tokens sent in sampling_parameters when a request
// sets no limit: vLLM and our engine end the answer when the context is
// full (finish_reason "length") or at the end of the text.
const VLLMNoLimit = math.MaxInt32

func (a *vllm) Request(model, version, prompt string, p Params) (*pb.ModelInferRequest, error) {
	spJSON, err := samplingJSON(p)
	if err != nil {
		return nil, err
	}
	ts, err := a.in.add(make([]*tensor.Tensor, 0, 4), "text_input", prompt)
	if err == nil {
		ts, err = a.in.add(ts, "stream", true)
	}
	if err == nil {
		ts, err = a.in.add(ts, "sampling_parameters", string(spJSON))
	}
	if err == nil {
		ts, err = a.in.add(ts, "exclude_input_in_output", true)
	}
	if err != nil {
		return nil, err
	}
	return newRequest(model, version, ts, p), nil
}

// samplingJSON is vLLM's sampling_parameters for p: the bytes
// encoding/json gives for samplingMap(p) (keys sorted, numbers as it
// writes them), appended directly. A value JSON cannot carry (NaN,
// infinity) is left to encoding/json, for its error.
func samplingJSON(p Params) ([]byte, error) {
	floats := []*float64{p.FrequencyPenalty, p.MinP, p.PresencePenalty, p.RepetitionPenalty, p.Temperature, p.TopP}
	for _, f := range floats {
		if f != nil && (math.IsNaN(*f) || math.IsInf(*f, 0)) {
			return json.Marshal(samplingMap(p))
		}
	}
	b := make([]byte, 0, 64)
	sep := byte('{')
	key := func(k string) {
		b = append(b, sep, '"')
		b = append(b, k...)
		b = append(b, '"', ':')
		sep = ','
	}
	float := func(k string, f *float64) {
		if f != nil {
			key(k)
			b = appendFloat(b, *f)
		}
	}
	float("frequency_penalty", p.FrequencyPenalty)
	if p.Guided != nil {
		key("guided_decoding")
		b = append(b, p.Guided...)
	}
	key("max_tokens")
	if p.MaxTokens != nil {
		b = strconv.AppendInt(b, int64(*p.MaxTokens), 10)
	} else {
		b = strconv.AppendInt(b, VLLMNoLimit, 10)
	}
	float("min_p", p.MinP)
	float("presence_penalty", p.PresencePenalty)
	float("repetition_penalty", p.RepetitionPenalty)
	if p.Seed != nil {
		key("seed")
		b = strconv.AppendInt(b, *p.Seed, 10)
	}
	if len(p.Stop) > 0 {
		key("stop")
		for i, s := range p.Stop {
			if i == 0 {
				b = append(b, '[')
			} else {
				b = append(b, ',')
			}
			b = jsonstr.Append(b, s)
		}
		b = append(b, ']')
	}
	float("temperature", p.Temperature)
	if p.TopK != nil {
		key("top_k")
		b = strconv.AppendInt(b, *p.TopK, 10)
	}
	float("top_p", p.TopP)
	return append(b, '}'), nil
}

// appendFloat appends f as encoding/json writes a float64.
func appendFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' { // e-09 is written e-9
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// samplingMap is sampling_parameters as a map, for encoding/json.
func samplingMap(p Params) map[string]any {
	sp := map[string]any{"max_tokens": VLLMNoLimit}
	if p.MaxTokens != nil {
		sp["max_tokens"] = *p.MaxTokens
	}
	if p.Temperature != nil {
		sp["temperature"] = *p.Temperature
	}
	if p.TopP != nil {
		sp["top_p"] = *p.TopP
	}
	if p.Seed != nil {
		sp["seed"] = *p.Seed
	}
	if len(p.Stop) > 0 {
		sp["stop"] = p.Stop
	}
	for _, e := range p.extras() {
		sp[e.name] = e.value
	}
	if p.Guided != nil {
		sp["guided_decoding"] = p.Guided
	}
	return sp
}

func (a *vllm) Decode(resp *pb.ModelInferResponse) (Piece, error) { return decode(resp) }

// trtllm is the TensorRT-LLM convention.
type trtllm struct{ in inputs }

func (a *trtllm) Convention() string { return "tensorrt_llm" }

// DefaultTRTMaxTokens is sent when a request sets no limit, since the
// TensorRT-LLM convention requires max_tokens.
const DefaultTRTMaxTokens = 256

func (a *trtllm) Request(model, version, prompt string, p Params) (*pb.ModelInferRequest, error) {
	maxTokens := DefaultTRTMaxTokens
	if p.MaxTokens != nil {
		maxTokens = *p.MaxTokens
	}
	ts, err := a.in.add(nil, "text_input", prompt)
	add := func(name string, values ...any) {
		if err == nil {
			ts, err = a.in.add(ts, name, values...)
		}
	}
	if p.Guided != nil {
		return nil, &UnsupportedError{Model: model, Param: "guided_decoding"}
	}
	add("max_tokens", maxTokens)
	add("stream", true)
	add("exclude_input_in_output", true)
	if p.Temperature != nil {
		add("temperature", *p.Temperature)
	}
	if p.TopP != nil {
		add("top_p", *p.TopP)
	}
	if p.Seed != nil && *p.Seed >= 0 {
		add("random_seed", *p.Seed)
	}
	if len(p.Stop) > 0 {
		stops := make([]any, len(p.Stop))
		for i, s := range p.Stop {
			stops[i] = s
		}
		add("stop_words", stops...)
	}
	for _, e := range p.extras() {
		if a.in[e.name] == nil {
			return nil, &UnsupportedError{Model: model, Param: e.name}
		}
		add(e.name, e.value)
	}
	if err != nil {
		return nil, err
	}
	return newRequest(model, version, ts, p), nil
}

func (a *trtllm) Decode(resp *pb.ModelInferResponse) (Piece, error) { return decode(resp) }

// decode reads the outputs both conventions share. Outputs in
// raw_output_contents are read in place: p.Text may alias resp's buffers.
func decode(resp *pb.ModelInferResponse) (Piece, error) {
	p := Piece{InputTokens: -1, OutputTokens: -1}
	err := tensor.EachOutput(resp, func(t tensor.Tensor) error { return p.read(&t) })
	return p, err
}

// read takes what p needs from t, a checked output.
func (p *Piece) read(t *tensor.Tensor) error {
	switch t.Name {
	case "text_output":
		if t.Datatype != "BYTES" {
			return notBytes(t)
		}
		for e := range elements(t.Raw) {
			if p.Text == nil {
				p.Text = e // alias the first element; appending copies
			} else {
				p.Text = append(p.Text, e...)
			}
		}
	case "finish_reason":
		if t.Datatype != "BYTES" {
			return notBytes(t)
		}
		for e := range elements(t.Raw) {
			p.FinishReason = normalizeReason(string(e))
			break
		}
	case "num_input_tokens":
		p.InputTokens = count(t)
	case "num_output_tokens":
		p.OutputTokens = count(t)
	}
	return nil
}

func notBytes(t *tensor.Tensor) error {
	return fmt.Errorf("tensor '%s' has datatype %s, not BYTES", t.Name, t.Datatype)
}

// elements yields the elements of well-formed raw BYTES data, each capped
// so that appending to it copies.
func elements(raw []byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for len(raw) >= 4 {
			l := int(binary.LittleEndian.Uint32(raw))
			e := raw[4 : 4+l : 4+l]
			raw = raw[4+l:]
			if !yield(e) {
				return
			}
		}
	}
}

func normalizeReason(r string) string {
	switch strings.ToLower(r) {
	case "length", "max_tokens":
		return "length"
	case "":
		return ""
	}
	return "stop"
}

// count reads the first element of a UINT32 or INT32 output; -1 for any
// other output.
func count(t *tensor.Tensor) int {
	if len(t.Raw) < 4 {
		return -1
	}
	switch v := binary.LittleEndian.Uint32(t.Raw); t.Datatype {
	case "UINT32":
		return int(v)
	case "INT32":
		return int(int32(v))
	}
	return -1
}

// Joiner passes text through, holding back an incomplete trailing UTF-8
// sequence until the bytes that complete it arrive. The zero value is
// ready; it is not safe for concurrent use.
type Joiner struct{ carry []byte }

// Next returns the complete text of carry+b.
func (j *Joiner) Next(b []byte) string { return string(j.Append(nil, b)) }

// Append appends the complete text of carry+b to dst, keeping the
// incomplete tail for the next call.
func (j *Joiner) Append(dst, b []byte) []byte {
	start := len(dst)
	dst = append(append(dst, j.carry...), b...)
	cut := len(dst)
	// Look back at most utf8.UTFMax-1 bytes for a started sequence.
	for i := len(dst) - 1; i >= start && i >= len(dst)-utf8.UTFMax+1; i-- {
		c := dst[i]
		if c < utf8.RuneSelf {
			break
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(dst[i:]) {
				cut = i
			}
			break
		}
	}
	j.carry = append(j.carry[:0], dst[cut:]...)
	return dst[:cut]
}

// Whole reports whether Append(dst, b) would append b unchanged: nothing
// is held back, and b does not end inside a character (the common case,
// which then needs no copy).
func (j *Joiner) Whole(b []byte) bool {
	if len(j.carry) > 0 {
		return false
	}
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		c := b[i]
		if c < utf8.RuneSelf {
			return true
		}
		if utf8.RuneStart(c) {
			return utf8.FullRune(b[i:])
		}
	}
	return true
}

// Flush returns whatever is held back (possibly invalid UTF-8).
func (j *Joiner) Flush() string {
	s := string(j.carry)
	j.carry = nil
	return s
}
