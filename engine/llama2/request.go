package llama2

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/streamgate/streamgate/engine/backend"
	"github.com/streamgate/streamgate/engine/llama2/sampler"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// Tensor names of the vLLM-backend convention this backend serves.
const (
	inputText    = "text_input"
	inputStream  = "stream"
	inputParams  = "sampling_parameters"
	inputExclude = "exclude_input_in_output"

	outputText         = "text_output"
	outputFinish       = "finish_reason"
	outputInputTokens  = "num_input_tokens"
	outputOutputTokens = "num_output_tokens"

	// paramDelay is the request parameter that paces the output: the
	// relay waits this many milliseconds before each streamed piece.
	paramDelay = "delay_ms"
)

// MaxDelayMs is the largest delay_ms request parameter accepted, the bound
// the OpenAI routes put on it too.
const MaxDelayMs = 10_000

// Defaults of sampling_parameters, as in vLLM.
const (
	defaultTemperature = 1.0
	defaultTopP        = 1.0
	defaultMaxTokens   = 16
)

// Limits on stop sequences: each is checked after every token, in the
// goroutine shared by all requests.
const (
	maxStops   = 16
	maxStopLen = 256
)

// request is one decoded inference request.
type request struct {
	prompt  string
	stream  bool
	exclude bool // exclude_input_in_output
	params  samplingParams
	delay   time.Duration // request parameter delay_ms
}

// samplingParams are the decoded sampling_parameters.
type samplingParams struct {
	sampler.Options
	maxTokens int
	stop      []string
	ignoreEOS bool
}

// parseRequest decodes and checks req's inputs. Errors are meant for the
// client and name the input at fault.
func parseRequest(req *backend.Request) (request, error) {
	var r request
	t, ok := req.Inputs[inputText]
	if !ok {
		return r, fmt.Errorf("llama2: missing input '%s'", inputText)
	}
	prompt, err := oneString(t)
	if err != nil {
		return r, err
	}
	r.prompt = prompt
	if r.stream, err = optionalBool(req, inputStream); err != nil {
		return r, err
	}
	if r.exclude, err = optionalBool(req, inputExclude); err != nil {
		return r, err
	}
	raw := ""
	if t, ok := req.Inputs[inputParams]; ok {
		if raw, err = oneString(t); err != nil {
			return r, err
		}
	}
	if r.params, err = parseSamplingParams(raw); err != nil {
		return r, err
	}
	if r.delay, err = parseDelay(req.Parameters[paramDelay]); err != nil {
		return r, err
	}
	return r, nil
}

