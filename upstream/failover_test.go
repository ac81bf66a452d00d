package upstream

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/streamgate/streamgate/engine"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// TestFailover stops one of two engines under load. Its requests that had
// delivered nothing are re-sent to the other engine and complete; those
// that had delivered data end with KindUnavailable within a second.
func TestFailover(t *testing.T) {
	a, b := startEngine(t, ""), startEngine(t, "")
	c := newTestClient(t, []string{a.addr, b.addr}, &Options{HealthInterval: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitChecked(t, c) // until then the first engine checked takes every request

	type started struct {
		cl    *Call
		base  int32
		early bool // delivers its first response at once
		onA   bool
	}
	var reqs []*started
	for i := range 20 {
		s := &started{base: int32(100 * i), early: i%4 < 2}
		delays := []uint32{600, 10, 10}
		if s.early {
			delays = []uint32{0, 600, 10}
		}
		cl, err := c.Start(ctx, repeatDelays(s.base, delays))
		if err != nil {
			t.Fatal(err)
		}
		s.cl, s.onA = cl, cl.Target() == a.addr
		reqs = append(reqs, s)
	}
	for _, s := range reqs {
		if s.early {
			if r, err := s.cl.Recv(ctx); err != nil || output(t, r, "OUT") != int64(s.base) {
				t.Fatalf("first response %v, %v", r, err)
			}
		}
	}
	var onA [2]int
	for _, s := range reqs {
		if s.onA && s.early {
			onA[0]++
		} else if s.onA {
			onA[1]++
		}
	}
	if onA[0] == 0 || onA[1] == 0 {
		t.Fatalf("placement: %d early and %d late requests on engine a", onA[0], onA[1])
	}
	stopped := time.Now()
	a.stop()

	var wg sync.WaitGroup
	for _, s := range reqs {
		wg.Go(func() {
			rs, err := readAll(ctx, s.cl)
			took := time.Since(stopped)
			switch {
			case s.onA && s.early:
				// Ended by the broken stream, not by a timer: how long
				// that takes depends on the machine's load.
				wantKind(t, err, KindUnavailable)
				t.Logf("request that had delivered data failed %v after the stop", took)
			case s.onA:
				if err != nil || s.cl.Target() != b.addr {
					t.Errorf("request not failed over: %v, on %s", err, s.cl.Target())
					return
				}
				checkRepeat(t, rs, s.base, 3)
			default:
				if err != nil {
					t.Errorf("request on the healthy engine: %v", err)
					return
				}
				if s.early { // its first response was read above
					rs = append([]*pb.ModelInferResponse{nil}, rs...)
				}
				checkRepeatFrom(t, rs, s.base, 3)
			}
		})
	}
	wg.Wait()
	st := c.Stats()
	t.Logf("stats after failover: retries %d, breaks %d", st.Retries, st.StreamBreaks)
	if st.Retries == 0 || st.StreamBreaks == 0 || st.InFlight != 0 {
		t.Fatalf("stats %+v", st)
	}
	waitFor(t, "engine a ejected", func() bool { return !targetHealthy(c, a.addr) })
	for range 10 { // new requests all go to b
		cl, err := c.Start(ctx, repeatN(1, 1, 0))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := readAll(ctx, cl); err != nil || cl.Target() != b.addr {
			t.Fatalf("after failover: %v on %s", err, cl.Target())
		}
	}
}

func targetHealthy(c *Client, addr string) bool {
	for _, t := range c.Stats().Targets {
		if t.Addr == addr {
			return t.Healthy
		}
	}
	return false
}

// TestRestartInProcess stops the only engine and starts a new one on the
// same address: calls in flight end, the target is ejected, re-admitted,
// and new calls succeed.
func TestRestartInProcess(t *testing.T) {
	e := startEngine(t, "")
	c := newTestClient(t, []string{e.addr}, &Options{HealthInterval: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := c.Start(ctx, repeatN(0, 10, 100))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Recv(ctx); err != nil {
		t.Fatal(err)
	}
	e.stop()
	_, err = readAll(ctx, cl)
	wantKind(t, err, KindUnavailable)
	waitFor(t, "ejection", func() bool { return !targetHealthy(c, e.addr) })
	cl, err = c.Start(ctx, repeatN(0, 1, 0))
	if err == nil {
		_, err = readAll(ctx, cl)
	}
	wantKind(t, err, KindUnavailable)

	startEngine(t, e.addr)
	waitFor(t, "re-admission", func() bool { return targetHealthy(c, e.addr) })
	cl, err = c.Start(ctx, repeatN(5, 3, 0))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := readAll(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	checkRepeat(t, rs, 5, 3)
}

// TestTargetNeverAnswers points the client at a TCP listener that accepts
// connections and never speaks HTTP/2: every call must end by its
// deadline, never hang.
func TestTargetNeverAnswers(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	}()
	defer func() {
		lis.Close()
		<-acceptDone
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()

	for _, mode := range []CancelMode{CancelAuto, CancelInband, CancelStream} {
		t.Run(mode.String(), func(t *testing.T) {
			c := newTestClient(t, []string{lis.Addr().String()}, &Options{Cancel: mode,
				HealthInterval: 50 * time.Millisecond, HealthTimeout: 100 * time.Millisecond})
			var wg sync.WaitGroup
			for range 5 {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
					defer cancel()
					cl, err := c.Start(ctx, repeatN(0, 1, 0))
					if err == nil {
						_, err = readAll(context.Background(), cl)
					}
					// Its deadline ended it (not keepalive, which would
					// be KindUnavailable); how soon is the machine's.
					wantKind(t, err, KindDeadline)
				})
			}
			wg.Wait()
			waitFor(t, "ejection", func() bool { return !targetHealthy(c, lis.Addr().String()) })
			if ok, err := c.ServerReady(ctxTimeout(t, 100*time.Millisecond)); ok || err == nil {
				t.Fatalf("ServerReady = %v, %v", ok, err)
			}
		})
	}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// silentEngine is a gRPC server that answers metadata like the engine but
// never answers a streamed request.
type silentEngine struct {
	pb.UnimplementedGRPCInferenceServiceServer
	received chan string
}

func (s *silentEngine) ServerMetadata(context.Context, *pb.ServerMetadataRequest) (*pb.ServerMetadataResponse, error) {
	return &pb.ServerMetadataResponse{Name: "silent", Extensions: []string{cancelExtension}}, nil
}

func (s *silentEngine) ModelConfig(_ context.Context, r *pb.ModelConfigRequest) (*pb.ModelConfigResponse, error) {
	return &pb.ModelConfigResponse{Config: &pb.ModelConfig{Name: r.GetName(),
		ModelTransactionPolicy: &pb.ModelTransactionPolicy{Decoupled: true}}}, nil
}

func (s *silentEngine) ModelStreamInfer(stream pb.GRPCInferenceService_ModelStreamInferServer) error {
	for {
		r, err := stream.Recv()
		if err != nil {
			return err
		}
		s.received <- r.GetId()
	}
}

// TestStreamNeverAnswers: the target accepts requests on the stream and
// never answers them. Calls end with KindDeadline and are cancelled in-band.
func TestStreamNeverAnswers(t *testing.T) {
	se := &silentEngine{received: make(chan string, 100)}
	addr := serveFake(t, se)
	c := newTestClient(t, []string{addr}, &Options{HealthInterval: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	cl, err := c.Start(ctx, repeatN(0, 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	_, err = readAll(context.Background(), cl)
	wantKind(t, err, KindDeadline)
	if id := <-se.received; id != cl.ID() {
		t.Fatalf("request id %q", id)
	}
	if id := <-se.received; id != cl.ID() { // the in-band cancel
		t.Fatalf("cancel id %q", id)
	}
	if s := c.Stats(); s.CancelsInband != 1 || s.InFlight != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestGracefulStop drains an engine: its running request completes, a
// request it refuses because it is shutting down goes to another engine, and
// its graceful stop does not wait for the client's idle streams.
func TestGracefulStop(t *testing.T) {
	a, b := startEngine(t, ""), startEngine(t, "")
	c := newTestClient(t, []string{a.addr}, &Options{HealthInterval: -1, MaxStreamsPerTarget: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	long, err := c.Start(ctx, repeatN(0, 3, 150))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := long.Recv(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := gracefulStop(a)
	waitFor(t, "engine a to refuse requests", func() bool {
		r, _ := a.srv.ServerReady(ctx, nil)
		return !r.GetReady()
	})
	// b joins, not yet known to be healthy, so the next request still
	// goes to a's open stream, is refused in-band and fails over.
	bt, err := newTarget(c, b.addr, "")
	if err != nil {
		t.Fatal(err)
	}
	bt.healthy.Store(false)
	ts := append(c.targetList(), bt)
	c.targets.Store(&ts)
	for i := range 3 {
		cl, err := c.Start(ctx, repeatN(int32(10*i), 2, 0))
		if err != nil {
			t.Fatal(err)
		}
		rs, err := readAll(ctx, cl)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		checkRepeat(t, rs, int32(10*i), 2)
		if cl.Target() != b.addr {
			t.Fatalf("request %d served by %s", i, cl.Target())
		}
	}
	rs, err := readAll(ctx, long)
	if err != nil {
		t.Fatalf("draining request: %v", err)
	}
	checkRepeatFrom(t, append([]*pb.ModelInferResponse{nil}, rs...), 0, 3)
	if err := <-stopped; err != nil {
		t.Fatalf("engine a's graceful stop waits for the client: %v", err)
	}
	// The GOAWAY of a's graceful stop drains its stream (h2: the
	// stream's reader sees it; grpc: the connection leaves READY). The
	// request that fails over was either refused in band on the old
	// stream, before the drain, or found a refusing a new connection, one
	// break, after it.
	if s := c.Stats(); s.Retries != 1 || s.StreamBreaks > 1 || targetHealthy(c, a.addr) || !targetHealthy(c, b.addr) {
		t.Fatalf("stats %+v, want 1 retry and at most 1 break", s)
	}
}

// gracefulStop stops e gracefully and sends nil once it has stopped, or
// an error if its open streams had to be cut: the client did not close
// them within waitHang (a hang guard, not a timing bound).
func gracefulStop(e *testEngine) <-chan error {
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitHang)
		defer cancel()
		e.srv.GracefulStop(ctx)
		stopped <- ctx.Err()
	}()
	return stopped
}

// TestDrainOnNotReady: a health check that finds the target not ready
// half-closes its idle streams, so its graceful stop completes.
func TestDrainOnNotReady(t *testing.T) {
	e := startEngine(t, "")
	c := newTestClient(t, []string{e.addr}, &Options{HealthInterval: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := c.Start(ctx, repeatN(0, 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readAll(ctx, cl); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.StreamsOpen != 1 {
		t.Fatalf("%d streams open", s.StreamsOpen)
	}
	if err := <-gracefulStop(e); err != nil {
		t.Fatalf("graceful stop waits for the client's idle stream: %v", err)
	}
	// The stream may have been drained by the health check or, over h2,
	// by the GOAWAY already; the check ejects the target either way.
	waitFor(t, "the health check to eject the stopping target", func() bool { return !targetHealthy(c, e.addr) })
	if s := c.Stats(); s.StreamsOpen != 0 || s.StreamBreaks != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// tinyQueue is repeat_int32 as "repeat_tiny" with one instance and room
// for one waiting request: a third is refused with "Exceeds maximum queue
// size", class UNAVAILABLE.
func tinyQueue(tb testing.TB) *pb.ModelConfig {
	tb.Helper()
	cfg, err := engine.ParseConfig([]byte(`name: "repeat_tiny" backend: "repeat" max_batch_size: 0
model_transaction_policy { decoupled: True }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }, { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
  { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { default_queue_policy { max_queue_size: 1 } }`))
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// TestQueueFullRefusal: a target whose queue is full refuses in-band with
// class UNAVAILABLE. The refused request is retried once on another
// target; each refusing target is asked whether it is still ready, and as
// it is, it stays admitted and keeps its streams.
func TestQueueFullRefusal(t *testing.T) {
	a, b := startEngineWith(t, "", tinyQueue(t)), startEngineWith(t, "", tinyQueue(t))
	// StreamFill 1: a new stream for each request while every open one is
	// busy (checked below: none was drained).
	c := newTestClient(t, []string{a.addr, b.addr}, &Options{HealthInterval: -1, StreamFill: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Each engine runs one request (a minute long, holding its instance
	// as long with WAIT) and queues one: the fifth request finds both
	// full.
	var calls []*Call
	for i := range 5 {
		req := repeatRequest([]int32{int32(i)}, []uint32{60000}, 60000)
		req.ModelName = "repeat_tiny"
		cl, err := c.Start(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, cl)
	}
	ended := func() (n int, last *Call) {
		for _, cl := range calls {
			select {
			case <-cl.Done():
				n, last = n+1, cl
			default:
			}
		}
		return n, last
	}
	waitFor(t, "a request to be refused", func() bool { n, _ := ended(); return n > 0 })
	_, refused := ended()
	_, err := refused.Recv(ctx)
	if e := wantKind(t, err, KindModel); e.Code != codes.Unavailable || e.Message != "Exceeds maximum queue size" {
		t.Fatalf("refused with %+v", e)
	}
	if n, _ := ended(); n != 1 {
		t.Fatalf("%d requests ended, want only the refused one", n)
	}
	// The refused request was retried once on the other engine. (A second
	// retry happens when a retry reached the other engine before one of
	// its own requests did, which is then refused and retried in turn.)
	// A new stream opened for each of the five requests while every open
	// one was busy, and none was drained.
	if s := c.Stats(); s.Retries < 1 || s.Retries > 2 || s.StreamBreaks != 0 || s.StreamsOpen < 5 || !targetHealthy(c, a.addr) || !targetHealthy(c, b.addr) {
		t.Fatalf("stats %+v", s)
	}
	for _, cl := range calls {
		cl.Cancel()
	}
}
