// Package upstreamtest gives the layers above upstream (the gateway)
// canned upstream clients for their tests: real *upstream.Client and
// *upstream.Call values whose responses a test chooses, with no network
// and no engine, so that they also run under testing/synctest.
package upstreamtest

import (
	"context"
	"io"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/upstream"
)

// Client returns a client whose every Start is answered by answer.
func Client(answer upstream.Answer) *upstream.Client { return upstream.NewCanned(answer) }

// Replies answers each request with the responses replies gives for it,
// then completes the call; an error from replies refuses the request
// (Start returns it).
func Replies(replies func(req *pb.ModelInferRequest) ([]*pb.ModelInferResponse, error)) upstream.Answer {
	return func(_ context.Context, req *pb.ModelInferRequest, f *upstream.Feed) error {
		resps, err := replies(req)
		if err != nil {
			return err
		}
		for _, r := range resps {
			f.Send(r)
		}
		f.End(io.EOF)
		return nil
	}
}

// Feeds hands each call started to the test on feeds, in the order
// Start made them; the test sends their responses and ends them. A call
// also ends when its Start's context does. feeds must have room: Start
// waits for it.
func Feeds(feeds chan<- *upstream.Feed) upstream.Answer {
	return func(_ context.Context, _ *pb.ModelInferRequest, f *upstream.Feed) error {
		feeds <- f
		return nil
	}
}
