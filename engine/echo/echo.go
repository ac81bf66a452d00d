// Package echo implements the `echo` text model: a decoupled model in the
// vLLM-backend convention (text_input in, text_output out) that streams
// the words of text_input back, one response per word, so text routes can
// be tested without weights.
//
// Inputs: text_input BYTES [1]; optional stream BOOL [1] (default false),
// sampling_parameters BYTES [1] (JSON; max_tokens limits the words),
// exclude_input_in_output BOOL [1] (accepted, no effect: the output is the
// input). Request parameter delay_ms (int64) sleeps before each word; config
// parameter delay_ms sets the default.
// Outputs: text_output; the final response also carries finish_reason,
// num_input_tokens and num_output_tokens (a "token" is a word here).
package echo

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/streamgate/streamgate/engine/backend"
	"github.com/streamgate/streamgate/proto/tensor"
)

type model struct {
	delay time.Duration
}

// New builds the echo backend.
func New(cfg backend.Config) (backend.Backend, error) {
	delay, err := backend.MillisParam(cfg.Model, "delay_ms")
	if err != nil {
		return nil, err
	}
	m := model{delay: delay}
	return m, nil
}

// samplingParameters is the part of vLLM's sampling_parameters echo reads.
type samplingParameters struct {
	MaxTokens *int `json:"max_tokens"`
}

func (m model) Execute(ctx context.Context, req *backend.Request, r backend.Responder) (*backend.Response, error) {
	r.Release()
	text, err := req.Inputs["text_input"].Strings()
	if err != nil {
		return nil, backend.WithCode(codes.InvalidArgument, err)
	}
	if len(text) != 1 {
		return nil, backend.Errorf(codes.InvalidArgument, "expected one text_input element, got %d", len(text))
	}
	stream := false
	if t := req.Inputs["stream"]; t != nil {
		b, err := t.Bools()
		if err != nil || len(b) != 1 {
			return nil, backend.Errorf(codes.InvalidArgument, "expected one BOOL element for input 'stream'")
		}
		stream = b[0]
	}
	limit := -1
	if t := req.Inputs["sampling_parameters"]; t != nil {
		s, err := t.Strings()
		if err != nil || len(s) != 1 {
			return nil, backend.Errorf(codes.InvalidArgument, "expected one BYTES element for input 'sampling_parameters'")
		}
		var sp samplingParameters
		if err := json.Unmarshal(s[0], &sp); err != nil {
			return nil, backend.Errorf(codes.InvalidArgument, "invalid sampling_parameters: %v", err)
		}
		if sp.MaxTokens != nil {
			if *sp.MaxTokens < 0 {
				return nil, backend.Errorf(codes.InvalidArgument, "invalid sampling_parameters: max_tokens must be non-negative, got %d", *sp.MaxTokens)
			}
			limit = *sp.MaxTokens
		}
	}
	delay := m.delay
	if p, ok := req.Parameters["delay_ms"]; ok {
		delay = time.Duration(p.GetInt64Param()) * time.Millisecond
	}

	words := strings.Fields(string(text[0]))
	finish := "stop"
	if limit >= 0 && len(words) > limit {
		words, finish = words[:limit], "length"
	}
	var all strings.Builder
	sent := 0
	for i, w := range words {
		if !backend.Sleep(ctx, delay) {
			break
		}
		if i > 0 {
			w = " " + w
		}
		sent++
		if !stream {
			all.WriteString(w)
			continue
		}
		if err := r.Send(ctx, &backend.Response{Outputs: []*tensor.Tensor{tensor.NewString("text_output", w)}}); err != nil {
			break
		}
	}
	if ctx.Err() != nil {
		finish = "cancelled"
	}
	return &backend.Response{Outputs: []*tensor.Tensor{
		tensor.NewString("text_output", all.String()),
		tensor.NewString("finish_reason", finish),
		tensor.NewUint32("num_input_tokens", []int64{1}, []uint32{uint32(len(strings.Fields(string(text[0]))))}),
		tensor.NewUint32("num_output_tokens", []int64{1}, []uint32{uint32(sent)}),
	}}, nil
}
