package upstream

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// TestIdleWatch drives one call's idle watch on a fake clock: it ends the
// call between 1 and 1.25 idle timeouts after its last response, never
// while responses keep coming, and not at all once the call has ended.
func TestIdleWatch(t *testing.T) {
	const idle = time.Second
	newCall := func() *Call {
		return &Call{c: &Client{}, q: newRespQueue(), done: make(chan struct{})}
	}
	synctest.Test(t, func(t *testing.T) {
		cl := newCall()
		start := time.Now()
		cl.watchIdle(idle)
		for range 10 { // a response every 0.9 idle: never quiet for long enough
			time.Sleep(idle * 9 / 10)
			cl.progress.Add(1)
		}
		last := time.Now()
		<-cl.Done()
		quiet := time.Since(last)
		wantKind(t, cl.err, KindIdleTimeout)
		if quiet < idle || quiet > idle*5/4 || last.Sub(start) != 9*time.Second {
			t.Errorf("ended %v after the last response (%v after the start)", quiet, time.Since(start))
		}
		if n := cl.c.ctr.idleTimeouts.Load(); n != 1 {
			t.Errorf("idle timeouts counted: %d", n)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		cl := newCall()
		start := time.Now()
		cl.watchIdle(idle)
		<-cl.Done()
		if took := time.Since(start); took != idle {
			t.Errorf("a call that never answered ended after %v", took)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		cl := newCall()
		cl.watchIdle(idle)
		cl.finish(io.EOF, false)
		time.Sleep(10 * idle)
		synctest.Wait()
		if cl.err != io.EOF || cl.c.ctr.idleTimeouts.Load() != 0 {
			t.Errorf("ended call: err %v, idle timeouts %d", cl.err, cl.c.ctr.idleTimeouts.Load())
		}
	})
}

// TestIdleTimeout: a target that takes requests and never answers. Each
// request ends with KindIdleTimeout after its model's idle timeout and is
// cancelled upstream in-band; a model with a longer override keeps
// running meanwhile.
func TestIdleTimeout(t *testing.T) {
	se := &silentEngine{received: make(chan string, 100)}
	addr := serveFake(t, se)
	c := newTestClient(t, []string{addr}, &Options{HealthInterval: -1,
		IdleTimeout: 100 * time.Millisecond, ModelIdleTimeouts: map[string]time.Duration{"slow": time.Hour}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	slowReq := repeatN(0, 1, 0)
	slowReq.ModelName = "slow"
	slow, err := c.Start(ctx, slowReq)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := c.Start(ctx, repeatN(0, 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	_, err = readAll(ctx, cl)
	e := wantKind(t, err, KindIdleTimeout)
	if e.Code != codes.DeadlineExceeded || e.Message != "the target sent nothing for 100ms" {
		t.Errorf("error %+v", e)
	}
	select {
	case <-slow.Done():
		t.Fatal("the call with a one-hour idle timeout ended")
	default:
	}
	var ids []string
	for range 3 { // both requests and the cancel of the one that timed out
		ids = append(ids, <-se.received)
	}
	want := []string{cl.ID(), cl.ID(), slow.ID()}
	slices.Sort(ids)
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("the target received %v; want both requests and the cancel of %s", ids, cl.ID())
	}
	if s := c.Stats(); s.IdleTimeouts != 1 || s.CancelsInband != 1 || s.InFlight != 1 {
		t.Errorf("stats %+v", s)
	}
}

// TestDownTarget stops the only engine: once a health check has failed,
// requests are refused at once instead of waiting for a dead target, and
// its metadata, model list and configs are still answered from the last
// answers. A new engine on the address is used again.
func TestDownTarget(t *testing.T) {
	e := startEngine(t, "")
	c := newTestClient(t, []string{e.addr}, &Options{HealthInterval: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type answers struct {
		server *pb.ServerMetadataResponse
		model  *pb.ModelMetadataResponse
		config *pb.ModelConfig
		index  []*pb.RepositoryIndexResponse_ModelIndex
	}
	ask := func() (a answers, err error) {
		var errs [4]error
		a.server, errs[0] = c.ServerMetadata(ctx)
		a.model, errs[1] = c.ModelMetadata(ctx, "repeat_int32", "")
		a.config, errs[2] = c.ModelConfig(ctx, "repeat_int32", "")
		a.index, errs[3] = c.RepositoryIndex(ctx)
		return a, errors.Join(errs[:]...)
	}
	before, err := ask()
	if err != nil {
		t.Fatal(err)
	}
	e.stop()
	waitFor(t, "two health checks without an answer", func() bool { return c.targetList()[0].down.Load() })
	_, err = c.Start(ctx, repeatN(0, 1, 0))
	if err != errNoHealthy {
		t.Fatalf("Start on a down target: %v", err)
	}
	after, err := ask()
	if err != nil {
		t.Fatalf("metadata of a down target: %v", err)
	}
	if after.server != before.server || after.model != before.model || after.config != before.config ||
		len(after.index) == 0 || &after.index[0] != &before.index[0] {
		t.Error("a down target's metadata is not its last answer")
	}
	if _, err := c.ModelMetadata(ctx, "square_int32", ""); status.Code(err) != codes.Unavailable {
		t.Errorf("metadata never fetched, of a down target: %v", err)
	}

	startEngine(t, e.addr)
	waitFor(t, "re-admission", func() bool { return !c.targetList()[0].down.Load() })
	cl, err := c.Start(ctx, repeatN(5, 2, 0))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := readAll(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	checkRepeat(t, rs, 5, 2)
}

// hangingEngine answers metadata like an engine until hang is set; then
// every call waits for its deadline. ServerReady answers notReady's
// opposite.
type hangingEngine struct {
	pb.UnimplementedGRPCInferenceServiceServer
	hang     atomic.Bool
	notReady atomic.Bool
}

func (h *hangingEngine) ServerReady(ctx context.Context, _ *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	if err := h.wait(ctx); err != nil {
		return nil, err
	}
	return &pb.ServerReadyResponse{Ready: !h.notReady.Load()}, nil
}

func (h *hangingEngine) ModelConfig(ctx context.Context, r *pb.ModelConfigRequest) (*pb.ModelConfigResponse, error) {
	if err := h.wait(ctx); err != nil {
		return nil, err
	}
	return &pb.ModelConfigResponse{Config: &pb.ModelConfig{Name: r.GetName()}}, nil
}

func (h *hangingEngine) wait(ctx context.Context) error {
	if h.hang.Load() {
		<-ctx.Done()
		return status.FromContextError(ctx.Err()).Err()
	}
	return nil
}

func (h *hangingEngine) ModelMetadata(ctx context.Context, r *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	if err := h.wait(ctx); err != nil {
		return nil, err
	}
	return &pb.ModelMetadataResponse{Name: r.GetName()}, nil
}

func (h *hangingEngine) RepositoryIndex(ctx context.Context, _ *pb.RepositoryIndexRequest) (*pb.RepositoryIndexResponse, error) {
	if err := h.wait(ctx); err != nil {
		return nil, err
	}
	return &pb.RepositoryIndexResponse{Models: []*pb.RepositoryIndexResponse_ModelIndex{{Name: "m", State: "READY"}}}, nil
}

// TestMetadataTimeout: a target that stops answering (still connected,
// health checks off). Metadata calls end after MetadataTimeout, with the
// last answer where there is one.
func TestMetadataTimeout(t *testing.T) {
	he := &hangingEngine{}
	addr := serveFake(t, he)
	c := newTestClient(t, []string{addr}, &Options{HealthInterval: -1, MetadataTTL: -1, MetadataTimeout: 50 * time.Millisecond})
	ctx := context.Background() // no deadline: only MetadataTimeout can end the calls
	md, err := c.ModelMetadata(ctx, "m", "")
	if err != nil {
		t.Fatal(err)
	}
	index, err := c.RepositoryIndex(ctx)
	if err != nil {
		t.Fatal(err)
	}
	he.hang.Store(true)
	if got, err := c.ModelMetadata(ctx, "m", ""); got != md || err != nil {
		t.Errorf("ModelMetadata of a hung target = %v, %v; want the last answer", got, err)
	}
	if got, err := c.RepositoryIndex(ctx); err != nil || len(got) != 1 || got[0] != index[0] {
		t.Errorf("RepositoryIndex of a hung target = %v, %v; want the last answer", got, err)
	}
	if _, err := c.ModelMetadata(ctx, "other", ""); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("ModelMetadata never answered before = %v, want DeadlineExceeded", err)
	}
	he.hang.Store(false)
	if got, err := c.ModelMetadata(ctx, "m", ""); err != nil || got == md {
		t.Errorf("after the target recovered: %v, %v; want a new answer", got, err)
	}
}

// TestMetadataOfSilentTarget: a hung target is ejected by its first
// missed health check, one check before it is down. From then on a
// lookup with nothing cached fails at once with KindUnavailable (the
// gateway's 503) instead of waiting MetadataTimeout for a target that
// answers nothing; what is cached is still served. An ejected target
// that answers (not ready) is still asked.
func TestMetadataOfSilentTarget(t *testing.T) {
	he := &hangingEngine{}
	addr := serveFake(t, he)
	// Health checks run only when the test calls check; a lookup that
	// asked the hung target would wait 10s and fail.
	c := newTestClient(t, []string{addr}, &Options{HealthInterval: -1, HealthTimeout: time.Second, MetadataTimeout: 10 * time.Second})
	ctx := context.Background()
	md, err := c.ModelMetadata(ctx, "m", "")
	if err != nil {
		t.Fatal(err)
	}
	tg := c.targetList()[0]

	he.hang.Store(true)
	tg.check(ctx) // no answer within HealthTimeout (≥ downSilence)
	if tg.healthy.Load() || tg.down.Load() {
		t.Fatalf("after one missed check: healthy %v, down %v; want ejected, not down", tg.healthy.Load(), tg.down.Load())
	}
	if got, err := c.ModelMetadata(ctx, "m", ""); got != md || err != nil {
		t.Errorf("cached ModelMetadata of an ejected silent target = %v, %v; want the last answer", got, err)
	}
	if _, err := c.ModelMetadata(ctx, "other", ""); !errors.Is(err, errNoHealthy) {
		t.Errorf("ModelMetadata never asked, of an ejected silent target = %v; want KindUnavailable at once", err)
	}
	if _, err := c.ModelConfig(ctx, "other", ""); status.Code(err) != codes.Unavailable {
		t.Errorf("ModelConfig never asked, of an ejected silent target = %v; want Unavailable at once", err)
	}
	if cl, err := c.Start(ctx, &pb.ModelInferRequest{ModelName: "other"}); !errors.Is(err, errNoHealthy) {
		if cl != nil {
			cl.Cancel()
		}
		t.Errorf("Start for a model never asked, on an ejected silent target = %v; want KindUnavailable at once", err)
	}

	// It answers again, "not ready": ejected, but asked.
	he.hang.Store(false)
	he.notReady.Store(true)
	tg.check(ctx)
	if tg.healthy.Load() {
		t.Fatal("a target answering not ready is still healthy")
	}
	if got, err := c.ModelMetadata(ctx, "other", ""); err != nil || got.GetName() != "other" {
		t.Errorf("ModelMetadata of an ejected target that answers = %v, %v; want its answer", got, err)
	}
}

// freezer is a TCP proxy to one address that can stop passing bytes
// without closing anything, as a stopped (SIGSTOP) or partitioned peer
// does.
type freezer struct {
	lis    net.Listener
	to     string
	frozen chan struct{} // closed by freeze
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

func newFreezer(t *testing.T, to string) *freezer {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{lis: lis, to: to, frozen: make(chan struct{})}
	f.wg.Go(f.accept)
	t.Cleanup(f.close)
	return f
}

func (f *freezer) addr() string { return f.lis.Addr().String() }
func (f *freezer) freeze()      { close(f.frozen) }

func (f *freezer) accept() {
	for {
		in, err := f.lis.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", f.to)
		if err != nil {
			in.Close()
			continue
		}
		f.mu.Lock()
		f.conns = append(f.conns, in, out)
		f.mu.Unlock()
		f.wg.Go(func() { f.pipe(out, in) })
		f.wg.Go(func() { f.pipe(in, out) })
	}
}

// pipe copies src to dst until either closes, or until the freeze; then
// it reads on, dropping what it reads.
func (f *freezer) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		select {
		case <-f.frozen:
			continue
		default:
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

func (f *freezer) close() {
	f.lis.Close()
	f.mu.Lock()
	for _, c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// TestSilentPeer freezes the connection to the engine in the middle of a
// request, with the idle timeout off: keepalive finds the silent peer
// (KeepaliveTime, default 10s with health checks, plus KeepaliveTimeout)
// and the request ends with KindUnavailable instead of hanging.
func TestSilentPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for keepalive, about 11s")
	}
	t.Parallel()
	e := startEngine(t, "")
	f := newFreezer(t, e.addr)
	c := newTestClient(t, []string{f.addr()}, &Options{HealthInterval: 100 * time.Millisecond, HealthTimeout: 100 * time.Millisecond,
		IdleTimeout: -1, KeepaliveTimeout: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := c.Start(ctx, repeatDelays(0, []uint32{0, 60_000}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Recv(ctx); err != nil {
		t.Fatal(err)
	}
	f.freeze()
	_, err = readAll(ctx, cl)
	wantKind(t, err, KindUnavailable)
	if !c.targetList()[0].down.Load() {
		t.Error("the silent target is not down")
	}
}

// busyEngine answers every streamed request with responses every 2 ms
// until quiet is closed, and ServerReady at once until hang is set, then
// never in time: a server too busy to answer its health checks while its
// streams deliver.
type busyEngine struct {
	silentEngine
	hang  atomic.Bool
	quiet chan struct{}
}

func (b *busyEngine) ServerReady(ctx context.Context, _ *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	if b.hang.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &pb.ServerReadyResponse{Ready: true}, nil
}

func (b *busyEngine) ModelStreamInfer(stream pb.GRPCInferenceService_ModelStreamInferServer) error {
	r, err := stream.Recv()
	if err != nil {
		return err
	}
	tk := time.NewTicker(2 * time.Millisecond)
	defer tk.Stop()
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case <-b.quiet:
			<-stream.Context().Done()
			return nil
		case <-tk.C:
		}
		resp := &pb.ModelInferResponse{Id: r.GetId(), ModelName: r.GetModelName(),
			Parameters: map[string]*pb.InferParameter{"triton_final_response": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: false}}}}
		if err := stream.Send(&pb.ModelStreamInferResponse{InferResponse: resp}); err != nil {
			return err
		}
	}
}

// TestBusyTargetNotDown: health checks that time out while the target's
// streams deliver responses leave it up (new requests are placed); once
// its streams fall silent too, the same checks take it down.
func TestBusyTargetNotDown(t *testing.T) {
	b := &busyEngine{quiet: make(chan struct{})}
	addr := serveFake(t, b)
	c := newTestClient(t, []string{addr}, &Options{HealthInterval: 100 * time.Millisecond, HealthTimeout: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := c.Start(ctx, repeatN(0, 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		for {
			if _, err := cl.Recv(ctx); err != nil {
				read <- err
				return
			}
		}
	}()
	tg := c.targetList()[0]
	b.hang.Store(true)
	// More checks in a row than down needs, and longer than its silence.
	e0, t0 := tg.epoch.Load(), time.Now()
	waitFor(t, "checks past down's threshold", func() bool {
		if tg.down.Load() {
			t.Fatal("a target whose streams deliver was taken down for slow health checks")
		}
		return tg.epoch.Load() >= e0+downAfter+2 && time.Since(t0) > 2*downSilence
	})
	cl2, err := c.Start(ctx, repeatN(0, 1, 0))
	if err != nil {
		t.Fatalf("Start on a busy target: %v", err)
	}
	cl2.Cancel()

	close(b.quiet)
	waitFor(t, "down once its streams are silent too", tg.down.Load)
	cl.Cancel()
	if err := <-read; err == nil {
		t.Fatal("the call ended without an error")
	}
}
