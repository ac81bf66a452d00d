package errclass

import (
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

func TestRoundTrip(t *testing.T) {
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		ps := map[string]*pb.InferParameter{Param: ParamFor(c)}
		got, ok := FromParams(ps)
		if !ok || got != c {
			t.Errorf("%v: got %v, %v", c, got, ok)
		}
	}
	if Name(codes.ResourceExhausted) != "RESOURCE_EXHAUSTED" {
		t.Errorf("Name(ResourceExhausted) = %q", Name(codes.ResourceExhausted))
	}
	if _, ok := FromParams(nil); ok {
		t.Error("no parameter: want ok=false")
	}
	if _, ok := Parse("ResourceExhausted"); ok {
		t.Error("Go-style names are not canonical")
	}
	if Name(codes.Code(99)) != "UNKNOWN" {
		t.Error("out of range code: want UNKNOWN")
	}
}
