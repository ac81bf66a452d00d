package engine

import (
	"strings"

	"google.golang.org/grpc/codes"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// Parameter keys the engine itself interprets.
const (
	paramEmptyFinal = "triton_enable_empty_final_response"
	paramFinal      = "triton_final_response"
	// ParamCancel marks an in-band cancel of the request with the same id on
	// the same stream (streamgate extension, advertised as ExtensionCancel).
	ParamCancel = "streamgate_cancel"
	// ExtensionCancel is the ServerMetadata extension naming in-band cancel.
	ExtensionCancel = "streamgate_cancel"
)

// requestParams is what the engine reads from a request's parameters.
type requestParams struct {
	emptyFinal bool
	cancel     bool
	priority   uint64                        // 0: the model's default level
	seq        seqFlags                      // sequence_id, sequence_start, sequence_end
	timeout    int64                         // queue timeout in µs; <= 0: none asked for
	model      map[string]*pb.InferParameter // passed to the backend
}

// parseParams checks request parameters the way Triton's gRPC frontend
// does, with its error texts.
func parseParams(in map[string]*pb.InferParameter) (requestParams, error) {
	var p requestParams
	for k, v := range in {
		switch k {
		case "sequence_id":
			switch c := v.GetParameterChoice().(type) {
			case *pb.InferParameter_Int64Param:
				p.seq.id = seqID{num: uint64(c.Int64Param)}
			case *pb.InferParameter_StringParam:
				p.seq.id = seqID{str: c.StringParam, isStr: true}
			default:
				return p, invalidType(k, "int64_param or string_param")
			}
		case "sequence_start", "sequence_end":
			b, ok := v.GetParameterChoice().(*pb.InferParameter_BoolParam)
			if !ok {
				return p, invalidType(k, "bool_param")
			}
			if k == "sequence_start" {
				p.seq.start = b.BoolParam
			} else {
				p.seq.end = b.BoolParam
			}
		case "priority":
			switch c := v.GetParameterChoice().(type) {
			case *pb.InferParameter_Int64Param:
				if c.Int64Param < 0 {
					return p, errorf(codes.InvalidArgument, "invalid value for 'priority', expected value >= 0.")
				}
				p.priority = uint64(c.Int64Param)
			case *pb.InferParameter_Uint64Param:
				p.priority = c.Uint64Param
			default:
				return p, invalidType(k, "int64_param or uint64_param")
			}
		case "timeout":
			t, ok := v.GetParameterChoice().(*pb.InferParameter_Int64Param)
			if !ok {
				return p, invalidType(k, "int64_param")
			}
			p.timeout = t.Int64Param
		case paramEmptyFinal:
			b, ok := v.GetParameterChoice().(*pb.InferParameter_BoolParam)
			if !ok {
				return p, invalidType(k, "bool_param")
			}
			p.emptyFinal = b.BoolParam
		case ParamCancel:
			b, ok := v.GetParameterChoice().(*pb.InferParameter_BoolParam)
			if !ok {
				return p, invalidType(k, "bool_param")
			}
			p.cancel = b.BoolParam
		default:
			if strings.HasPrefix(k, "triton_") {
				return p, errorf(codes.InvalidArgument, "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: %s", paramEmptyFinal)
			}
			switch v.GetParameterChoice().(type) {
			case *pb.InferParameter_Int64Param, *pb.InferParameter_BoolParam, *pb.InferParameter_StringParam, *pb.InferParameter_DoubleParam:
			default:
				return p, errorf(codes.InvalidArgument, "invalid value type for '%s' parameter, expected int64_param, bool_param, or string_param.", k)
			}
			if p.model == nil {
				p.model = map[string]*pb.InferParameter{}
			}
			p.model[k] = v
		}
	}
	return p, nil
}

func invalidType(key, want string) error {
	return errorf(codes.InvalidArgument, "invalid value type for '%s' parameter, expected %s.", key, want)
}

// FinalFlag reports the triton_final_response parameter of a response.
func FinalFlag(r *pb.ModelInferResponse) bool {
	return r.GetParameters()[paramFinal].GetBoolParam()
}
