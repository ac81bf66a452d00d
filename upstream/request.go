package upstream

import (
	"unicode/utf8"

	"google.golang.org/grpc/codes"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// checkRequest refuses a request that cannot be marshalled. On a shared
// stream such a request would not fail alone: grpc ends the whole stream
// when a Send cannot marshal its message.
func checkRequest(req *pb.ModelInferRequest) error {
	if req == nil {
		return newError(KindRejected, codes.InvalidArgument, "nil request")
	}
	ok := utf8.ValidString(req.GetModelName()) && utf8.ValidString(req.GetModelVersion()) &&
		validParams(req.GetParameters())
	for _, in := range req.GetInputs() {
		ok = ok && utf8.ValidString(in.GetName()) && utf8.ValidString(in.GetDatatype()) && validParams(in.GetParameters())
	}
	for _, out := range req.GetOutputs() {
		ok = ok && utf8.ValidString(out.GetName()) && validParams(out.GetParameters())
	}
	if !ok {
		return newError(KindRejected, codes.InvalidArgument, "request holds a string that is not valid UTF-8")
	}
	return nil
}

func validParams(ps map[string]*pb.InferParameter) bool {
	for k, v := range ps {
		if !utf8.ValidString(k) || !utf8.ValidString(v.GetStringParam()) {
			return false
		}
	}
	return true
}
