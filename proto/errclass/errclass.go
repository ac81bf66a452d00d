// Package errclass carries an error's class across a ModelStreamInfer
// stream, where Triton's protocol has only a text error_message.
//
// Our engine adds the response parameter Param (string_param, a canonical
// gRPC code name such as "RESOURCE_EXHAUSTED") to every in-band error
// response; upstream reads it back with FromParams. A real Triton does not
// send it: upstream then falls back to Triton's documented texts.
package errclass

import (
	"google.golang.org/grpc/codes"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// Param is the response parameter naming an in-band error's gRPC code.
const Param = "streamgate_error_code"

// names are the canonical gRPC code names (as in grpc's status.proto and
// every non-Go gRPC implementation), indexed by code.
var names = [...]string{
	codes.OK:                 "OK",
	codes.Canceled:           "CANCELLED",
	codes.Unknown:            "UNKNOWN",
	codes.InvalidArgument:    "INVALID_ARGUMENT",
	codes.DeadlineExceeded:   "DEADLINE_EXCEEDED",
	codes.NotFound:           "NOT_FOUND",
	codes.AlreadyExists:      "ALREADY_EXISTS",
	codes.PermissionDenied:   "PERMISSION_DENIED",
	codes.ResourceExhausted:  "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION",
	codes.Aborted:            "ABORTED",
	codes.OutOfRange:         "OUT_OF_RANGE",
	codes.Unimplemented:      "UNIMPLEMENTED",
	codes.Internal:           "INTERNAL",
	codes.Unavailable:        "UNAVAILABLE",
	codes.DataLoss:           "DATA_LOSS",
	codes.Unauthenticated:    "UNAUTHENTICATED",
}

// params holds one shared, read-only parameter per code, so that marking
// an error response allocates nothing.
var params = func() []*pb.InferParameter {
	ps := make([]*pb.InferParameter, len(names))
	for i, n := range names {
		ps[i] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: n}}
	}
	return ps
}()

// Name returns c's canonical name ("UNKNOWN" for codes out of range).
func Name(c codes.Code) string {
	if int(c) < len(names) {
		return names[c]
	}
	return names[codes.Unknown]
}

// Parse returns the code named name, and false when name is no code name.
func Parse(name string) (codes.Code, bool) {
	for i, n := range names {
		if n == name {
			return codes.Code(i), true
		}
	}
	return codes.Unknown, false
}

// ParamFor returns the response parameter value for c. The value is
// shared: callers must not modify it.
func ParamFor(c codes.Code) *pb.InferParameter {
	if int(c) < len(params) {
		return params[c]
	}
	return params[codes.Unknown]
}

// FromParams reads Param from response parameters: the code, and whether
// a valid one was present.
func FromParams(ps map[string]*pb.InferParameter) (codes.Code, bool) {
	p, ok := ps[Param]
	if !ok {
		return codes.Unknown, false
	}
	return Parse(p.GetStringParam())
}
