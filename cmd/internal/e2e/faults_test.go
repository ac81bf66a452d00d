package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/streamgate/streamgate/cmd/internal/procstat"
	"github.com/streamgate/streamgate/engine/llama2"
	"github.com/streamgate/streamgate/gateway/ws"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// The fault-injection suite: `streamgate engine` and `streamgate gateway`
// built and run as processes, the engine stopped (SIGSTOP) and resumed
// under load, a request that would wedge a model, a prompt far over the
// model's context, and clients trickling their bodies. Every fault must
// end in the documented error, never in a hang.

// TestFaults builds streamgate once and runs each fault against processes
// of its own.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("builds streamgate and runs it as processes")
	}
	bin := buildStreamgate(t)
	t.Run("engine stopped and resumed", func(t *testing.T) { testEngineStopped(t, bin) })
	t.Run("wait wedge", func(t *testing.T) { testWaitWedge(t, bin) })
	t.Run("huge prompt", func(t *testing.T) { testHugePrompt(t, bin) })
	t.Run("slow bodies", func(t *testing.T) {
		_, gw := startPair(t, bin, "", "--body-timeout", "1s")
		slowBodies(t, gw.url, gw.addr, 200)
	})
}

// buildStreamgate builds cmd/streamgate into the test's temporary
// directory.
func buildStreamgate(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "streamgate")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/streamgate")
	cmd.Dir = moduleRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// sgProcess is one streamgate process of a test.
type sgProcess struct {
	*process
	addr string // gRPC (engine) or HTTP (gateway) address
	url  string // http://addr for a gateway
}

func (p *sgProcess) pid() int { return p.cmd.Process.Pid }

// startStreamgate runs `streamgate args...` in an empty directory, with
// an empty model cache and modelDir (may be "") as its model directory,
// so that it serves only what the test gives it.
func startStreamgate(t *testing.T, bin, name, modelDir string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = t.TempDir()
	for _, kv := range os.Environ() {
		// The upstream transport passes: the suite runs over either.
		if !strings.HasPrefix(kv, "STREAMGATE_") || strings.HasPrefix(kv, "STREAMGATE_UPSTREAM_TRANSPORT=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "XDG_CACHE_HOME="+t.TempDir(), "STREAMGATE_MODEL_DIR="+modelDir)
	return startProcess(t, name, cmd, syscall.SIGTERM)
}

// startPair starts an engine (serving the built-in models, and the
// llama2.c models in modelDir if not "") and a gateway in front of it with
// gatewayArgs, and waits until the gateway is ready.
func startPair(t *testing.T, bin, modelDir string, gatewayArgs ...string) (eng, gw *sgProcess) {
	t.Helper()
	eng = startEngineProc(t, bin, modelDir)
	return eng, startGatewayProc(t, bin, eng.addr, gatewayArgs...)
}

// startEngineProc starts an engine and waits until it answers
// ServerReady. A gateway's /readyz only says that one of its targets is
// ready: a test that needs every engine serving waits for each.
func startEngineProc(t *testing.T, bin, modelDir string) *sgProcess {
	t.Helper()
	addr := freeAddr(t)
	p := &sgProcess{process: startStreamgate(t, bin, "engine", modelDir, "engine", "--grpc", addr), addr: addr}
	p.waitEngineReady(t)
	return p
}

// waitEngineReady waits until p, an engine, answers ServerReady with
// true, failing the test if p exits first.
func (p *sgProcess) waitEngineReady(t *testing.T) {
	t.Helper()
	// Redial soon after a refusal: the engine may take a while to listen.
	redial := grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: time.Second}
	redial.Backoff.BaseDelay, redial.Backoff.MaxDelay = 10*time.Millisecond, 100*time.Millisecond
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithConnectParams(redial))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rpc := pb.NewGRPCInferenceServiceClient(conn)
	waitFor(t, p.name+" to be ready", func() bool {
		if p.exited() {
			t.Fatalf("%s exited:\n%s", p.name, tail(p.out.String(), 4<<10))
		}
		// Each try waits for the connection a while, not for ever:
		// the engine may have exited meanwhile.
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		r, err := rpc.ServerReady(ctx, &pb.ServerReadyRequest{}, grpc.WaitForReady(true))
		return err == nil && r.GetReady()
	})
}

func startGatewayProc(t *testing.T, bin, upstream string, args ...string) *sgProcess {
	t.Helper()
	addr := freeAddr(t)
	p := &sgProcess{addr: addr, url: "http://" + addr}
	p.process = startStreamgate(t, bin, "gateway", "", append([]string{"gateway", "--http", addr, "--upstream", upstream}, args...)...)
	p.waitReady(t)
	return p
}

