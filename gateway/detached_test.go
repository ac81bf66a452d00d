package gateway

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/streamgate/streamgate/gateway/detach"
	"github.com/streamgate/streamgate/gateway/sse"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
	"github.com/streamgate/streamgate/upstream"
	"github.com/streamgate/streamgate/upstream/upstreamtest"
)

// detachedServer serves the handler of the gateway newSrv returns on a
// loopback port as the stack does (cmd/internal/stack): plaintext
// HTTP/1.1 event streams detach and their connections come back through
// a detach.Listener served beside it; wrap, if given, wraps the handler.
// It returns the address.
func detachedServer(tb testing.TB, newSrv func(back *detach.Listener) *Server, wrap ...func(http.Handler) http.Handler) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return detachedServerOn(tb, ln, newSrv, wrap...)
}

// detachedServerOn is detachedServer on ln.
func detachedServerOn(tb testing.TB, ln net.Listener, newSrv func(back *detach.Listener) *Server, wrap ...func(http.Handler) http.Handler) string {
	back := detach.NewListener(ln.Addr())
	h := newSrv(back).Handler()
	for _, w := range wrap {
		h = w(h)
	}
	hs := &http.Server{Handler: h}
	var serving sync.WaitGroup
	serving.Go(func() { hs.Serve(ln) })
	serving.Go(func() { hs.Serve(back) })
	tb.Cleanup(func() {
		hs.Shutdown(context.Background())
		serving.Wait()
	})
	return ln.Addr().String()
}

// streamClient sends event-stream requests one after another on one
// keep-alive connection and reads each answer to its last chunk.
type streamClient struct {
	c   net.Conn
	r   *bufio.Reader
	req []byte
}

func newStreamClient(tb testing.TB, addr, path, body string) *streamClient {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	req := "POST " + path + " HTTP/1.1\r\nHost: example.com\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
	return &streamClient{c: c, r: bufio.NewReaderSize(c, 64<<10), req: []byte(req)}
}

// do sends one request and reads its answer, which must be a chunked 200
// event stream of n events.
func (sc *streamClient) do(tb testing.TB, n int) {
	sc.send(tb)
	sc.finish(tb, n)
}

// send sends the request.
func (sc *streamClient) send(tb testing.TB) {
	if _, err := sc.c.Write(sc.req); err != nil {
		tb.Fatal(err)
	}
}

// finish reads the answer to the request sent, to its end: a chunked 200
// event stream of n events.
func (sc *streamClient) finish(tb testing.TB, n int) {
	sc.head(tb)
	if events := sc.rest(tb); events != n {
		tb.Fatalf("%d events, want %d", events, n)
	}
}

// head reads the answer's status line, which must be 200, and headers.
func (sc *streamClient) head(tb testing.TB) {
	line, err := sc.r.ReadSlice('\n')
	if err != nil || !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
		tb.Fatalf("status line %q: %v", line, err)
	}
	for {
		line, err := sc.r.ReadSlice('\n')
		if err != nil {
			tb.Fatal(err)
		}
		if len(line) == 2 {
			return
		}
	}
}

// rest reads the answer's chunks to the last and counts their events.
func (sc *streamClient) rest(tb testing.TB) (events int) {
	for {
		n, last := sc.chunk(tb)
		events += n
		if last {
			return events
		}
	}
}

// chunk reads one chunk of the answer and counts its events; last says it
// was the last.
func (sc *streamClient) chunk(tb testing.TB) (events int, last bool) {
	line, err := sc.r.ReadSlice('\n')
	if err != nil {
		tb.Fatal(err)
	}
	size, err := strconv.ParseUint(string(bytes.TrimRight(line, "\r\n")), 16, 32)
	if err != nil {
		tb.Fatalf("chunk size %q: %v", line, err)
	}
	if size == 0 {
		if _, err := sc.r.Discard(2); err != nil {
			tb.Fatal(err)
		}
		return 0, true
	}
	chunk, err := sc.r.Peek(int(size) + 2)
	if err != nil {
		tb.Fatal(err)
	}
	events = bytes.Count(chunk, []byte("\n\n"))
	sc.r.Discard(len(chunk))
	return events, false
}

// goroutinesCreated is the runtime's count of goroutines started so far.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// BenchmarkDetachedRequest measures one event-stream request (one op) of
// 20 responses from a canned call, over a real loopback connection kept
// alive between requests: net/http reads and routes it, it detaches, its
// stream is relayed and ended, and its connection is handed back for the
// next. goroutines/op counts the goroutines started per request, in the
// whole process (the client's reads start none).
func BenchmarkDetachedRequest(b *testing.B) {
	resp := cannedResponse(
		tensor.NewInt32("OUT", []int64{1}, []int32{42}),
		tensor.NewUint32("IDX", []int64{1}, []uint32{7}),
	)
	addr := detachedServer(b, func(back *detach.Listener) *Server {
		return testServer(repeatClient(resp, 20), fakeUpstream{}, &Options{Detach: back, SSE: &sse.Options{KeepAlive: -1}})
	})
	sc := newStreamClient(b, addr, "/v2/models/repeat_int32/generate_stream", `{"IN":[1],"DELAY":[0],"WAIT":0}`)
	sc.do(b, 20)
	b.ReportAllocs()
	g := goroutinesCreated()
	for b.Loop() {
		sc.do(b, 20)
	}
	b.ReportMetric(float64(goroutinesCreated()-g)/float64(b.N), "goroutines/op")
}

