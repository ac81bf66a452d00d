package bench

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// Model families the bench knows how to drive.
const (
	modelRepeat  = "repeat_int32"
	modelEcho    = "echo"
	modelStories = "stories260k"
	// modelTranscribe is client-side streaming (sequence.go): a request
	// is a sequence of Responses chunks, Delay apart.
	modelTranscribe = "transcribe"
	// modelGGUF is a GGUF file given as --model FILE.gguf: a text model
	// like stories260k, named as serve names it (the file's base name).
	modelGGUF = "gguf"
)

// workload is the request mix of one run: a model, how many responses each
// request asks for and how far apart the model sends them.
type workload struct {
	// Model is the model name sent to the server.
	Model string
	// Kind is the model family: modelRepeat, modelEcho, modelStories or
	// modelGGUF.
	Kind string
	// Responses per request: repeat's IN length, echo's word count, a
	// language model's max_tokens.
	Responses int
	// Delay between responses: repeat's DELAY, echo's delay_ms request
	// parameter (absent when PacedByConfig), stories260k: unused (its
	// pace is its compute).
	Delay time.Duration
	// PacedByConfig: the model's own config sets the delay (the embedded
	// bench_echo model, which the OpenAI routes can pace), so requests
	// carry no delay parameter.
	PacedByConfig bool
	// Prompt is a language model's prompt.
	Prompt string
	// APIKey, if set, is sent with every gateway request (Authorization:
	// Bearer) and WebSocket handshake.
	APIKey string
}

// textModel reports whether the model follows the vLLM text convention.
func (w workload) textModel() bool { return w.Kind != modelRepeat }

// languageModel reports whether the model generates tokens from a prompt
// (stories260k or a GGUF file), its pace its compute.
func (w workload) languageModel() bool { return w.Kind == modelStories || w.Kind == modelGGUF }

func (w workload) String() string {
	if w.Kind == modelTranscribe {
		return fmt.Sprintf("%s %d chunks @%v", w.Model, w.Responses, w.Delay)
	}
	s := fmt.Sprintf("%s ×%d", w.Model, w.Responses)
	if !w.languageModel() {
		s += fmt.Sprintf(" @%v", w.Delay)
	}
	return s
}

// words returns n space-separated words: echo's input, one word per
// response.
func words(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("w")
		b.WriteString(strconv.Itoa(i))
	}
	return b.String()
}

func (w workload) samplingParameters() string {
	// Greedy, and generation runs to max_tokens so every request has
	// the same length.
	return fmt.Sprintf(`{"max_tokens":%d,"temperature":0,"ignore_eos":true}`, w.Responses)
}

// grpcRequest builds the ModelInferRequest of request serial for the direct
// transport. repeat_int32 requests carry serial in every IN element so the
// engine side can recognise them (cancel tracking).
func (w workload) grpcRequest(serial int32) *pb.ModelInferRequest {
	req := &pb.ModelInferRequest{
		ModelName: w.Model,
		Id:        grpcID(serial),
		Parameters: map[string]*pb.InferParameter{
			"triton_enable_empty_final_response": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}},
		},
	}
	var ins []*tensor.Tensor
	switch w.Kind {
	case modelRepeat:
		in, delay := w.repeatInputs(serial)
		n := []int64{int64(w.Responses)}
		ins = []*tensor.Tensor{
			tensor.NewInt32("IN", n, in),
			tensor.NewUint32("DELAY", n, delay),
			tensor.NewUint32("WAIT", []int64{1}, []uint32{0}),
		}
	case modelEcho:
		ins = []*tensor.Tensor{
			tensor.NewString("text_input", words(w.Responses)),
			tensor.NewBool("stream", []int64{1}, []bool{true}),
		}
		if !w.PacedByConfig {
			req.Parameters["delay_ms"] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: int64(w.Delay / time.Millisecond)}}
		}
	case modelStories, modelGGUF:
		ins = []*tensor.Tensor{
			tensor.NewString("text_input", w.Prompt),
			tensor.NewBool("stream", []int64{1}, []bool{true}),
			tensor.NewString("sampling_parameters", w.samplingParameters()),
		}
	}
	for _, t := range ins {
		req.Inputs = append(req.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape})
		req.RawInputContents = append(req.RawInputContents, t.Raw)
	}
	return req
}

// repeatInputs are repeat_int32's IN and DELAY for request serial:
// Responses values, each serial, Delay apart.
func (w workload) repeatInputs(serial int32) (in []int32, delay []uint32) {
	in = make([]int32, w.Responses)
	delay = make([]uint32, w.Responses)
	for i := range in {
		in[i] = serial
		delay[i] = uint32(w.Delay / time.Millisecond)
	}
	return in, delay
}

// generateBody is the Triton generate JSON of request serial, the body of
// generate_stream and of a WebSocket generate frame.
func (w workload) generateBody(serial int32) []byte {
	m := map[string]any{}
	switch w.Kind {
	case modelRepeat:
		in, delay := w.repeatInputs(serial)
		m["IN"], m["DELAY"], m["WAIT"] = in, delay, 0
	case modelEcho:
		m["text_input"], m["stream"] = words(w.Responses), true
		if !w.PacedByConfig {
			m["delay_ms"] = w.Delay.Milliseconds()
		}
	case modelStories, modelGGUF:
		m["text_input"], m["stream"], m["sampling_parameters"] = w.Prompt, true, w.samplingParameters()
	}
	b, _ := json.Marshal(m)
	return b
}

// chatBody is the OpenAI streaming chat request. For echo the default chat
// template wraps the content as "user: <content>\nassistant:", two more
// words, so the content has two words fewer than Responses and the model
// streams Responses words, as in the direct request.
func (w workload) chatBody() []byte {
	content := w.Prompt
	if w.Kind == modelEcho {
		content = words(max(w.Responses-2, 1))
	}
	m := map[string]any{
		"model":      w.Model,
		"stream":     true,
		"max_tokens": w.Responses,
		"messages":   []map[string]string{{"role": "user", "content": content}},
	}
	if w.languageModel() {
		// Greedy, as the direct request.
		m["temperature"] = 0
	}
	b, _ := json.Marshal(m)
	return b
}