// waitReady waits until p, a gateway, answers /readyz with 200, failing
// the test if p exits first.
func (p *sgProcess) waitReady(t *testing.T) {
	t.Helper()
	c := httpClient(t)
	waitFor(t, p.name+" to be ready", func() bool {
		if p.exited() {
			t.Fatalf("%s exited:\n%s", p.name, tail(p.out.String(), 4<<10))
		}
		resp, err := c.Get(p.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// stop sends SIGSTOP to p and waits until every thread of it has
// stopped; the test's end sends SIGCONT first, so that p can stop
// gracefully.
func (p *sgProcess) stop(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(p.pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(p.pid(), syscall.SIGCONT) })
	waitFor(t, "the engine to stop", func() bool {
		stopped, err := procstat.Stopped(p.pid())
		if err != nil {
			t.Fatal(err)
		}
		return stopped
	})
}

func (p *sgProcess) resume(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(p.pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// reply is a response read to its end.
type reply struct {
	status int
	header http.Header
	body   string
}

// request makes one request with a JSON body ("" for none) and reads
// the reply (keyRequest without a key).
func request(t *testing.T, c *http.Client, method, url, body string) reply {
	t.Helper()
	return keyRequest(t, c, "", method, url, body)
}

// progressing is a repeat_int32 body that answers every 100ms for 30s:
// a request that is never idle while its engine runs.
var progressing = func() string {
	in, delay := make([]string, 300), make([]string, 300)
	for i := range in {
		in[i], delay[i] = strconv.Itoa(i), "100"
	}
	delay[0] = "0"
	return `{"IN":[` + strings.Join(in, ",") + `],"DELAY":[` + strings.Join(delay, ",") + `],"WAIT":0}`
}()

// testEngineStopped stops the engine (SIGSTOP) under SSE, WebSocket and
// unary load, then resumes it (SIGCONT). Two gateways are in front of it:
// A, without health checks, so that every request reaches the stopped
// engine and must end by the idle timeout (2s here) with code
// upstream_timeout, whether it had started or not; and B, with health
// checks, which must refuse new requests at once (503 + Retry-After) once
// it finds the engine silent, while still answering model metadata and
// the model list from the last answers. Both recover after SIGCONT.
func testEngineStopped(t *testing.T, bin string) {
	eng := startEngineProc(t, bin, "")
	a := startGatewayProc(t, bin, eng.addr, "--health-interval", "-1s", "--upstream-idle-timeout", "2s")
	// B's checks have the default deadline: a shorter one can find a
	// running engine silent on a loaded machine, before the stop.
	b := startGatewayProc(t, bin, eng.addr, "--health-interval", "1s")
	c := httpClient(t)
	const idleMsg = "upstream timeout: the target sent nothing for 2s"

	// Warm up: both gateways have the metadata they need cached.
	oneRepeat := `{"IN":[7],"DELAY":[0],"WAIT":0}`
	chat := `{"model":"echo","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for _, g := range []*sgProcess{a, b} {
		if got := request(t, c, "POST", g.url+"/v2/models/repeat_int32/generate", oneRepeat); got.status != 200 {
			t.Fatalf("warm-up generate: %+v", got)
		}
		if got := request(t, c, "POST", g.url+"/v1/chat/completions", chat); got.status != 200 {
			t.Fatalf("warm-up chat: %+v", got)
		}
	}
	models := request(t, c, "GET", b.url+"/v1/models", "")
	metadata := request(t, c, "GET", b.url+"/v2/models/repeat_int32", "")
	if models.status != 200 || metadata.status != 200 {
		t.Fatalf("warm-up metadata: %+v %+v", models, metadata)
	}

	// In flight on A: six event streams and four WebSocket requests, each
	// past its first response.
	var streams []*sseReader
	for range 6 {
		resp := post(t, t.Context(), c, a.url+"/v2/models/repeat_int32/generate_stream", progressing)
		t.Cleanup(func() { resp.Body.Close() })
		r := newSSEReader(resp.Body)
		if ev, err := r.next(); resp.StatusCode != 200 || err != nil {
			t.Fatalf("stream: %d %+v %v", resp.StatusCode, ev, err)
		}
		streams = append(streams, r)
	}
	sock, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(a.url, "http")+"/v1/ws",
		&websocket.DialOptions{Subprotocols: []string{ws.Subprotocol}, HTTPClient: c})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.CloseNow()
	for i := range 4 {
		wsSend(t, sock, fmt.Sprintf(`{"type":"generate","id":"s%d","model":"repeat_int32","body":%s}`, i, progressing))
	}
	frames := map[string][]wsFrame{}
	for started := 0; started < 4; {
		f, raw, err := wsRead(t, sock)
		if err != nil {
			t.Fatalf("%s %v", raw, err)
		}
		if len(frames[f.ID]) == 0 {
			started++
		}
		frames[f.ID] = append(frames[f.ID], f)
	}

	eng.stop(t)
	stopped := time.Now()

	// What was in flight ends in band: the streams' last event, the
	// requests' error frames.
	var wg sync.WaitGroup
	for i, r := range streams {
		wg.Go(func() {
			var last sseEvent
			n := 0
			for {
				ev, err := r.next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Errorf("stream %d: %v", i, err)
					return
				}
				last = ev
				n++
			}
			if last.Data != `{"error":"`+idleMsg+`"}` {
				t.Errorf("stream %d ended after %d more events with %q", i, n, last.Data)
			}
			t.Logf("stream %d: ended %v after the stop", i, time.Since(stopped).Round(time.Millisecond))
		})
	}
	// New requests reach the stopped engine and end the same way: before
	// their response started, with 504.
	for range 3 {
		wg.Go(func() {
			got := request(t, c, "POST", a.url+"/v2/models/repeat_int32/generate_stream", oneRepeat)
			if got.status != 504 || got.body != "id: 1\ndata: {\"error\":\""+idleMsg+"\"}\n\n" {
				t.Errorf("new stream: %d %q", got.status, got.body)
			}
		})
		wg.Go(func() {
			got := request(t, c, "POST", a.url+"/v2/models/repeat_int32/generate", oneRepeat)
			if got.status != 504 || got.body != `{"error":"`+idleMsg+`"}` {
				t.Errorf("new generate: %d %q", got.status, got.body)
			}
		})
	}
	wg.Go(func() {
		got := request(t, c, "POST", a.url+"/v1/chat/completions", chat)
		want := `{"error":{"message":"` + idleMsg + `","type":"server_error","param":null,"code":"upstream_timeout"}}`
		if got.status != 504 || got.body != want {
			t.Errorf("new chat: %d %q", got.status, got.body)
		}
	})
	for i := range 2 {
		wsSend(t, sock, fmt.Sprintf(`{"type":"generate","id":"n%d","model":"repeat_int32","body":%s}`, i, oneRepeat))
	}
	for ended := 0; ended < 6; {
		f, raw, err := wsRead(t, sock)
		if err != nil {
			t.Fatalf("%s %v", raw, err)
		}
		if f.Type == "data" {
			continue
		}
		ended++
		if f.Type != "error" || f.Error.Code != "upstream_timeout" || f.Error.Message != idleMsg {
			t.Errorf("WebSocket request %s ended with %s", f.ID, raw)
		}
	}
	wg.Wait()
	if got := metric(t, c, a.url, "streamgate_upstream_idle_timeouts_total"); got != 6+4+3+3+1+2 {
		t.Errorf("A counted %v idle timeouts, want 19", got)
	}
	if got := metric(t, c, a.url, `streamgate_gateway_upstream_errors_total{kind="upstream_timeout"}`); got != 6+4+3+3+1+2 {
		t.Errorf("A counted %v upstream_timeout errors, want 19", got)
	}

	// B finds the engine silent, then refuses at once, without placing
	// anything upstream.
	down := `streamgate_upstream_target_down{target="` + eng.addr + `"}`
	waitFor(t, "B to find the engine silent", func() bool { return metric(t, c, b.url, down) == 1 })
	placed := metric(t, c, b.url, "streamgate_upstream_requests_total")
	var took []time.Duration
	for range 20 {
		t0 := time.Now()
		got := request(t, c, "POST", b.url+"/v2/models/repeat_int32/generate_stream", oneRepeat)
		took = append(took, time.Since(t0))
		if got.status != 503 || got.header.Get("Retry-After") != "1" || got.body != `{"error":"upstream unavailable"}` {
			t.Fatalf("B while the engine is stopped: %+v", got)
		}
	}
	slices.Sort(took)
	t.Logf("B refused 20 requests in %v median, %v max", took[10], took[19])
	if got := metric(t, c, b.url, "streamgate_upstream_requests_total"); got != placed {
		t.Errorf("B placed %v requests on a silent engine", got-placed)
	}
	if got := request(t, c, "GET", b.url+"/v1/models", ""); got.status != 200 || got.body != models.body {
		t.Errorf("B's model list while the engine is stopped: %+v", got)
	}
	if got := request(t, c, "GET", b.url+"/v2/models/repeat_int32", ""); got.status != 200 || got.body != metadata.body {
		t.Errorf("B's model metadata while the engine is stopped: %+v", got)
	}

	// Both recover once the engine runs again.
	eng.resume(t)
	for _, g := range []*sgProcess{a, b} {
		waitFor(t, "a request through "+g.url+" to succeed", func() bool {
			return request(t, c, "POST", g.url+"/v2/models/repeat_int32/generate", oneRepeat).status == 200
		})
		got := request(t, c, "POST", g.url+"/v2/models/repeat_int32/generate_stream", `{"IN":[1,2,3],"DELAY":[0,0,0],"WAIT":0}`)
		if got.status != 200 || len(events(t, got.body)) != 3 {
			t.Errorf("stream after the engine resumed: %+v", got)
		}
	}
	wsSend(t, sock, `{"type":"generate","id":"after","model":"repeat_int32","body":`+oneRepeat+`}`)
	for {
		f, raw, err := wsRead(t, sock)
		if err != nil || f.Type == "error" {
			t.Fatalf("WebSocket after the engine resumed: %s %v", raw, err)
		}
		if f.ID == "after" && f.Type == "done" {
			break
		}
	}
	sock.Close(websocket.StatusNormalClosure, "")
}

// testWaitWedge: one request asking repeat_int32 to hold its only
// instance for 49.7 days is refused; one holding it for a minute, whose
// client leaves, releases it at once, so the next client's request (with
// a queue timeout of 10s) is served.
func testWaitWedge(t *testing.T, bin string) {
	_, gw := startPair(t, bin, "")
	c := httpClient(t)
	got := request(t, c, "POST", gw.url+"/v2/models/repeat_int32/generate_stream", `{"IN":[1],"DELAY":[0],"WAIT":4294967295}`)
	if got.status != 400 || got.body != "id: 1\ndata: {\"error\":\"WAIT must be at most 60000 ms, got 4294967295\"}\n\n" {
		t.Errorf("WAIT of 49.7 days: %d %q", got.status, got.body)
	}
	ctx, leave := context.WithCancel(t.Context())
	resp := post(t, ctx, c, gw.url+"/v2/models/repeat_int32/generate_stream", `{"IN":[1,2],"DELAY":[0,60000],"WAIT":60000}`)
	if ev, err := newSSEReader(resp.Body).next(); resp.StatusCode != 200 || err != nil {
		t.Fatalf("holding request: %d %+v %v", resp.StatusCode, ev, err)
	}
	leave()
	resp.Body.Close()
	got = request(t, c, "POST", gw.url+"/v2/models/repeat_int32/generate", `{"IN":[5],"DELAY":[0],"WAIT":0,"timeout":10000000}`)
	if got.status != 200 || got.body != `{"model_name":"repeat_int32","model_version":"1","OUT":5,"IDX":0}` {
		t.Errorf("the next client, after the holder left: %d %s", got.status, got.body)
	}
	if got := request(t, c, "GET", gw.url+"/v2/models/repeat_int32/ready", ""); got.status != 200 {
		t.Errorf("repeat_int32 not ready: %d", got.status)
	}
}

// storiesDir is the absolute directory of the stories260K weights, for
// an engine process; without them the test skips (fails with
// STREAMGATE_REQUIRE=1).
func storiesDir(t *testing.T) string {
	t.Helper()
	dir, looked := llama2.FindModelDir(filepath.Join(moduleRoot(t), "..", "shared", "models"))
	if dir == "" {
		if os.Getenv("STREAMGATE_REQUIRE") == "1" {
			t.Fatalf("stories260K weights not found in %v and STREAMGATE_REQUIRE=1", looked)
		}
		t.Skipf("stories260K weights not found in %v", looked)
	}
	dir, _ = filepath.Abs(dir)
	return dir
}

// testHugePrompt sends stories260k a prompt of 1 MB, far over what its
// context holds: it is refused at once with the reason, other clients are
// served meanwhile, and the engine spends next to no CPU on it. A client
// that leaves a generation leaves the engine idle: its CPU time stops
// growing.
func testHugePrompt(t *testing.T, bin string) {
	eng, gw := startPair(t, bin, storiesDir(t))
	c := httpClient(t)
	small := `{"model":"stories260k","prompt":"Once upon a time","max_tokens":8,"stream":true}`
	if got := request(t, c, "POST", gw.url+"/v1/completions", small); got.status != 200 {
		t.Fatalf("warm-up: %+v", got)
	}

	cpu0, err := procstat.CPU(eng.pid())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		huge := `{"model":"stories260k","prompt":"` + strings.Repeat("a ", 500_000) + `","max_tokens":16,"stream":true}`
		got := request(t, c, "POST", gw.url+"/v1/completions", huge)
		if got.status != 400 || !strings.Contains(got.body, `"message":"llama2: prompt is 1000000 bytes, longer than the model's context`) {
			t.Errorf("1 MB prompt: %d %.300s", got.status, got.body)
		}
	})
	var mu sync.Mutex
	var took []time.Duration
	for range 8 {
		wg.Go(func() {
			t0 := time.Now()
			got := request(t, c, "POST", gw.url+"/v1/completions", small)
			mu.Lock()
			took = append(took, time.Since(t0))
			mu.Unlock()
			if got.status != 200 || !strings.HasSuffix(got.body, "data: [DONE]\n\n") {
				t.Errorf("another client beside the 1 MB prompt: %d %.200s", got.status, got.body)
			}
		})
	}
	wg.Wait()
	slices.Sort(took)
	cpu1, _ := procstat.CPU(eng.pid())
	t.Logf("beside the 1 MB prompt, 8 other clients were answered in %v at most; the engine used %.2fs of CPU for all 9", took[len(took)-1], cpu1-cpu0)
	if cpu1-cpu0 > 1 {
		t.Errorf("the engine used %.2fs of CPU on the 1 MB prompt and 8 small requests", cpu1-cpu0)
	}

	// A client that leaves mid-generation: the engine stops working.
	ctx, leave := context.WithCancel(t.Context())
	resp := post(t, ctx, c, gw.url+"/v1/completions", `{"model":"stories260k","prompt":"`+strings.Repeat("Once upon a time ", 40)+`","max_tokens":4000,"stream":true}`)
	if ev, err := newSSEReader(resp.Body).next(); resp.StatusCode != 200 || err != nil {
		t.Fatalf("long generation: %d %+v %v", resp.StatusCode, ev, err)
	}
	leave()
	resp.Body.Close()
	waitFor(t, "the request to end", func() bool {
		return metric(t, c, gw.url, `streamgate_gateway_active_requests{protocol="sse"}`) == 0
	})
	idle := cpuRate(t, eng.pid(), time.Second)
	t.Logf("after the client left, the engine used %.3f CPU seconds per second", idle)
	if idle > 0.2 {
		t.Errorf("the engine kept working after its client left: %.2f CPU seconds per second", idle)
	}
}

// cpuRate is pid's CPU time per second over a window of d.
func cpuRate(t *testing.T, pid int, d time.Duration) float64 {
	t.Helper()
	c0, err := procstat.CPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	time.Sleep(d) // the measurement window
	c1, err := procstat.CPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	return (c1 - c0) / time.Since(t0).Seconds()
}

// slowBodies opens n connections to the gateway at addr (base url) that
// send their bodies a byte every 50ms: each must get 408 in its route's
// error shape and be closed.
func slowBodies(t *testing.T, url, addr string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(2 * time.Minute)) // the test's own bound, never reached
			path, want := "/v2/models/repeat_int32/generate", `{"error":"the request body arrived too slowly"}`
			if i%2 == 1 {
				path = "/v1/completions"
				want = `{"error":{"message":"the request body arrived too slowly","type":"invalid_request_error","param":null,"code":"request_timeout"}}`
			}
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", path)
			stop := make(chan struct{})
			var trickle sync.WaitGroup
			trickle.Go(func() {
				tk := time.NewTicker(50 * time.Millisecond)
				defer tk.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tk.C:
						if _, err := c.Write([]byte(" ")); err != nil {
							return
						}
					}
				}
			})
			defer func() {
				close(stop)
				trickle.Wait()
			}()
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Errorf("%s: %v", path, err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusRequestTimeout || !resp.Close || string(body) != want {
				t.Errorf("%s: %d close=%v %s", path, resp.StatusCode, resp.Close, body)
			}
			// The server closes the connection (a reset when bytes it did
			// not read were still coming).
			if _, err := c.Read(make([]byte, 1)); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("%s: the connection stayed open: %v", path, err)
			}
		})
	}
	wg.Wait()
	c := httpClient(t)
	for _, route := range []string{"/v2/models/{model}/generate", "/v1/completions"} {
		if got := metric(t, c, url, `streamgate_gateway_http_requests_total{code="408",route="`+route+`"}`); got != float64(n/2) {
			t.Errorf("%s: %v 408s counted, want %d", route, got, n/2)
		}
	}
}
