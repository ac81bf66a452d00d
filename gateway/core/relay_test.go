package core

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/streamgate/streamgate/gateway/sse"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/upstream"
	"github.com/streamgate/streamgate/upstream/upstreamtest"
)

// nameEvents renders each response as its model name.
type nameEvents struct{}

func (nameEvents) Begin() [][]byte { return [][]byte{[]byte("begin")} }
func (nameEvents) Next(r *pb.ModelInferResponse) ([][]byte, error) {
	return [][]byte{[]byte(r.GetModelName())}, nil
}
func (nameEvents) End() ([][]byte, error) { return [][]byte{[]byte("end"), []byte("[DONE]")}, nil }

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

// feeds is a canned upstream whose calls the test feeds, in the order
// they start.
func feeds(n int) (*upstream.Client, chan *upstream.Feed) {
	ch := make(chan *upstream.Feed, n)
	return upstreamtest.Client(upstreamtest.Feeds(ch)), ch
}

// TestServeSSEBatchesAndKeepsAlive: an event stream sends, flush for
// flush, the headers with the first event when the first response is
// late, keepalives while quiet, a batch per group of ready responses with
// the quiet period restarting after it, and the end; a client that
// leaves ends it. Every event is counted once.
func TestServeSSEBatchesAndKeepsAlive(t *testing.T) {
	script := func(t *testing.T, leave bool) ([]string, int64, error) {
		up, calls := feeds(1)
		rd := sdkmetric.NewManualReader()
		srv := testServer(up, nil, &Options{SSE: &sse.Options{KeepAlive: 10 * time.Second},
			MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))})
		rec := &flushRecorder{ResponseRecorder: httptest.NewRecorder()}
		out := srv.NewSSESink(rec, httptest.NewRequest(http.MethodPost, "/", nil), TritonErrors, false)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		errc := make(chan error, 1)
		go func() {
			errc <- srv.Serve(ctx, "", &Job{Req: &pb.ModelInferRequest{ModelName: "m"}, Tr: nameEvents{}, Op: OpGenerate}, out)
		}()
		c := <-calls
		synctest.Wait()
		time.Sleep(10 * time.Second) // the first response is late: headers and begin
		synctest.Wait()
		time.Sleep(10 * time.Second) // quiet: a keepalive
		synctest.Wait()
		c.Send(&pb.ModelInferResponse{ModelName: "a"}, &pb.ModelInferResponse{ModelName: "b"}, &pb.ModelInferResponse{ModelName: "c"}) // one read's worth: one batch
		synctest.Wait()
		time.Sleep(9 * time.Second) // quiet restarted at the batch: nothing yet
		synctest.Wait()
		c.Send(&pb.ModelInferResponse{ModelName: "d"})
		synctest.Wait()
		time.Sleep(10 * time.Second) // a keepalive
		synctest.Wait()
		if leave {
			cancel()
		} else {
			c.End(io.EOF)
		}
		err := <-errc
		return rec.snapshot(), counterValue(t, rd, "streamgate.gateway.stream_events", attribute.String("protocol", "sse")), err
	}
	ev := func(i int, d string) string { return string(sse.AppendEvent(nil, uint64(i+1), []byte(d))) } // event i has id i+1
	want := []string{ev(0, "begin"), sse.KeepAliveComment, ev(1, "a") + ev(2, "b") + ev(3, "c"), ev(4, "d"), sse.KeepAliveComment}
	for _, leave := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			got, events, err := script(t, leave)
			if leave && !errors.Is(err, ErrClientGone) || !leave && err != nil {
				t.Fatalf("leave %v: ended with %v", leave, err)
			}
			w, wantEvents := want, int64(5)
			if !leave {
				w, wantEvents = append(slices.Clip(want), ev(5, "end")+ev(6, "[DONE]")), 7
			}
			if !slices.Equal(got, w) {
				t.Fatalf("leave %v: flushes\n%q\nwant\n%q", leave, got, w)
			}
			if events != wantEvents {
				t.Fatalf("leave %v: %d events counted, want %d", leave, events, wantEvents)
			}
		})
	}
}

// TestKeepaliveHot: a stream counts as running at full speed (relayed
// off the upstream reader) only after two short gaps in a row, so a paced
// stream whose one batch went out late, followed by the next on time,
// stays on the reader.
func TestKeepaliveHot(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	var k keepalive
	k.last = ms(1000) // the start
	if k.hot(ms(1001)) {
		t.Fatal("hot at the first response, right after the start")
	}
	// Paced at 50 ms: batch 1 on time, batch 2 late, batch 3 on time.
	k.batch(ms(1050))
	k.batch(ms(1148))
	if k.hot(ms(1150)) {
		t.Fatal("a paced stream's on-time batch after a late one is hot")
	}
	k.batch(ms(1150))
	if k.hot(ms(1200)) {
		t.Fatal("a paced stream is hot")
	}
	// Full speed: short gaps in a row.
	k.batch(ms(1200))
	k.batch(ms(1201))
	if !k.hot(ms(1202)) {
		t.Fatal("a stream at full speed is not hot")
	}
	if k.hot(ms(1201) + coalesceGap) {
		t.Fatal("hot after a gap of coalesceGap")
	}
}

// TestSSESinkLayout guards SSESink's layout (see its comment): 192
// bytes, a size class whose objects start on a cache line, with what
// every event touches (the sink's own state and the sse.Writer's first
// fields) in its first line.
func TestSSESinkLayout(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the layout is tuned for 64-bit builds")
	}
	var o SSESink
	if size := unsafe.Sizeof(o); size != 192 {
		t.Errorf("SSESink is %d bytes, want 192", size)
	}
	// sse's TestWriterLayout keeps the Writer's hot fields in its first
	// 40 bytes.
	if end := unsafe.Offsetof(o.sw) + 40; end > 64 {
		t.Errorf("what an event touches ends at byte %d, past the first cache line", end)
	}
}
