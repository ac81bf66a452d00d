package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
	"github.com/streamgate/streamgate/upstream"
)

// Start one request on the shared streams and read its responses until
// io.EOF; an *upstream.Error says how it ended otherwise.
func ExampleClient_Start() {
	c, err := upstream.New([]string{"127.0.0.1:8001"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	in := tensor.NewInt32("IN", []int64{1}, []int32{3})
	req := &pb.ModelInferRequest{
		ModelName:        "square_int32",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: in.Name, Datatype: in.Datatype, Shape: in.Shape}},
		RawInputContents: [][]byte{in.Raw},
	}
	ctx := context.Background() // the client's request context: cancels upstream when done
	call, err := c.Start(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	defer call.Cancel() // no-op after the end
	for {
		resp, err := call.Recv(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if e, ok := upstream.AsError(err); ok {
			log.Fatalf("request %s ended: %s (%s)", call.ID(), e.Kind, e.Message)
		}
		fmt.Println(len(resp.GetOutputs()))
	}
}
