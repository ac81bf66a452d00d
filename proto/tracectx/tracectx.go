// Package tracectx carries a W3C trace context (traceparent, tracestate,
// baggage) across the inference API, as both sides read and write it:
// Params, a request's parameters, on a shared ModelStreamInfer stream
// where every request belongs to its own trace; and Metadata, gRPC
// metadata, on a stream of its own or a unary call (where a real Triton
// in OpenTelemetry trace mode reads it). Both are
// propagation.TextMapCarriers: hand them to a propagator's Inject or
// Extract.
package tracectx

import (
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc/metadata"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// Params is a request's string parameters as a carrier. Set creates the
// parameter map when the request has none.
type Params struct{ Req *pb.ModelInferRequest }

// Get returns the string parameter key, "" when absent or not a string.
func (p Params) Get(key string) string { return p.Req.GetParameters()[key].GetStringParam() }

// Set sets the string parameter key.
func (p Params) Set(key, value string) {
	if p.Req.Parameters == nil {
		p.Req.Parameters = map[string]*pb.InferParameter{}
	}
	p.Req.Parameters[key] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: value}}
}

// Keys lists the parameter keys.
func (p Params) Keys() []string {
	keys := make([]string, 0, len(p.Req.GetParameters()))
	for k := range p.Req.GetParameters() {
		keys = append(keys, k)
	}
	return keys
}

// Metadata is gRPC metadata as a carrier (keys are lower case).
type Metadata metadata.MD

// Get returns the first value of key, "" when absent.
func (m Metadata) Get(key string) string {
	if v := metadata.MD(m).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set sets key to value.
func (m Metadata) Set(key, value string) { metadata.MD(m).Set(key, value) }

// Keys lists the keys.
func (m Metadata) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

var (
	_ propagation.TextMapCarrier = Params{}
	_ propagation.TextMapCarrier = Metadata{}
)
