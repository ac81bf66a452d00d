package core

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/streamgate/streamgate/gateway/textmodel"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// Tokens per minute on the Triton routes (/v2 generate, generate_stream,
// infer, and WebSocket generate frames), as on /v1: a request of a key
// with a tpm limit to a text model (one textmodel.Select knows) reserves
// its body's estimate plus its max_tokens, and settles from the model's
// own counts once it ends (countedTokens). Requests to other models
// generate no tokens.

// CountTokens makes j, a Triton request of body bytes to model, count its
// tokens when its key has a tpm limit and the model is a text model.
// inputs and params are the request's.
func (s *Server) CountTokens(ctx context.Context, model, version string, j *Job, body int, inputs []*tensor.Tensor, params map[string]*pb.InferParameter) {
	if kd := keyOf(ctx); kd == nil || kd.key.TPM == 0 {
		return
	}
	md, err := s.Metadata(ctx, model, version)
	if err != nil {
		return // the request fails on its own
	}
	ad, err := textmodel.Select(md)
	if err != nil {
		return
	}
	j.Prompt = body/4 + 1
	j.Tokens = j.Prompt + requestedTokens(inputs, params)
	j.Tr = &countedTokens{Translator: j.Tr, ad: ad, in: -1, out: -1}
}

// requestedTokens is the max_tokens a Triton request asks for: a
// max_tokens parameter or input (TensorRT-LLM), or sampling_parameters'
// max_tokens (vLLM); else defaultReserve.
func requestedTokens(inputs []*tensor.Tensor, params map[string]*pb.InferParameter) int {
	if p, ok := params["max_tokens"]; ok {
		switch v := p.GetParameterChoice().(type) {
		case *pb.InferParameter_Int64Param:
			return positive(v.Int64Param)
		case *pb.InferParameter_Uint64Param:
			return positive(int64(min(v.Uint64Param, 1<<31)))
		}
	}
	for _, t := range inputs {
		switch t.Name {
		case "max_tokens":
			size := tensor.ElementSize(t.Datatype)
			if size <= 0 || len(t.Raw) < size {
				continue
			}
			if b, ok := tensor.AppendInteger(nil, t.Datatype, t.Raw[:size]); ok {
				if n, err := strconv.ParseInt(string(b), 10, 64); err == nil {
					return positive(n)
				}
			}
		case "sampling_parameters":
			s, err := t.Strings()
			var sp struct {
				MaxTokens int64 `json:"max_tokens"`
			}
			if err == nil && len(s) > 0 && json.Unmarshal(s[0], &sp) == nil {
				return positive(sp.MaxTokens)
			}
		}
	}
	return defaultReserve
}

// positive is n as a token count, defaultReserve when it is none.
func positive(n int64) int {
	if n <= 0 {
		return defaultReserve
	}
	return int(min(n, 1<<31))
}

// countedTokens is a Triton translator that also reads a text model's
// responses for their token counts (UsageReporter), as textReader does.
type countedTokens struct {
	Translator
	ad             textmodel.Adapter
	in, out, texts int
	reason         string
}

func (c *countedTokens) Next(resp *pb.ModelInferResponse) ([][]byte, error) {
	if p, err := c.ad.Decode(resp); err == nil {
		if p.InputTokens >= 0 {
			c.in = p.InputTokens
		}
		if p.OutputTokens >= 0 {
			c.out = p.OutputTokens
		}
		if p.FinishReason != "" {
			c.reason = p.FinishReason
		}
		if len(p.Text) > 0 {
			c.texts++
		}
	}
	return c.Translator.Next(resp)
}

// Outcome is UsageReporter's: a model that does not count its output is
// taken as one token per response with text.
func (c *countedTokens) Outcome() (reason string, in, out int) {
	if c.out < 0 {
		return c.reason, c.in, c.texts
	}
	return c.reason, c.in, c.out
}
