package gateway

import (
	"context"
	"sync/atomic"
	"testing"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// changingModel is fakeUpstream whose "echo" follows the vLLM convention
// until trt is set, then the TensorRT-LLM one: a model reloaded upstream
// with other inputs, whose metadata is a new answer.
type changingModel struct {
	fakeUpstream
	trt atomic.Bool
}

var trtEcho = &pb.ModelMetadataResponse{Name: "echo", Versions: []string{"1"}, Platform: "trt",
	Inputs:  []*pb.ModelMetadataResponse_TensorMetadata{tm("text_input", "BYTES", 1), tm("max_tokens", "INT32", 1)},
	Outputs: []*pb.ModelMetadataResponse_TensorMetadata{tm("text_output", "BYTES", -1)}}

func (c *changingModel) ModelMetadata(ctx context.Context, name, version string) (*pb.ModelMetadataResponse, error) {
	if name == "echo" && c.trt.Load() {
		return trtEcho, nil
	}
	return c.fakeUpstream.ModelMetadata(ctx, name, version)
}

// TestTextModelFollowsMetadata: a model's adapter is kept while its
// metadata is the same answer, and selected again from a new one.
func TestTextModelFollowsMetadata(t *testing.T) {
	up := &changingModel{}
	srv := testServer(nil, up, nil)
	convention := func() string {
		t.Helper()
		name := "echo"
		ad, err := srv.openai.TextModel(context.Background(), &name)
		if err != nil {
			t.Fatal(err)
		}
		return ad.Convention()
	}
	if c, again := convention(), convention(); c != "vllm" || again != "vllm" {
		t.Fatalf("conventions %q, %q; want vllm", c, again)
	}
	up.trt.Store(true)
	if c := convention(); c != "tensorrt_llm" {
		t.Fatalf("after the model changed: %q, want tensorrt_llm", c)
	}
}
