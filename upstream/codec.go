package upstream

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// codec is the gRPC codec of every call the Client makes: grpc-go's own
// protobuf codec, except that a stream's reader receives into a *wireMsg,
// which takes the message's bytes as they are, into a buffer it reuses;
// the reader routes them by their header (scanHeader) and the call's
// consumer decodes them (frame). Its name stays "proto", so the wire and
// the content-type are what any Triton expects.
type codec struct{ base encoding.CodecV2 }

var _ encoding.CodecV2 = codec{}

func newCodec() codec {
	base := encoding.GetCodecV2(proto.Name)
	if base == nil {
		panic("upstream: grpc-go's proto codec is not registered")
	}
	return codec{base: base}
}

func (c codec) Name() string { return proto.Name }

func (c codec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*wireMsg)
	if !ok {
		return c.base.Unmarshal(data, v)
	}
	m.b = copyMsg(m.b, data)
	return nil
}

// wireMsg is a received message's wire bytes (see codec).
type wireMsg struct{ b []byte }