// parseDelay decodes the delay_ms request parameter (nil: no delay).
func parseDelay(p *pb.InferParameter) (time.Duration, error) {
	if p == nil {
		return 0, nil
	}
	ms := int64(-1)
	switch v := p.GetParameterChoice().(type) {
	case *pb.InferParameter_Int64Param:
		ms = v.Int64Param
	case *pb.InferParameter_Uint64Param:
		ms = int64(min(v.Uint64Param, MaxDelayMs+1))
	}
	if ms < 0 || ms > MaxDelayMs {
		return 0, fmt.Errorf("llama2: parameter %s must be an integer between 0 and %d, got %s", paramDelay, MaxDelayMs, paramText(p))
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// paramText prints a request parameter's value for an error message.
func paramText(p *pb.InferParameter) string {
	switch v := p.GetParameterChoice().(type) {
	case *pb.InferParameter_Int64Param:
		return strconv.FormatInt(v.Int64Param, 10)
	case *pb.InferParameter_Uint64Param:
		return strconv.FormatUint(v.Uint64Param, 10)
	case *pb.InferParameter_DoubleParam:
		return strconv.FormatFloat(v.DoubleParam, 'g', -1, 64)
	case *pb.InferParameter_StringParam:
		return strconv.Quote(v.StringParam)
	case *pb.InferParameter_BoolParam:
		return strconv.FormatBool(v.BoolParam)
	}
	return "no value"
}

func oneString(t *tensor.Tensor) (string, error) {
	v, err := t.Strings()
	if err != nil {
		return "", fmt.Errorf("llama2: input '%s': %v", t.Name, err)
	}
	if len(v) != 1 {
		return "", fmt.Errorf("llama2: input '%s' must hold exactly one element, got %d", t.Name, len(v))
	}
	return string(v[0]), nil
}

func optionalBool(req *backend.Request, name string) (bool, error) {
	t, ok := req.Inputs[name]
	if !ok {
		return false, nil
	}
	v, err := t.Bools()
	if err != nil {
		return false, fmt.Errorf("llama2: input '%s': %v", name, err)
	}
	if len(v) != 1 {
		return false, fmt.Errorf("llama2: input '%s' must hold exactly one element, got %d", name, len(v))
	}
	return v[0], nil
}

// parseSamplingParams decodes the sampling_parameters JSON object; "" means
// all defaults. A null value means the default; unknown keys are errors, so
// that a misspelt parameter is not silently ignored.
func parseSamplingParams(raw string) (samplingParams, error) {
	p := samplingParams{
		Options:   sampler.Options{Temperature: defaultTemperature, TopP: defaultTopP, Seed: rand.Uint64()},
		maxTokens: defaultMaxTokens,
	}
	if raw == "" {
		return p, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &fields); err != nil || fields == nil {
		if err == nil {
			err = fmt.Errorf("got null")
		}
		return p, fmt.Errorf("llama2: sampling_parameters must be a JSON object: %v", err)
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := fields[k]
		if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			if !slices.Contains(paramNames, k) {
				return p, unknownParam(k)
			}
			continue
		}
		bad := func(want string) error {
			return fmt.Errorf("llama2: sampling_parameters: %s must be %s, got %s", k, want, v)
		}
		switch k {
		case "temperature":
			f, ok := number(v)
			if !ok || f < 0 || math.IsInf(f, 0) || f > math.MaxFloat32 {
				return p, bad("a number >= 0")
			}
			p.Temperature = float32(f)
		case "top_p":
			f, ok := number(v)
			if !ok || f <= 0 || f > 1 {
				return p, bad("a number in (0, 1]")
			}
			p.TopP = float32(f)
		case "max_tokens":
			n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil || n < 1 {
				return p, bad("an integer >= 1")
			}
			p.maxTokens = int(min(n, math.MaxInt32))
		case "seed":
			s := string(bytes.TrimSpace(v))
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				p.Seed = uint64(n)
			} else if u, err := strconv.ParseUint(s, 10, 64); err == nil {
				p.Seed = u
			} else {
				return p, bad("a 64-bit integer")
			}
		case "stop":
			stops, err := parseStops(v)
			if err != nil {
				return p, err
			}
			p.stop = stops
		case "top_k":
			n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil || n < -1 {
				return p, bad("an integer >= -1 (0 and -1 turn it off)")
			}
			p.TopK = int(min(n, math.MaxInt32))
		case "min_p":
			f, ok := number(v)
			if !ok || f < 0 || f > 1 {
				return p, bad("a number in [0, 1]")
			}
			p.MinP = float32(f)
		case "repetition_penalty":
			f, ok := number(v)
			if !ok || !(float32(f) > 0) || f > math.MaxFloat32 {
				return p, bad("a number > 0")
			}
			p.RepetitionPenalty = float32(f)
		case "frequency_penalty", "presence_penalty":
			f, ok := number(v)
			if !ok || f < -2 || f > 2 {
				return p, bad("a number in [-2, 2]")
			}
			if k == "frequency_penalty" {
				p.FrequencyPenalty = float32(f)
			} else {
				p.PresencePenalty = float32(f)
			}
		case "ignore_eos":
			if err := json.Unmarshal(v, &p.ignoreEOS); err != nil {
				return p, bad("true or false")
			}
		default:
			return p, unknownParam(k)
		}
	}
	return p, nil
}

var paramNames = []string{
	"temperature", "top_p", "top_k", "min_p", "repetition_penalty", "frequency_penalty", "presence_penalty",
	"max_tokens", "seed", "stop", "ignore_eos",
}

func unknownParam(k string) error {
	return fmt.Errorf("llama2: sampling_parameters: unknown key %q (supported: %s)", k, strings.Join(paramNames, ", "))
}

// number decodes a JSON number.
func number(v json.RawMessage) (float64, bool) {
	var f float64
	if err := json.Unmarshal(v, &f); err != nil {
		return 0, false
	}
	return f, true
}

// parseStops accepts a string or an array of strings.
func parseStops(v json.RawMessage) ([]string, error) {
	var stops []string
	var one string
	if err := json.Unmarshal(v, &one); err == nil {
		stops = []string{one}
	} else if err := json.Unmarshal(v, &stops); err != nil {
		return nil, fmt.Errorf("llama2: sampling_parameters: stop must be a string or an array of strings, got %s", v)
	}
	if len(stops) > maxStops {
		return nil, fmt.Errorf("llama2: sampling_parameters: stop has %d sequences, at most %d are allowed", len(stops), maxStops)
	}
	for i, s := range stops {
		if s == "" || len(s) > maxStopLen {
			return nil, fmt.Errorf("llama2: sampling_parameters: stop sequence %d must be 1 to %d bytes long, got %d", i, maxStopLen, len(s))
		}
	}
	return stops, nil
}
