package gateway

import (
	"context"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/streamgate/streamgate/gateway/sse"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// chanCall is a call fed by a test through a channel; closing it ends the
// call (io.EOF).
type chanCall struct{ ch chan *pb.ModelInferResponse }

func (c *chanCall) RecvTick(ctx context.Context, tick <-chan time.Time) (*pb.ModelInferResponse, error) {
	select {
	case r, ok := <-c.ch:
		if !ok {
			return nil, io.EOF
		}
		return r, nil
	case <-tick:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *chanCall) TryRecv() (*pb.ModelInferResponse, bool, error) {
	select {
	case r, ok := <-c.ch:
		if !ok {
			return nil, true, io.EOF
		}
		return r, true, nil
	default:
		return nil, false, nil
	}
}

func (c *chanCall) Cancel() {}

// nameEvents renders each response as its model name.
type nameEvents struct{}

func (nameEvents) begin() [][]byte { return [][]byte{[]byte("begin")} }
func (nameEvents) next(r *pb.ModelInferResponse) ([][]byte, error) {
	return [][]byte{[]byte(r.GetModelName())}, nil
}
func (nameEvents) end() ([][]byte, error) { return [][]byte{[]byte("end"), []byte("[DONE]")}, nil }

// flushRecorder records what each flush delivered.
type flushRecorder struct {
	*httptest.ResponseRecorder
	mu      sync.Mutex
	last    int
	flushes []string
}

func (r *flushRecorder) Flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.Body.String()
	r.flushes = append(r.flushes, b[r.last:])
	r.last = len(b)
}

func (r *flushRecorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.flushes...)
}

var _ http.Flusher = (*flushRecorder)(nil)

// TestRelaySSEBatchesAndKeepsAlive: the handler goroutine writes what is
// ready in one flush, keepalives cover quiet periods (also before the
// first response), and the quiet period restarts after each batch.
func TestRelaySSEBatchesAndKeepsAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &flushRecorder{ResponseRecorder: httptest.NewRecorder()}
		rd := sdkmetric.NewManualReader()
		srv := testServer(nil, nil, &Options{SSE: &sse.Options{KeepAlive: 10 * time.Second},
			MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))})
		out := srv.newSSESink(rec, httptest.NewRequest(http.MethodPost, "/", nil), tritonErrors, false)
		if err := out.start(); err != nil {
			t.Fatal(err)
		}
		c := &chanCall{ch: make(chan *pb.ModelInferResponse, 8)}
		errc := make(chan error, 1)
		go func() { errc <- relay(t.Context(), c, nameEvents{}, out) }()
		synctest.Wait()
		time.Sleep(10 * time.Second) // quiet: one keepalive
		synctest.Wait()
		for _, m := range []string{"a", "b", "c"} {
			c.ch <- &pb.ModelInferResponse{ModelName: m}
		}
		time.Sleep(9 * time.Second) // the three go out at once; quiet restarts
		synctest.Wait()
		close(c.ch)
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		got := rec.snapshot()
		ev := func(i int, d string) string { return string(sse.AppendEvent(nil, uint64(i+1), []byte(d))) } // event i has id i+1
		want := []string{
			"", // headers
			ev(0, "begin"),
			sse.KeepAliveComment,
			ev(1, "a") + ev(2, "b") + ev(3, "c"),
			ev(4, "end") + ev(5, "[DONE]"),
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("flushes\n%q\nwant\n%q", got, want)
		}
		if n := counterValue(t, rd, "streamgate.gateway.stream_events", attribute.String("protocol", "sse")); n != 6 {
			t.Fatalf("%v events counted, want 6", n)
		}
	})
}
