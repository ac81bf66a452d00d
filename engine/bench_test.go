package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/streamgate/streamgate/engine"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// BenchmarkRequests measures the engine's cost per request over loopback
// gRPC, where the scheduler's share is largest: tiny requests, one
// response each.
//
//	go test -run X -bench Requests -benchmem ./engine/
func BenchmarkRequests(b *testing.B) {
	b.Run("unary", func(b *testing.B) {
		h := start(b, engine.Options{Logger: slog.New(slog.DiscardHandler)})
		req := build("identity_int32", "u", false, tensor.NewInt32("INPUT0", []int64{3}, []int32{1, 2, 3}))
		b.ReportAllocs()
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := h.client.ModelInfer(context.Background(), req); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("stream", func(b *testing.B) {
		h := start(b, engine.Options{Logger: slog.New(slog.DiscardHandler)})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s, err := h.client.ModelStreamInfer(ctx)
		if err != nil {
			b.Fatal(err)
		}
		reqs := make([]*pb.ModelInferRequest, 64)
		for i := range reqs {
			reqs[i] = repeatReq(fmt.Sprint(i), 1, 0, 0, false)
		}
		b.ReportAllocs()
		b.ResetTimer()
		// Windows of 64 requests in flight on one stream.
		for done := 0; done < b.N; done += len(reqs) {
			for _, r := range reqs {
				if err := s.Send(r); err != nil {
					b.Fatal(err)
				}
			}
			for range reqs {
				if _, err := s.Recv(); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
