package upstream

import (
	"context"
	"errors"
	"io"
	"sort"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// relayResponses is the number of responses per request in BenchmarkRelay.
const relayResponses = 100

// BenchmarkRelay compares the cost of relaying one response through the
// multiplexer (pooled streams, routing by id, per-request queue) with a
// plain ModelStreamInfer stream opened for one request, against the same
// in-process engine. The ns/resp metric is the one to compare; the engine's
// own work is included in both.
func BenchmarkRelay(b *testing.B) {
	e := startEngine(b, "")
	ctx := context.Background()

	mux := func(b *testing.B, c *Client) {
		cl, err := c.Start(ctx, repeatN(1, relayResponses, 0))
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			_, err := cl.Recv(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		if n != relayResponses {
			b.Fatalf("%d responses", n)
		}
	}
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	rpc := pb.NewGRPCInferenceServiceClient(conn)
	direct := func(b *testing.B) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		st, err := rpc.ModelStreamInfer(ctx)
		if err != nil {
			b.Fatal(err)
		}
		req := repeatN(1, relayResponses, 0)
		req.Id = "1"
		req.Parameters = map[string]*pb.InferParameter{
			"triton_enable_empty_final_response": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}},
		}
		if err := st.Send(req); err != nil {
			b.Fatal(err)
		}
		st.CloseSend()
		n := 0
		for {
			m, err := st.Recv()
			if err != nil {
				b.Fatal(err)
			}
			if m.GetErrorMessage() != "" {
				b.Fatal(m.GetErrorMessage())
			}
			r := m.GetInferResponse()
			if isFinal(r) && flagsOnly(r) {
				break
			}
			n++
		}
		if n != relayResponses {
			b.Fatalf("%d responses", n)
		}
	}
	perResp := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*relayResponses), "ns/resp")
	}

	for name, tr := range map[string]string{"mux": TransportGRPC, "mux-h2": TransportH2} {
		b.Run(name, func(b *testing.B) {
			c := newTestClient(b, []string{e.addr}, &Options{HealthInterval: -1, Transport: tr})
			mux(b, c) // warm the caches and the stream
			b.ResetTimer()
			for b.Loop() {
				mux(b, c)
			}
			perResp(b)
		})
	}
	b.Run("direct", func(b *testing.B) {
		direct(b)
		b.ResetTimer()
		for b.Loop() {
			direct(b)
		}
		perResp(b)
	})
	b.Run("mux-parallel", func(b *testing.B) {
		c := newTestClient(b, []string{e.addr}, &Options{HealthInterval: -1})
		mux(b, c)
		b.ResetTimer()
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				mux(b, c)
			}
		})
		perResp(b)
	})
	b.Run("direct-parallel", func(b *testing.B) {
		direct(b)
		b.ResetTimer()
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				direct(b)
			}
		})
		perResp(b)
	})
}

// BenchmarkCancelLatency measures the time from Call.Cancel to the engine's
// work stopping (its InFlight count dropping), per cancel mode. Metrics:
// mean and p99 in microseconds.
func BenchmarkCancelLatency(b *testing.B) {
	for _, mode := range []CancelMode{CancelInband, CancelStream} {
		b.Run(mode.String(), func(b *testing.B) {
			e := startEngine(b, "")
			c := newTestClient(b, []string{e.addr}, &Options{HealthInterval: -1, Cancel: mode})
			ctx := context.Background()
			var lat []time.Duration
			for b.Loop() {
				cl, err := c.Start(ctx, repeatN(0, 1000, 5))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := cl.Recv(ctx); err != nil {
					b.Fatal(err)
				}
				for e.srv.InFlight() != 1 {
					time.Sleep(20 * time.Microsecond)
				}
				t0 := time.Now()
				cl.Cancel()
				for e.srv.InFlight() != 0 {
					time.Sleep(20 * time.Microsecond) // not a spin: leave the CPUs to the work measured
				}
				lat = append(lat, time.Since(t0))
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			var sum time.Duration
			for _, d := range lat {
				sum += d
			}
			b.ReportMetric(float64(sum.Microseconds())/float64(len(lat)), "µs-mean")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "µs-p99")
		})
	}
}
