// Package transcribe implements the `transcribe` model: a decoupled
// sequence model that stands in for streaming speech recognition, so the
// whole client-side streaming path (many chunks in, partial results out)
// runs with nothing else installed.
//
// A client streams a sequence of chunks (sequence_id, sequence_start on
// the first, sequence_end on the last); each chunk's text_input (text, or
// any bytes) is appended to the sequence's transcript, which the model
// keeps in Triton's implicit state (sequence_batching.state, reset on
// START), so any instance can serve any chunk. The "hypothesis" is the
// transcript up to its last whitespace byte: words still being spoken are
// not shown. Each chunk's one response carries what the hypothesis gained
// (a delta, in the vLLM text convention: text_output), or nothing when it
// gained nothing; the END chunk's response carries the rest of the
// transcript and finish_reason "stop". Cutting only at whitespace never
// splits a multi-byte UTF-8 character between responses.
//
// Inputs: text_input BYTES [1] (the chunk); optional stream BOOL [1]
// (default true; false sends nothing until END, then the whole
// transcript). The names are the vLLM text convention's, but without
// sampling_parameters: the OpenAI routes, which cannot run a sequence,
// do not list it. Control END (any data type; START may be there too, the engine resets
// the state on it) and the
// state named in the config (BYTES [1], zero data: the empty transcript).
// Outputs: text_output BYTES [1]; finish_reason BYTES [1] on END.
//
// Config parameter delay_ms (string) makes each chunk take that long, as
// a real recogniser would; cancelling the request ends the wait.
package transcribe

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/streamgate/streamgate/engine/backend"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// MaxTranscript bounds a sequence's transcript in bytes.
const MaxTranscript = 1 << 20

type model struct {
	end               *backend.Control
	stateIn, stateOut string
	delay             time.Duration
}

var _ backend.Factory = New

// New checks the config: a sequence model with an END control and one
// BYTES state.
func New(cfg backend.Config) (backend.Backend, error) {
	c := cfg.Model
	sb := c.GetSequenceBatching()
	if sb == nil {
		return nil, fmt.Errorf("sequence_batching: model '%s' needs sequence_batching", c.GetName())
	}
	if !c.GetModelTransactionPolicy().GetDecoupled() {
		return nil, fmt.Errorf("model_transaction_policy: model '%s' must be decoupled", c.GetName())
	}
	if len(sb.GetState()) != 1 || sb.GetState()[0].GetDataType() != pb.DataType_TYPE_STRING {
		return nil, fmt.Errorf("sequence_batching.state: model '%s' needs one TYPE_STRING state for its transcript", c.GetName())
	}
	m := &model{
		end:      backend.SequenceControl(c, pb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_END),
		stateIn:  sb.GetState()[0].GetInputName(),
		stateOut: sb.GetState()[0].GetOutputName(),
	}
	if m.end == nil {
		return nil, fmt.Errorf("sequence_batching.control_input: model '%s' needs a CONTROL_SEQUENCE_END input", c.GetName())
	}
	delay, err := backend.MillisParam(c, "delay_ms")
	if err != nil {
		return nil, err
	}
	m.delay = delay
	return m, nil
}

func (m *model) Execute(ctx context.Context, req *backend.Request, _ backend.Responder) (*backend.Response, error) {
	chunk, err := one(req, "text_input")
	if err != nil {
		return nil, err
	}
	stream := true
	if t := req.Inputs["stream"]; t != nil {
		b, err := t.Bools()
		if err != nil || len(b) != 1 {
			return nil, backend.Errorf(codes.InvalidArgument, "expected one BOOL element for input 'stream'")
		}
		stream = b[0]
	}
	before, err := one(req, m.stateIn)
	if err != nil {
		return nil, backend.Errorf(codes.Internal, "transcript state: %v", err)
	}
	if len(before)+len(chunk) > MaxTranscript {
		return nil, backend.Errorf(codes.InvalidArgument, "the transcript would exceed %d bytes", MaxTranscript)
	}
	if !backend.Sleep(ctx, m.delay) {
		return nil, backend.ErrCancelled
	}
	after := append(append(make([]byte, 0, len(before)+len(chunk)), before...), chunk...)
	shown := stable(before)
	state := tensor.NewBytes(m.stateOut, req.Inputs[m.stateIn].Shape, [][]byte{after})
	resp := &backend.Response{Outputs: []*tensor.Tensor{state}}
	switch {
	case m.end.Of(req):
		text := after[len(shown):]
		if !stream {
			text = after
		}
		resp.Outputs = append(resp.Outputs, tensor.NewBytes("text_output", []int64{1}, [][]byte{text}), tensor.NewString("finish_reason", "stop"))
	case stream:
		if gained := stable(after)[len(shown):]; len(gained) > 0 {
			resp.Outputs = append(resp.Outputs, tensor.NewBytes("text_output", []int64{1}, [][]byte{gained}))
		}
	}
	// A response left with the state alone is no response: the engine
	// keeps the state and sends the client nothing for this chunk.
	return resp, nil
}

// stable is the hypothesis of a transcript: up to its last whitespace.
func stable(t []byte) []byte {
	return t[:bytes.LastIndexAny(t, " \t\n\r")+1]
}

// one reads the single BYTES element of input name.
func one(req *backend.Request, name string) ([]byte, error) {
	t := req.Inputs[name]
	if t == nil {
		return nil, backend.Errorf(codes.InvalidArgument, "expected input '%s'", name)
	}
	s, err := t.Strings()
	if err != nil {
		return nil, backend.WithCode(codes.InvalidArgument, err)
	}
	if len(s) != 1 {
		return nil, backend.Errorf(codes.InvalidArgument, "expected one %s element, got %d", name, len(s))
	}
	return s[0], nil
}