// BenchmarkHeldDetachedStream measures what an event stream costs the
// process while it is held open (one op: one stream): b.N streams over
// loopback, each started and sent its first event, then counted with all
// of them open: the live heap (after a collection) and the goroutine
// stacks per stream, and the goroutines per stream. The figures include
// the client's end of each connection (a socket, no buffers).
func BenchmarkHeldDetachedStream(b *testing.B) {
	resp := cannedResponse(
		tensor.NewInt32("OUT", []int64{1}, []int32{42}),
		tensor.NewUint32("IDX", []int64{1}, []uint32{7}),
	)
	feeds := make(chan *upstream.Feed, 1)
	addr := detachedServer(b, func(back *detach.Listener) *Server {
		return testServer(upstreamtest.Client(upstreamtest.Feeds(feeds)), fakeUpstream{},
			&Options{Detach: back, MaxStreams: 1 << 20, SSE: &sse.Options{KeepAlive: -1}})
	})
	body := `{"IN":[1],"DELAY":[0],"WAIT":0}`
	req := []byte("POST /v2/models/repeat_int32/generate_stream HTTP/1.1\r\nHost: example.com\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	conns := make([]net.Conn, 0, b.N)
	held := make([]*upstream.Feed, 0, b.N)
	defer func() {
		for _, f := range held {
			f.End(io.EOF)
		}
		for _, c := range conns {
			c.Close()
		}
	}()
	buf := make([]byte, 4096)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	g := runtime.NumGoroutine()
	b.ResetTimer()
	for range b.N {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		f := <-feeds
		held = append(held, f)
		f.Send(resp)
		for got := 0; !bytes.Contains(buf[:got], []byte("\n\n")); { // the headers and the first event
			n, err := c.Read(buf[got:])
			if err != nil {
				b.Fatal(err)
			}
			got += n
		}
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	n := float64(b.N)
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "heap-B/stream")
	b.ReportMetric(float64(int64(after.StackInuse)-int64(before.StackInuse))/n, "stack-B/stream")
	b.ReportMetric(float64(runtime.NumGoroutine()-g)/n, "goroutines/stream")
}

// TestDetachedStreamHasNoGoroutine: a held event stream, once its handler
// has returned, has no goroutine of its own but its connection's reader:
// its start ran on the handler's goroutine and its relay runs where its
// responses arrive. When it ends, the reader hands its connection back
// for the next request.
func TestDetachedStreamHasNoGoroutine(t *testing.T) {
	resp := cannedResponse(
		tensor.NewInt32("OUT", []int64{1}, []int32{42}),
		tensor.NewUint32("IDX", []int64{1}, []uint32{7}),
	)
	feeds := make(chan *upstream.Feed, 1)
	returned := make(chan struct{}, 8)
	addr := detachedServer(t, func(back *detach.Listener) *Server {
		return testServer(upstreamtest.Client(upstreamtest.Feeds(feeds)), fakeUpstream{},
			&Options{Detach: back, SSE: &sse.Options{KeepAlive: -1}})
	}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r)
			returned <- struct{}{}
		})
	})
	const n = 3
	clients := make([]*streamClient, n)
	held := make([]*upstream.Feed, n)
	for i := range clients {
		clients[i] = newStreamClient(t, addr, "/v2/models/repeat_int32/generate_stream", `{"IN":[1],"DELAY":[0],"WAIT":0}`)
		clients[i].send(t)
		held[i] = <-feeds
		held[i].Send(resp)
		clients[i].head(t)
		if events, _ := clients[i].chunk(t); events != 1 {
			t.Fatalf("%d events in the first chunk", events)
		}
		<-returned
	}
	var all []byte
	for n := 64 << 10; ; n *= 2 {
		all = make([]byte, n)
		if m := runtime.Stack(all, true); m < n {
			all = all[:m]
			break
		}
	}
	// A goroutine may still be on its way out (a relay step, a handler's
	// goroutine): only one that waits is the stream's.
	readers := 0
	for _, g := range strings.Split(string(all), "\n\n") {
		state, _, _ := strings.Cut(g, "\n")
		switch {
		case strings.Contains(g, "detach.(*Response).read(") || strings.Contains(g, "detach.(*Response).Watch.gowrap"):
			readers++
		case strings.Contains(state, "[runnable") || strings.Contains(state, "[running") || strings.Contains(state, "[syscall"):
		case strings.Contains(g, "TestDetachedStreamHasNoGoroutine"), strings.Contains(g, "net/http.(*Server).Serve("): // the test, the servers
		case strings.Contains(g, "streamgate/gateway/"):
			t.Errorf("a goroutine of the gateway's waits besides the readers:\n%s", g)
		}
	}
	if readers != n {
		t.Errorf("%d readers for %d streams", readers, n)
	}
	for i, f := range held {
		f.End(io.EOF)
		if events := clients[i].rest(t); events != 0 {
			t.Errorf("%d events after the first", events)
		}
	}
	clients[0].send(t) // the connection came back for the next request
	f := <-feeds
	for range 20 {
		f.Send(resp)
	}
	f.End(io.EOF)
	clients[0].finish(t, 20)
}

