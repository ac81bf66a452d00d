package llama2_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/engine/builtin"
	"github.com/streamgate/streamgate/engine/llama2"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// TestEngineStreamsGoldenText serves stories260K from the engine over gRPC
// (in memory) and checks that the streamed text is run.c's golden output.
func TestEngineStreamsGoldenText(t *testing.T) {
	dir, looked := llama2.FindModelDir(filepath.Join("..", "..", "..", "shared", "models"))
	if dir == "" {
		if os.Getenv("STREAMGATE_REQUIRE") == "1" {
			t.Fatalf("stories260K not found in %v", looked)
		}
		t.Skipf("stories260K not found in %v", looked)
	}
	dir, _ = filepath.Abs(dir)
	backends := builtin.Backends()
	backends[llama2.BackendName] = llama2.New
	srv, err := engine.New(engine.Options{
		Backends:   backends,
		Repository: builtin.FS,
		Logger:     slog.New(slog.DiscardHandler),
		Extra:      []*pb.ModelConfig{llama2.Config("stories260k", filepath.Join(dir, llama2.CheckpointFile), filepath.Join(dir, llama2.TokenizerFile))},
	})
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		conn.Close()
		srv.Stop()
		<-done
	}()
	client := pb.NewGRPCInferenceServiceClient(conn)

	for _, tc := range []struct {
		prompt, params, sum string
		size                int
	}{
		{"", `{"temperature":0,"max_tokens":200}`, "beeb5cb46785efee81a8545300b31e396b595e5ce6f3b77db201545501981d14", 464},
		{"Once upon a time", `{"temperature":1.0,"top_p":0.9,"seed":42,"max_tokens":252}`, "b0c1c84f484c378f48cd5d92a020e40c9e7e9fb5362c07c3ff46c349b057845f", 562},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		s, err := client.ModelStreamInfer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		req := &pb.ModelInferRequest{ModelName: "stories260k", Id: "g"}
		for _, in := range []*tensor.Tensor{
			tensor.NewString("text_input", tc.prompt),
			tensor.NewBool("stream", []int64{1}, []bool{true}),
			tensor.NewString("sampling_parameters", tc.params),
		} {
			req.Inputs = append(req.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: in.Name, Datatype: in.Datatype, Shape: in.Shape})
			req.RawInputContents = append(req.RawInputContents, in.Raw)
		}
		if err := s.Send(req); err != nil {
			t.Fatal(err)
		}
		s.CloseSend()
		var text strings.Builder
		text.WriteString(tc.prompt)
		finish, pieces := "", 0
		for {
			r, err := s.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if msg := r.GetErrorMessage(); msg != "" {
				t.Fatalf("error response: %s", msg)
			}
			outs, err := tensor.FromResponse(r.GetInferResponse())
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range outs {
				v, err := o.Strings()
				switch {
				case o.Name == "text_output" && err == nil:
					text.Write(v[0])
					pieces++
				case o.Name == "finish_reason" && err == nil:
					finish = string(v[0])
				}
			}
		}
		cancel()
		got := sha256.Sum256([]byte(text.String()))
		if text.Len() != tc.size || hex.EncodeToString(got[:]) != tc.sum || finish == "" || pieces < 50 {
			t.Errorf("prompt %q: %d bytes in %d responses (finish %q), sha256 %x, want %d bytes, %s:\n%s",
				tc.prompt, text.Len(), pieces, finish, got, tc.size, tc.sum, text.String())
		}
	}
}
