package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/engine/builtin"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// TestMain runs the tests, removes the streamgate binary built for them and
// fails the run if any goroutine outlived its test.
func TestMain(m *testing.M) {
	code := m.Run()
	removeStreamgate()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testEngine is an in-process engine serving the built-in models on a
// loopback port.
type testEngine struct {
	srv  *engine.Server
	addr string
	done chan struct{}
}

// startEngine serves the engine on addr ("" = any free port) until the
// test ends or stop is called.
func startEngine(tb testing.TB, addr string) *testEngine {
	tb.Helper()
	return startEngineWith(tb, addr)
}

// startEngineWith is startEngine serving extra models beside the built-in
// ones.
func startEngineWith(tb testing.TB, addr string, extra ...*pb.ModelConfig) *testEngine {
	tb.Helper()
	return serveEngine(tb, addr, engine.Options{Extra: extra})
}

// serveEngine starts an engine with o, its built-in models and a discarding
// logger, on addr or a free port; it is stopped when the test ends. An
// addr "unix:PATH" is a unix socket, and the engine's addr that target.
func serveEngine(tb testing.TB, addr string, o engine.Options) *testEngine {
	tb.Helper()
	o.Repository, o.Backends, o.Logger = builtin.FS, builtin.Backends(), slog.New(slog.DiscardHandler)
	srv, err := engine.New(o)
	if err != nil {
		tb.Fatal(err)
	}
	lis := listen(tb, addr)
	e := serveOn(tb, srv, lis)
	e.addr = listenedAt(addr, lis)
	return e
}

// listen listens on addr: "unix:PATH" is a unix socket, anything else a
// TCP address ("": a free loopback port).
func listen(tb testing.TB, addr string) net.Listener {
	tb.Helper()
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		lis, err := net.Listen("unix", path)
		if err != nil {
			tb.Fatal(err)
		}
		return lis
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var lis net.Listener
	var err error
	for i := 0; ; i++ { // a just-freed port may linger briefly
		lis, err = net.Listen("tcp", addr)
		if err == nil || i == 50 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return lis
}

// listenedAt is the target that reaches lis, listening on addr: addr
// itself for a unix socket, else lis's TCP address.
func listenedAt(addr string, lis net.Listener) string {
	if strings.HasPrefix(addr, "unix:") {
		return addr
	}
	return lis.Addr().String()
}

// serveOn serves srv on lis until the test ends or stop is called.
func serveOn(tb testing.TB, srv *engine.Server, lis net.Listener) *testEngine {
	e := &testEngine{srv: srv, addr: lis.Addr().String(), done: make(chan struct{})}
	go func() {
		defer close(e.done)
		srv.Serve(lis)
	}()
	tb.Cleanup(e.stop)
	return e
}

// stop ends the engine hard, as a crash would (every RPC fails).
func (e *testEngine) stop() {
	e.srv.Stop()
	<-e.done
}

// newTestClient returns a client closed when the test ends. Its streams
// use the transport STREAMGATE_UPSTREAM_TRANSPORT names, unless opts
// names one: the suite runs with either.
func newTestClient(tb testing.TB, targets []string, opts *Options) *Client {
	tb.Helper()
	c, err := New(targets, withTestTransport(opts))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// withTestTransport is opts (nil allowed) with the transport of
// STREAMGATE_UPSTREAM_TRANSPORT, when opts names none.
func withTestTransport(opts *Options) *Options {
	tr := os.Getenv("STREAMGATE_UPSTREAM_TRANSPORT")
	if tr == "" || (opts != nil && opts.Transport != "") {
		return opts
	}
	o := Options{}
	if opts != nil {
		o = *opts
	}
	o.Transport = tr
	return &o
}

// repeatRequest asks repeat_int32 for one response per value, the i-th
// after delays[i] ms.
func repeatRequest(vals []int32, delays []uint32, wait uint32) *pb.ModelInferRequest {
	n := int64(len(vals))
	req := &pb.ModelInferRequest{ModelName: "repeat_int32"}
	tensorsToRequest(req,
		tensor.NewInt32("IN", []int64{n}, vals),
		tensor.NewUint32("DELAY", []int64{int64(len(delays))}, delays),
		tensor.NewUint32("WAIT", []int64{1}, []uint32{wait}))
	return req
}

// squareRequest asks square_int32 for n responses of OUT = n.
func squareRequest(n int32) *pb.ModelInferRequest {
	req := &pb.ModelInferRequest{ModelName: "square_int32"}
	tensorsToRequest(req, tensor.NewInt32("IN", []int64{1}, []int32{n}))
	return req
}

func tensorsToRequest(req *pb.ModelInferRequest, ts ...*tensor.Tensor) { tensor.ToRequest(req, ts) }

// repeatN is a repeat_int32 request for n responses base, base+1, ...
// each delay ms apart.
func repeatN(base int32, n int, delay uint32) *pb.ModelInferRequest {
	delays := make([]uint32, n)
	for i := range delays {
		delays[i] = delay
	}
	return repeatDelays(base, delays)
}

// repeatDelays is a repeat_int32 request for responses base, base+1, ...,
// the i-th after delays[i] ms.
func repeatDelays(base int32, delays []uint32) *pb.ModelInferRequest {
	vals := make([]int32, len(delays))
	for i := range vals {
		vals[i] = base + int32(i)
	}
	return repeatRequest(vals, delays, 0)
}

// output returns the int32 or uint32 value of a one-element output.
func output(tb testing.TB, r *pb.ModelInferResponse, name string) int64 {
	tb.Helper()
	outs, err := tensor.FromResponse(r)
	if err != nil {
		tb.Fatal(err)
	}
	for _, o := range outs {
		if o.Name != name {
			continue
		}
		switch o.Datatype {
		case "INT32":
			v, err := o.Int32s()
			if err != nil || len(v) != 1 {
				tb.Fatalf("output %s: %v %v", name, v, err)
			}
			return int64(v[0])
		case "UINT32":
			v, err := o.Uint32s()
			if err != nil || len(v) != 1 {
				tb.Fatalf("output %s: %v %v", name, v, err)
			}
			return int64(v[0])
		}
	}
	tb.Fatalf("no output %s in %v", name, r)
	return 0
}

// readAll reads a call to its end; err is nil after io.EOF.
func readAll(ctx context.Context, cl *Call) ([]*pb.ModelInferResponse, error) {
	var out []*pb.ModelInferResponse
	for {
		r, err := cl.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, proto.CloneOf(r)) // r is reused by the next Recv
	}
}

// checkRepeat checks responses base, base+1, ... with IDX 0, 1, ...
func checkRepeat(tb testing.TB, rs []*pb.ModelInferResponse, base int32, n int) {
	tb.Helper()
	checkRepeatFrom(tb, rs, base, n)
}

// checkRepeatFrom is checkRepeat skipping nil entries (responses read
// elsewhere).
func checkRepeatFrom(tb testing.TB, rs []*pb.ModelInferResponse, base int32, n int) {
	tb.Helper()
	if len(rs) != n {
		tb.Fatalf("got %d responses, want %d", len(rs), n)
	}
	for i, r := range rs {
		if r == nil {
			continue
		}
		if out, idx := output(tb, r, "OUT"), output(tb, r, "IDX"); out != int64(base)+int64(i) || idx != int64(i) {
			tb.Fatalf("response %d: OUT=%d IDX=%d, want %d %d", i, out, idx, int64(base)+int64(i), i)
		}
	}
}

// waitHang is how long waitFor waits before it calls the wait a hang:
// a guard, not a timing bound. A saturated machine (load 20-30 on two
// cores, under the race detector) may take many seconds for what takes
// milliseconds on a quiet one.
const waitHang = 2 * time.Minute

// relayRepeat relays a repeatN(base, n, 0) request on c and checks its
// responses.
func relayRepeat(tb testing.TB, ctx context.Context, c *Client, base int32, n int) {
	tb.Helper()
	cl, err := c.Start(ctx, repeatN(base, n, 0))
	if err != nil {
		tb.Fatal(err)
	}
	rs, err := readAll(ctx, cl)
	if err != nil {
		tb.Fatal(err)
	}
	checkRepeat(tb, rs, base, n)
}

// wantRefused checks that a request on c gets no stream: it ends with
// KindUnavailable, at Start or at its first Recv.
func wantRefused(tb testing.TB, ctx context.Context, c *Client) {
	tb.Helper()
	cl, err := c.Start(ctx, repeatN(3, 1, 0))
	if err == nil {
		_, err = readAll(ctx, cl)
	}
	wantKind(tb, err, KindUnavailable)
}

// waitFor polls cond every millisecond until it holds, and fails the
// test if it still does not after waitHang.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(waitHang)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", waitHang, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// wantKind fails unless err is an *Error of kind k.
func wantKind(tb testing.TB, err error, k Kind) *Error {
	tb.Helper()
	e, ok := AsError(err)
	if !ok || e.Kind != k {
		tb.Fatalf("err = %v, want kind %v", err, k)
	}
	return e
}

func tensorInt32(name string, vals ...int32) *tensor.Tensor {
	return tensor.NewInt32(name, []int64{int64(len(vals))}, vals)
}

// serveFake serves impl, a stand-in for a target, on a loopback port
// until the test ends, and returns its address.
func serveFake(tb testing.TB, impl pb.GRPCInferenceServiceServer) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterGRPCInferenceServiceServer(srv, impl)
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(lis)
	}()
	tb.Cleanup(func() {
		srv.Stop()
		<-served
	})
	return lis.Addr().String()
}

// isFinal reports the triton_final_response flag.
func isFinal(r *pb.ModelInferResponse) bool {
	return r.GetParameters()["triton_final_response"].GetBoolParam()
}

// flagsOnly reports whether r carries nothing but flags.
func flagsOnly(r *pb.ModelInferResponse) bool {
	if len(r.GetOutputs()) > 0 || len(r.GetRawOutputContents()) > 0 {
		return false
	}
	for k := range r.GetParameters() {
		if k != "triton_final_response" {
			return false
		}
	}
	return true
}

// deadAddr is a loopback address where nothing listens: a TCP socket
// bound to it, never listening, refuses every connection and keeps
// another process (a test's engine or redis-server) from taking the
// port until the test ends.
func deadAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}

// waitChecked waits until c's first health check has reached every
// target.
func waitChecked(t testing.TB, c *Client) {
	t.Helper()
	waitFor(t, "every target checked", func() bool {
		for _, tg := range c.targetList() {
			if !tg.checked.Load() {
				return false
			}
		}
		return true
	})
}
