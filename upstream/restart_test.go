package upstream

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// streamgateDir holds the binary buildStreamgate built; TestMain removes it.
var streamgateDir string

func removeStreamgate() {
	if streamgateDir != "" {
		os.RemoveAll(streamgateDir)
	}
}

// buildStreamgate builds cmd/streamgate once per test binary run.
var buildStreamgate = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "upstream-test-")
	if err != nil {
		return "", err
	}
	streamgateDir = dir
	bin := filepath.Join(dir, "streamgate")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/streamgate/streamgate/cmd/streamgate").CombinedOutput()
	if err != nil {
		return "", &buildError{string(out), err}
	}
	return bin, nil
})

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

// engineProcess runs `streamgate engine --grpc addr`; kill ends it with
// SIGKILL.
type engineProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startEngineProcess(t *testing.T, bin, addr string) *engineProcess {
	t.Helper()
	cmd := exec.Command(bin, "engine", "--grpc", addr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &engineProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		cmd.Wait()
	}()
	t.Cleanup(p.kill)
	return p
}

func (p *engineProcess) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// TestEngineProcessKilled kills the engine process (SIGKILL) in the middle
// of streams and restarts it on the same port. Every affected call must end
// within a second, with its data or an error, and new calls must succeed
// once the engine is back.
func TestEngineProcessKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the streamgate binary")
	}
	bin, err := buildStreamgate()
	if err != nil {
		t.Fatalf("cannot build cmd/streamgate: %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()

	p := startEngineProcess(t, bin, addr)
	c := newTestClient(t, []string{addr}, &Options{HealthInterval: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitReady := func() {
		waitFor(t, "engine ready", func() bool {
			ok, _ := c.ServerReady(ctxTimeout(t, 200*time.Millisecond))
			return ok
		})
	}
	waitReady()

	const n = 40
	calls := make([]*Call, n)
	for i := range calls {
		delays := []uint32{0, 2000, 10}
		if i%2 == 1 {
			delays = []uint32{2000, 10, 10} // nothing delivered before the kill
		}
		cl, err := c.Start(ctx, repeatDelays(int32(10*i), delays))
		if err != nil {
			t.Fatal(err)
		}
		calls[i] = cl
	}
	for i := 0; i < n; i += 2 {
		if _, err := calls[i].Recv(ctx); err != nil {
			t.Fatal(err)
		}
	}
	killed := time.Now()
	p.kill()

	var wg sync.WaitGroup
	var mu sync.Mutex
	var slowest time.Duration
	for i, cl := range calls {
		wg.Go(func() {
			_, err := readAll(ctx, cl)
			took := time.Since(killed)
			mu.Lock()
			slowest = max(slowest, took)
			mu.Unlock()
			if err == nil {
				t.Errorf("call %d completed although its engine was killed", i)
				return
			}
			// The broken connection ends every call: each ends unavailable,
			// long before any timer (keepalive, the test's deadline) could
			// have ended it. How long that takes is logged, not asserted:
			// it depends on the machine's load.
			wantKind(t, err, KindUnavailable)
		})
	}
	wg.Wait()
	t.Logf("all %d calls ended within %v of the kill; stats %+v", n, slowest, c.Stats())

	restarted := time.Now()
	startEngineProcess(t, bin, addr)
	for {
		cl, err := c.Start(ctx, repeatN(3, 2, 0))
		if err == nil {
			got, err2 := readAll(ctx, cl)
			if err2 == nil {
				checkRepeat(t, got, 3, 2)
				break
			}
			err = err2
		}
		if ctx.Err() != nil {
			t.Fatalf("no successful call after the restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("first successful call %v after the restart began", time.Since(restarted))
	for range 20 {
		cl, err := c.Start(ctx, repeatN(3, 2, 0))
		if err != nil {
			t.Fatal(err)
		}
		got, err := readAll(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		checkRepeat(t, got, 3, 2)
	}
}