// countingListener's connections count the writes made to their
// sockets, raw (rawsock, through SyscallConn) or not, in writes.
type countingListener struct {
	net.Listener
	writes *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c.(*net.TCPConn), l.writes}, nil
}

type countingConn struct {
	*net.TCPConn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.TCPConn.Write(p)
}

func (c countingConn) SyscallConn() (syscall.RawConn, error) {
	rc, err := c.TCPConn.SyscallConn()
	return countingRawConn{rc, c.writes}, err
}

// countingRawConn counts each Write: rawsock's are one system call each
// (they never wait in the poller).
type countingRawConn struct {
	syscall.RawConn
	writes *atomic.Int64
}

func (rc countingRawConn) Write(f func(fd uintptr) bool) error {
	rc.writes.Add(1)
	return rc.RawConn.Write(f)
}

// TestDetachedLastEventsWithLastChunk: a detached event stream whose last
// batch is its clean end sends that batch and the body's last chunk in
// one write, after the request's log line: a stream answered in one
// batch costs one write in all (headers, events, last chunk); a paced
// stream's final response with its end costs one write more, not two.
// An end that comes on its own still costs one write (the last chunk).
func TestDetachedLastEventsWithLastChunk(t *testing.T) {
	resp := cannedResponse(
		tensor.NewInt32("OUT", []int64{1}, []int32{42}),
		tensor.NewUint32("IDX", []int64{1}, []uint32{7}),
	)
	feeds := make(chan *upstream.Feed, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var writes, logged, calls atomic.Int64
	addr := detachedServerOn(t, countingListener{ln, &writes}, func(back *detach.Listener) *Server {
		// The first two calls are answered whole before their relay
		// starts; the test feeds the others.
		answer := func(ctx context.Context, req *pb.ModelInferRequest, f *upstream.Feed) error {
			if calls.Add(1) <= 2 {
				f.SendLast(resp, resp, resp)
				return nil
			}
			return upstreamtest.Feeds(feeds)(ctx, req, f)
		}
		return testServer(upstreamtest.Client(answer), fakeUpstream{},
			&Options{Detach: back, SSE: &sse.Options{KeepAlive: -1}, Logger: slog.New(requestLines{&logged})})
	})
	const path = "/v2/models/repeat_int32/generate_stream"
	const body = `{"IN":[1],"DELAY":[0],"WAIT":0}`
	whole := newStreamClient(t, addr, path, body)
	for i := range 2 { // the second on the connection handed back
		before, lines := writes.Load(), logged.Load()
		whole.do(t, 3)
		if n := writes.Load() - before; n != 1 {
			t.Errorf("request %d answered in one batch: %d writes, want 1", i, n)
		}
		if logged.Load() != lines+1 {
			t.Errorf("request %d: the client had the last chunk before the request's log line", i)
		}
	}

	paced := newStreamClient(t, addr, path, body)
	for _, last := range []bool{true, false} {
		paced.send(t)
		f := <-feeds
		f.Send(resp)
		paced.head(t)
		if events, _ := paced.chunk(t); events != 1 {
			t.Fatalf("%d events in the first chunk", events)
		}
		before, lines := writes.Load(), logged.Load()
		var events int
		if last {
			f.SendLast(resp)
			events = 1
		} else {
			f.End(io.EOF)
		}
		if got := paced.rest(t); got != events {
			t.Fatalf("%d events after the first, want %d", got, events)
		}
		if n := writes.Load() - before; n != 1 {
			t.Errorf("final response with its end (%v): %d writes after the first event, want 1", last, n)
		}
		if logged.Load() != lines+1 {
			t.Error("the client had the last chunk before the request's log line")
		}
	}
}

// requestLines counts the request log lines (the access log's) given to
// it, in n.
type requestLines struct{ n *atomic.Int64 }

func (h requestLines) Enabled(context.Context, slog.Level) bool { return true }
func (h requestLines) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h requestLines) WithGroup(string) slog.Handler            { return h }

func (h requestLines) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "request" {
		h.n.Add(1)
	}
	return nil
}
