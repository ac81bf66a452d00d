package llama2

import (
	"context"
	"math"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/streamgate/streamgate/engine/backend"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

func i64Param(n int64) *pb.InferParameter {
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: n}}
}

func uintParam(n uint64) *pb.InferParameter {
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: n}}
}

func floatParam(f float64) *pb.InferParameter {
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_DoubleParam{DoubleParam: f}}
}

func boolParam(b bool) *pb.InferParameter {
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: b}}
}

func stringParam(s string) *pb.InferParameter {
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: s}}
}

// TestSamplingAsRequestParameters: the sampling settings work as typed
// request parameters (Triton's generate extension puts "parameters":{...}
// there) just as in sampling_parameters.
func TestSamplingAsRequestParameters(t *testing.T) {
	b := scripted(t, 64, bytesChain("abcdefghij"), nil)
	res := run(t, b, call{reqParams: map[string]*pb.InferParameter{"max_tokens": i64Param(3), "temperature": i64Param(0)}})
	if res.outTokens != 3 || res.text != "abc" || res.finish != finishLength {
		t.Errorf("max_tokens 3 as a parameter: %q %d tokens %s", res.text, res.outTokens, res.finish)
	}
	res = run(t, b, call{reqParams: map[string]*pb.InferParameter{
		"max_tokens": uintParam(8), "temperature": floatParam(0), "stop": stringParam("de"), "ignore_eos": boolParam(true), "seed": i64Param(-3),
	}})
	if res.text != "abc" || res.finish != finishStop {
		t.Errorf("stop as a parameter: %q %s", res.text, res.finish)
	}
	// Split between the two places, each setting given once.
	res = run(t, b, call{params: `{"temperature":0}`, reqParams: map[string]*pb.InferParameter{"max_tokens": i64Param(2), "delay_ms": i64Param(0)}})
	if res.text != "ab" || res.finish != finishLength {
		t.Errorf("split: %q %s", res.text, res.finish)
	}
}

func TestBadRequestParameters(t *testing.T) {
	b := scripted(t, 16, bytesChain("ab"), nil)
	for _, tc := range []struct {
		name   string
		params string
		p      *pb.InferParameter
		msg    string
	}{
		{"max_token", "", i64Param(3), `llama2: unknown request parameter "max_token" (supported: delay_ms, ` + strings.Join(paramNames, ", ") + ")"},
		{"max_tokens", `{"max_tokens":3}`, i64Param(3), "llama2: max_tokens is given both as a request parameter and in sampling_parameters; give it once"},
		{"max_tokens", "", stringParam("3"), `llama2: parameter max_tokens must be an integer >= 1, got "3"`},
		{"max_tokens", "", floatParam(2.5), "llama2: parameter max_tokens must be an integer >= 1, got 2.5"},
		{"max_tokens", "", i64Param(0), "llama2: parameter max_tokens must be an integer >= 1, got 0"},
		{"temperature", "", boolParam(true), "llama2: parameter temperature must be a number >= 0, got true"},
		{"temperature", "", floatParam(math.NaN()), "llama2: parameter temperature must be a number >= 0, got NaN"},
		{"top_p", "", floatParam(math.Inf(1)), "llama2: parameter top_p must be a number in (0, 1], got +Inf"},
		{"ignore_eos", "", stringParam("true"), `llama2: parameter ignore_eos must be true or false, got "true"`},
		{"stop", "", i64Param(1), "llama2: parameter stop must be a string or an array of strings, got 1"},
		{"stop", "", stringParam(""), "llama2: parameter stop sequence 0 must be 1 to 256 bytes long, got 0"},
		{"seed", "", &pb.InferParameter{}, `llama2: parameter seed must be a 64-bit integer, got "no value"`},
	} {
		c := call{params: tc.params, reqParams: map[string]*pb.InferParameter{tc.name: tc.p}}
		_, err := tryRun(t, context.Background(), b, c)
		if code, _ := backend.CodeOf(err); err == nil || err.Error() != tc.msg || code != codes.InvalidArgument {
			t.Errorf("%s=%s: err = %v (%v), want %q (InvalidArgument)", tc.name, paramText(tc.p), err, code, tc.msg)
		}
	}
	if !strings.Contains(strings.Join(paramNames, ","), "temperature,top_p,top_k,min_p,repetition_penalty,frequency_penalty,presence_penalty,max_tokens,seed,stop,ignore_eos") {
		t.Errorf("supported settings: %v", paramNames)
	}
	// A request parameter is checked even when sampling_parameters has an
	// error of its own later in the list: the first fault is reported.
	_, err := tryRun(t, context.Background(), b, call{params: `{"max_tokens":1}`, reqParams: map[string]*pb.InferParameter{"temprature": floatParam(0.5)}})
	if err == nil || !strings.Contains(err.Error(), `unknown request parameter "temprature"`) {
		t.Errorf("typo next to sampling_parameters: %v", err)
	}
}
