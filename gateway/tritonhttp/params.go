package tritonhttp

import (
	"math"
	"strings"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// parameters maps the request's "parameters" (Triton's
// ParseJsonTritonParams).
func (p *parser) parameters(params node) *Error {
	if params.kind != '{' {
		return invalid("failed to get request params.: attempt to get members for non-object")
	}
	p.req.Parameters = map[string]*pb.InferParameter{}
	seen := map[string]bool{}
	for i := 0; i < len(params.kids); i += 2 {
		key := params.kids[i].s
		if seen[key] {
			continue // Triton reads the first of duplicate keys every time
		}
		seen[key] = true
		val, _ := params.find(key)
		var param *pb.InferParameter
		switch {
		case key == "sequence_id":
			if u, e := asUint(val); e == nil {
				// int64_param, as Triton's clients send integer ids;
				// Triton reads it back as the unsigned id.
				param = &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: int64(u)}}
			} else if s, e := asString(val); e == nil {
				param = stringParam(s)
			} else {
				return wrap("Unable to parse 'sequence_id'", e)
			}
		case key == "sequence_start" || key == "sequence_end":
			b, e := asBool(val)
			if e != nil {
				return wrap("Unable to parse '"+key+"'", e)
			}
			param = &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: b}}
		case key == "priority":
			u, e := asUint(val)
			if e != nil {
				return wrap("Unable to parse 'priority'", e)
			}
			param = &pb.InferParameter{ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: u}}
		case key == "timeout":
			u, e := asUint(val)
			if e != nil {
				return wrap("Unable to parse 'timeout'", e)
			}
			param = int64OrUint64(u)
		case key == "binary_data_output":
			b, e := asBool(val)
			if e != nil {
				return wrap("Unable to parse 'binary_data_output'", e)
			}
			p.req.BinaryOutput = b
			continue
		case strings.HasPrefix(key, "triton_"):
			return invalid("parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.")
		case strings.HasPrefix(key, "streamgate_"):
			return invalid("parameter keys starting with 'streamgate_' are reserved for streamgate usage")
		default:
			param = customParam(val)
			if param == nil {
				return invalid("parameter '%s' has invalid type. It should be either 'int', 'bool', or 'string'.", key)
			}
		}
		p.req.Parameters[key] = param
	}
	return nil
}

func stringParam(s string) *pb.InferParameter {
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: s}}
}

// int64OrUint64 is u as the gRPC protocol's int64_param, or uint64_param
// when it does not fit (which the server then refuses in its own words):
// a timeout in µs.
func int64OrUint64(u uint64) *pb.InferParameter {
	if u <= math.MaxInt64 {
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: int64(u)}}
	}
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: u}}
}

// customParam maps any other parameter as Triton does: string, signed
// integer, bool, or any other number as a double; nil for the rest.
func customParam(v node) *pb.InferParameter {
	switch v.kind {
	case '"':
		return stringParam(v.s)
	case 't', 'f':
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: v.kind == 't'}}
	case '0':
		if i, e := asInt(v); e == nil {
			return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: i}}
		}
		if f, e := asDouble(v); e == nil {
			return &pb.InferParameter{ParameterChoice: &pb.InferParameter_DoubleParam{DoubleParam: f}}
		}
	}
	return nil
}
