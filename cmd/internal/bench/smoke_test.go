package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamgate/streamgate/cmd/internal/procstat"
	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/engine/builtin"
	"github.com/streamgate/streamgate/engine/gguf"
	"github.com/streamgate/streamgate/engine/gguf/ggufmodel"
	"github.com/streamgate/streamgate/gateway"
)

// startEngine serves the built-in models on a loopback port.
func startEngine(t *testing.T) string {
	t.Helper()
	st, err := stack.Start(stack.Config{Engine: &engine.Options{Repository: builtin.FS, Backends: builtin.Backends()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.StopNow)
	return st.EngineAddr
}

// TestDirectSmoke runs the direct transport, per-request and shared
// streams, against an in-process engine. Each run is a number of
// requests in a window long enough for all of them, so that its counts do
// not depend on how fast a busy machine answers; how the window and the
// warm-up count is tested on a fake clock (TestClosedLoopWindow).
func TestDirectSmoke(t *testing.T) {
	addr := startEngine(t)
	for _, tc := range []struct {
		name    string
		wl      workload
		streams int
	}{
		{"repeat per-request streams", workload{Model: modelRepeat, Kind: modelRepeat, Responses: 5, Delay: time.Millisecond}, 0},
		{"repeat shared streams", workload{Model: modelRepeat, Kind: modelRepeat, Responses: 5, Delay: time.Millisecond}, 2},
		{"echo", workload{Model: modelEcho, Kind: modelEcho, Responses: 4}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := newDirect(addr, tc.wl, tc.streams)
			if err != nil {
				t.Fatal(err)
			}
			const n = 20
			var serial atomic.Int32
			r := run(context.Background(), runSpec{name: "direct", tr: tr, wl: tc.wl, conc: 4, requests: n,
				duration: time.Minute, serial: &serial})
			tr.close()
			if r.Responses != int64(n*tc.wl.Responses) || r.Requests != n || r.TTFT.N != n || len(r.Errors) != 0 {
				t.Fatalf("result: %d responses, %d requests, ttft n %d, errors %v %v", r.Responses, r.Requests, r.TTFT.N, r.Errors, r.ErrorSamples)
			}
			if r.Inter.N != n*(tc.wl.Responses-1) {
				t.Errorf("%d inter-response samples, want %d", r.Inter.N, n*(tc.wl.Responses-1))
			}
		})
	}
	t.Run("leave and request count", func(t *testing.T) {
		wl := workload{Model: modelRepeat, Kind: modelRepeat, Responses: 50, Delay: time.Millisecond}
		for _, streams := range []int{0, 2} {
			tr, err := newDirect(addr, wl, streams)
			if err != nil {
				t.Fatal(err)
			}
			var serial atomic.Int32
			r := run(context.Background(), runSpec{name: "direct", tr: tr, wl: wl, conc: 2, requests: 6, cancelAfter: 3,
				duration: 10 * time.Second, serial: &serial})
			tr.close()
			if r.Cancelled != 6 || r.Responses != 18 || len(r.Errors) != 0 {
				t.Errorf("streams %d: cancelled %d, responses %d, errors %v", streams, r.Cancelled, r.Responses, r.ErrorSamples)
			}
		}
	})
	t.Run("open loop", func(t *testing.T) {
		// 30 starts at 200/s, with a slot for each: "overload" cannot
		// happen however slowly a busy machine answers, and the window is
		// long enough for all of them to end in it. How the open loop
		// counts overload is tested on a fake clock in TestOpenLoop.
		const n = 30
		wl := workload{Model: modelRepeat, Kind: modelRepeat, Responses: 2}
		tr, err := newDirect(addr, wl, 0)
		if err != nil {
			t.Fatal(err)
		}
		var serial atomic.Int32
		r := run(context.Background(), runSpec{name: "direct", tr: tr, wl: wl, conc: n, rate: 200, requests: n,
			duration: 10 * time.Second, serial: &serial})
		tr.close()
		if r.Requests != n || r.Responses != 2*n || len(r.Errors) != 0 {
			t.Errorf("open loop: %d requests, %d responses, errors %v", r.Requests, r.Responses, r.ErrorSamples)
		}
	})
}

func TestUnreachableTarget(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
	var out, errOut bytes.Buffer
	err = Main(context.Background(), []string{"--http", addr, "--grpc", addr, "--transport", "sse,direct", "--c", "2",
		"--duration", "150ms", "--warmup", "0s", "--pause", "0s", "--json"}, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 || rep.Results[0].Errors["connect"] == 0 || rep.Results[1].Errors["grpc_unavailable"] == 0 {
		t.Errorf("errors: %v / %v", rep.Results[0].Errors, rep.Results[1].Errors)
	}
}

func TestPlan(t *testing.T) {
	names := func(runs []plannedRun) string {
		var s []string
		for _, r := range runs {
			s = append(s, r.transport+"/"+r.wl.Model)
		}
		return strings.Join(s, " ")
	}
	c := Config{Model: modelRepeat, Responses: 10, Transports: []string{"sse", "chat", "ws"}, Compare: true}
	runs, notes := c.plan()
	if got, want := names(runs), "direct/repeat_int32 sse/repeat_int32 ws/repeat_int32 direct/echo chat/echo"; got != want || len(notes) != 0 {
		t.Errorf("plan = %q %v, want %q", got, notes, want)
	}
	c.BaselineLast = true
	c.Transports = []string{"sse"}
	if runs, _ := c.plan(); names(runs) != "sse/repeat_int32 direct/repeat_int32" {
		t.Errorf("baseline last: %q", names(runs))
	}
	c = Config{Model: modelRepeat, Responses: 10, Delay: 50 * time.Millisecond, Transports: []string{"sse", "chat"}}
	runs, notes = c.plan()
	if names(runs) != "sse/repeat_int32" || len(notes) != 1 {
		t.Errorf("paced chat without --embedded: %q %v", names(runs), notes)
	}
	c.Spawn = true
	if runs, _ := c.plan(); names(runs) != "sse/repeat_int32 chat/bench_echo" || !runs[1].wl.PacedByConfig {
		t.Errorf("paced chat spawned: %q", names(runs))
	}
	c.Spawn = false
	c.Embedded, c.Compare = true, true
	if runs, _ := c.plan(); names(runs) != "direct/repeat_int32 sse/repeat_int32 direct/bench_echo chat/bench_echo" || !runs[3].wl.PacedByConfig {
		t.Errorf("paced chat embedded: %q", names(runs))
	}
}

func TestParseFlags(t *testing.T) {
	c, err := parseFlags([]string{"--preset", "latency", "--c", "10", "--duration", "1s"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Concurrency != 10 || c.Duration != time.Second || c.Delay != 50*time.Millisecond || c.Responses != 20 ||
		strings.Join(c.Transports, ",") != "sse,ws" {
		t.Errorf("latency preset with overrides: %+v", c)
	}
	t.Setenv("STREAMGATE_RESPONSES", "7")
	c, err = parseFlags([]string{"--transport", "ws,direct,ws"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Responses != 7 || strings.Join(c.Transports, ",") != "ws,direct" {
		t.Errorf("env and dedup: %+v", c)
	}
	c, err = parseFlags([]string{"--preset", "streams", "--embedded", "--model", "/models/Qwen2.5-0.5B-Q8_0.gguf"})
	if err != nil {
		t.Fatal(err)
	}
	if runs, _ := c.plan(); c.GGUF != "/models/Qwen2.5-0.5B-Q8_0.gguf" || c.textModel() != c.GGUF || c.Concurrency != 8 ||
		len(runs) != 1 || runs[0].transport != "chat" || runs[0].wl.Model != "qwen2.5-0.5b-q8_0" || runs[0].wl.Kind != modelGGUF {
		t.Errorf("streams preset on a GGUF file: %+v, runs %+v", c, runs)
	}
	for _, bad := range [][]string{
		{"--preset", "nope"}, {"--transport", "carrier-pigeon"}, {"--delay", "1500us"},
		{"--responses", "5", "--cancel-after", "5"}, {"--model", "gpt"}, {"--c", "0"}, {"extra"},
		{"--preset", "streams"}, {"--preset", "ttft", "--model", "echo", "--embedded"}, {"--model", "m.gguf"},
		{"--slope-at", "4000"}, {"--spawn", "--c", "1000", "--slope-at", "1000"}, {"--spawn", "--slope-at", "-1"},
	} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%v) accepted", bad)
		}
	}
}

// TestEmbeddedSmoke runs every transport, and the cancel scenario, against
// an engine and gateway in this process. Each run is 12 requests in a
// window long enough for all of them, whatever the machine's load.
func TestEmbeddedSmoke(t *testing.T) {
	runJSON := func(t *testing.T, args ...string) *Report {
		t.Helper()
		var out, errOut bytes.Buffer
		args = append([]string{"--embedded", "--json", "--c", "3", "--requests", "12", "--duration", "1m", "--warmup", "0s", "--pause", "0s"}, args...)
		if err := Main(context.Background(), args, &out, &errOut); err != nil {
			t.Fatalf("Main: %v\n%s", err, errOut.String())
		}
		var rep Report
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("%v: %s", err, out.String())
		}
		return &rep
	}
	t.Run("transports", func(t *testing.T) {
		rep := runJSON(t, "--transport", "sse,ws,chat", "--compare", "--responses", "5", "--delay", "2ms", "--ws-per-socket", "2")
		got := map[string]*Result{}
		for _, r := range rep.Results {
			got[r.Transport+"/"+r.Model] = r
			if r.Responses == 0 || r.Requests != 12 || len(r.Errors) != 0 {
				t.Errorf("%s/%s: %d responses, %d requests, errors %v", r.Transport, r.Model, r.Responses, r.Requests, r.ErrorSamples)
			}
			if r.Transport != "direct" && r.Ratios == nil {
				t.Errorf("%s: no ratios", r.Transport)
			}
		}
		for _, k := range []string{"direct/repeat_int32", "sse/repeat_int32", "ws/repeat_int32", "direct/bench_echo", "chat/bench_echo"} {
			if got[k] == nil {
				t.Errorf("no %s run", k)
			}
		}
	})
	// The streams preset on a GGUF file: concurrent greedy chats,
	// batched by the engine, each streaming its tokens.
	t.Run("gguf", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "Tiny-Q8_0.gguf")
		if err := ggufmodel.Write(path, ggufmodel.Small("qwen2", gguf.Q8_0, 1)); err != nil {
			t.Fatal(err)
		}
		rep := runJSON(t, "--preset", "streams", "--model", path, "--responses", "4")
		if len(rep.Results) != 1 {
			t.Fatalf("%d results, want the chat run's", len(rep.Results))
		}
		if r := rep.Results[0]; r.Transport != "chat" || r.Model != "tiny-q8_0" || r.Responses == 0 || r.Requests != 12 || len(r.Errors) != 0 {
			t.Errorf("%s/%s: %d responses, %d requests, errors %v", r.Transport, r.Model, r.Responses, r.Requests, r.ErrorSamples)
		}
	})
	// The ttft preset beside llama.cpp: the same chat prompt, as many
	// tokens on both sides, timed on both.
	t.Run("ttft", func(t *testing.T) {
		dir := filepath.Join("..", "..", "..", "engine", "internal", "llamacpp")
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "node-llama-cpp")); err != nil {
			if os.Getenv("STREAMGATE_REQUIRE") != "" {
				t.Fatalf("llama.cpp reference unavailable and STREAMGATE_REQUIRE is set: %v", err)
			}
			t.Skipf("llama.cpp reference unavailable: %v", err)
		}
		path := filepath.Join(t.TempDir(), "Tiny-Q8_0.gguf")
		if err := ggufmodel.Write(path, ggufmodel.Small("qwen2", gguf.Q8_0, 1)); err != nil {
			t.Fatal(err)
		}
		rep := runJSON(t, "--preset", "ttft", "--model", path, "--llamacpp", dir, "--llamacpp-threads", "1",
			"--prompt", "the quick brown fox")
		ref := rep.Reference
		if ref == nil {
			t.Fatalf("no llama.cpp reference; notes %q", rep.Notes)
		}
		if ref.Tokens < 5 || ref.Tokens != ref.EngineTokens || ref.Threads != 1 || ref.Wall.N != llamacppRuns || ref.CPU.N != llamacppRuns ||
			ref.Wall.P50 <= 0 || ref.GoalMs != 1.2*ref.Wall.P50+2 {
			t.Errorf("reference %+v", ref)
		}
		if r := rep.Results[0]; r.Transport != "chat" || r.TTFT.N != 12 || len(r.Errors) != 0 {
			t.Errorf("%s: ttft %+v, errors %v", r.Transport, r.TTFT, r.ErrorSamples)
		}
	})
	// sse and chat over HTTP/2 (h2c) to the embedded gateway, 2 streams
	// per connection: 3 streams at most, so 2 connections at most.
	t.Run("http2", func(t *testing.T) {
		rep := runJSON(t, "--transport", "sse,chat", "--http2", "--h2-per-conn", "2", "--responses", "5", "--delay", "2ms")
		for _, r := range rep.Results {
			if r.Responses == 0 || r.Requests != 12 || len(r.Errors) != 0 {
				t.Errorf("%s: %d responses, %d requests, errors %v", r.Transport, r.Responses, r.Requests, r.ErrorSamples)
			}
		}
		notes := 0
		for _, n := range rep.Notes {
			if strings.Contains(n, "over HTTP/2 (h2c): 1 connections") || strings.Contains(n, "over HTTP/2 (h2c): 2 connections") {
				notes++
			}
		}
		if notes != 2 {
			t.Errorf("want a note of 1 or 2 HTTP/2 connections for sse and chat: %q", rep.Notes)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		rep := runJSON(t, "--transport", "sse,ws", "--compare", "--responses", "200", "--delay", "2ms", "--cancel-after", "3")
		for _, r := range rep.Results {
			if r.CancelStop == nil || r.CancelStop.N == 0 || r.Cancelled != 12 || len(r.Errors) != 0 {
				t.Errorf("%s: cancel stops %+v, errors %v", r.Transport, r.CancelStop, r.ErrorSamples)
			}
		}
	})
	t.Run("table", func(t *testing.T) {
		var out bytes.Buffer
		err := Main(context.Background(), []string{"--embedded", "--preset", "relay", "--transport", "sse", "--compare", "--c", "2",
			"--responses", "3", "--requests", "6", "--duration", "1m", "--warmup", "0s", "--pause", "0s"}, &out, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"transport", "direct", "sse", "vs direct", "throughput"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("table lacks %q:\n%s", want, out.String())
			}
		}
	})
}

// TestSequenceSmoke: the sequence preset's transports, embedded, with short
// sequences: every chunk gets its partial result over direct and ws, and
// the report gives chunk latencies.
func TestSequenceSmoke(t *testing.T) {
	var out, errOut bytes.Buffer
	// A count of sequences, not a time window: on a saturated machine a
	// short window may close before a sequence ends. The window (10m) is
	// a hang guard; every sequence starts and ends inside it.
	args := []string{"--embedded", "--json", "--preset", "sequence", "--c", "4", "--ws-per-socket", "2", "--responses", "4",
		"--delay", "5ms", "--requests", "8", "--duration", "10m", "--warmup", "0s", "--ramp", "0s", "--pause", "0s"}
	if err := Main(context.Background(), args, &out, &errOut); err != nil {
		t.Fatalf("Main: %v\n%s", err, errOut.String())
	}
	var rep Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	got := map[string]bool{}
	for _, r := range rep.Results {
		got[r.Transport] = true
		if r.Model != modelTranscribe || r.Requests != 8 || len(r.Errors) != 0 {
			t.Errorf("%s: model %s, %d sequences, errors %v", r.Transport, r.Model, r.Requests, r.ErrorSamples)
		}
		if d := r.ChunkLatency; d == nil || d.N == 0 || int64(d.N) > r.Responses {
			t.Errorf("%s: chunk latencies %+v for %d responses", r.Transport, d, r.Responses)
		}
	}
	if !got["direct"] || !got["ws"] {
		t.Fatalf("runs %v, want direct and ws", got)
	}
	if err := Main(context.Background(), []string{"--model", "transcribe", "--responses", "1"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "at least 2 chunks") {
		t.Errorf("a one-chunk sequence: %v", err)
	}
}

// TestVerifySameServer: a gateway and the engine behind it pass; the same
// gateway beside another engine (with the same ServerMetadata) is refused.
func TestVerifySameServer(t *testing.T) {
	a, err := stack.Start(stack.Config{
		Engine:  &engine.Options{Repository: builtin.FS, Backends: builtin.Backends()},
		Gateway: &gateway.Options{},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.StopNow)
	other := startEngine(t)
	wl := workload{Model: modelRepeat, Kind: modelRepeat, Responses: 100, Delay: time.Millisecond}
	runs := []plannedRun{{transport: "direct", wl: wl}, {transport: "sse", wl: wl}}
	if !needsSameServer(runs) || needsSameServer(runs[1:]) {
		t.Fatal("needsSameServer")
	}
	ctx := context.Background()
	if err := verifySameServer(ctx, a.HTTPAddr, a.EngineAddr, runs); err != nil {
		t.Fatalf("same server refused: %v", err)
	}
	err = verifySameServer(ctx, a.HTTPAddr, other, runs)
	if err == nil || !strings.Contains(err.Error(), "different servers") {
		t.Fatalf("different servers accepted: %v", err)
	}
	// Main refuses to measure them.
	err = Main(ctx, []string{"--http", a.HTTPAddr, "--grpc", other, "--transport", "sse", "--compare", "--duration", "50ms"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "different servers") {
		t.Fatalf("Main measured different servers: %v", err)
	}
}

func TestGCTrace(t *testing.T) {
	g := &gcTrace{}
	t0 := time.Now()
	lines := []string{
		"gc 1 @0.011s 2%: 0.011+1.2+0.003 ms clock, 0.022+0.50/1.1/0+0.006 ms cpu, 4->4->0 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P",
		"gc 2 @1.500s 1%: 0.020+2.0+0.040 ms clock, 0.040+0.10/0.90/3.0+0.080 ms cpu, 8->9->5 MB, 9 MB goal, 0 MB stacks, 0 MB globals, 2 P",
		`time=2026-11-23T18:10:13.899Z level=INFO msg="engine serving" grpc=127.0.0.1:1`,
	}
	for i, l := range lines {
		if got, want := g.add(l, t0.Add(time.Duration(i)*time.Second)), i < 2; got != want {
			t.Fatalf("line %d: gc line %v", i, got)
		}
	}
	st := g.window(window{from: t0.Add(500 * time.Millisecond), to: t0.Add(time.Hour)})
	if st.Cycles != 1 || st.Pauses.N != 2 || st.Pauses.Max != 0.04 || st.Pauses.P50 != 0.02 {
		t.Fatalf("stats %+v", st)
	}
	if want := (0.10 + 0.90) / 1e3; st.CPUSeconds < want*0.999 || st.CPUSeconds > want*1.001 {
		t.Fatalf("gc cpu %v, want %v (assists and background marking)", st.CPUSeconds, want)
	}
	// The window's last collection: 5 MB live, 0 MB of stacks.
	if st.LiveMB != 5 || st.StacksMB != 0 || st.livePerStreamKB(10) != 512 {
		t.Fatalf("live %v MB, stacks %v MB, per stream %v KB; want 5, 0, 512", st.LiveMB, st.StacksMB, st.livePerStreamKB(10))
	}
	// A later cycle whose memory figures a log record cut off keeps the
	// last figures seen; one with them replaces them.
	g.add("gc 3 @2.000s 1%: 0.020+2.0+0.040 ms clock, 0.040+0.10/0.90/3.0+0.080 ms cpu, ", t0.Add(3*time.Second))
	g.add("gc 4 @3.000s 1%: 0.020+2.0+0.040 ms clock, 0.040+0.10/0.90/3.0+0.080 ms cpu, 70->71->12 MB, 64 MB goal, 3 MB stacks, 0 MB globals, 2 P", t0.Add(4*time.Second))
	st = g.window(window{from: t0.Add(500 * time.Millisecond), to: t0.Add(3500 * time.Millisecond)})
	if st.Cycles != 2 || st.LiveMB != 5 {
		t.Fatalf("cut line: %d cycles, live %v MB; want 2, 5", st.Cycles, st.LiveMB)
	}
	st = g.window(window{from: t0.Add(500 * time.Millisecond), to: t0.Add(time.Hour)})
	if st.LiveMB != 12 || st.StacksMB != 3 {
		t.Fatalf("live %v MB, stacks %v MB; want 12, 3", st.LiveMB, st.StacksMB)
	}
	var sum GCStats
	sum.merge(st)
	sum.merge(st)
	if sum.LiveMB != 24 || sum.StacksMB != 6 {
		t.Fatalf("merged: live %v MB, stacks %v MB; want 24, 6", sum.LiveMB, sum.StacksMB)
	}
}

// TestSpawnSmoke runs the bench on spawned servers (a streamgate binary
// built for the test): a fresh server per run, its GC traced.
func TestSpawnSmoke(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "streamgate")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/streamgate/streamgate/cmd/streamgate").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	// A count of requests, not a short window, which a saturated machine
	// may close before a request ends; the 10m window is a hang guard.
	run := func(t *testing.T, transports string, extra ...string) Report {
		var out, errOut bytes.Buffer
		args := append([]string{"--spawn", "--spawn-binary", bin, "--json", "--transport", transports, "--compare",
			"--c", "3", "--responses", "5", "--requests", "6", "--duration", "10m", "--warmup", "0s", "--pause", "0s"}, extra...)
		if err := Main(context.Background(), args, &out, &errOut); err != nil {
			t.Fatalf("Main: %v\n%s", err, errOut.String())
		}
		var rep Report
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		for _, r := range rep.Results {
			if r.Responses == 0 || len(r.Errors) != 0 || r.ServerCPU == nil || r.GC == nil || r.GC.Source != "gctrace" {
				t.Errorf("%s: %d responses, errors %v, server cpu %v, gc %+v", r.Transport, r.Responses, r.ErrorSamples, r.ServerCPU, r.GC)
			}
		}
		return rep
	}
	t.Run("open", func(t *testing.T) {
		if rep := run(t, "sse"); len(rep.Results) != 2 {
			t.Fatalf("%d runs", len(rep.Results))
		}
	})
	// --slope-at runs every transport again at the second count, each
	// on a fresh server; the comparison pairs runs of one count.
	t.Run("slope", func(t *testing.T) {
		rep := run(t, "sse", "--spawn-split", "--slope-at", "6")
		var got []string
		for _, r := range rep.Results {
			got = append(got, fmt.Sprintf("%s@%d", r.Transport, r.Concurrency))
			if r.Transport == "sse" && (r.Ratios == nil || r.Ratios.Throughput == 0) {
				t.Errorf("sse@%d: no comparison with direct at its count", r.Concurrency)
			}
		}
		if strings.Join(got, " ") != "direct@3 sse@3 direct@6 sse@6" {
			t.Errorf("runs %v", got)
		}
		// System calls and switches, counted. The gateway wrote each
		// request completed in the window on its client's connection
		// (one write never serves two sockets); the engine's writes may
		// carry several requests' responses (grpc-go batches them).
		for _, r := range rep.Results {
			calls := map[string]*procstat.Calls{"server": r.ServerCalls}
			if r.Transport == "sse" {
				calls["gateway"] = r.GatewayCalls
			}
			for who, c := range calls {
				if c == nil || c.Reads <= 0 || c.Writes <= 0 || c.Switches <= 0 ||
					who == "gateway" && c.Writes < r.Requests-int64(r.Concurrency) {
					t.Errorf("%s@%d: %s calls %+v for %d requests", r.Transport, r.Concurrency, who, c, r.Requests)
				}
			}
		}
	})
	// Over HTTP/2: the spawned gateway serves h2c (a gateway without it
	// fails every request) and takes --max-streams-per-conn 100.
	t.Run("http2", func(t *testing.T) {
		rep := run(t, "sse,chat", "--http2", "--h2-per-conn", "100")
		if len(rep.Results) != 4 {
			t.Fatalf("%d runs", len(rep.Results))
		}
	})
	// Chat at a cadence: the spawned engine serves the paced echo model
	// from a repository the bench writes (--models), split or not.
	for _, split := range []bool{false, true} {
		t.Run(fmt.Sprintf("paced chat split %v", split), func(t *testing.T) {
			extra := []string{"--delay", "5ms"}
			if split {
				extra = append(extra, "--spawn-split")
			}
			rep := run(t, "chat", extra...)
			if len(rep.Results) != 3 || rep.Results[2].Transport != "chat" || rep.Results[2].Model != pacedEcho {
				t.Fatalf("runs %+v", rep.Results)
			}
		})
	}
	// A gateway that asks for keys: --api-key goes with every request,
	// the same-server check's included, on every transport.
	t.Run("api key", func(t *testing.T) {
		keys := filepath.Join(t.TempDir(), "keys.json")
		out, err := exec.Command(bin, "keys", "create", "--name", "bench", "--keys-file", keys).Output()
		if err != nil {
			t.Fatalf("keys create: %v", err)
		}
		key := strings.TrimSpace(string(out))
		if rep := run(t, "sse,ws,chat", "--spawn-args", "--keys-file "+keys, "--api-key", key); len(rep.Results) != 5 {
			t.Fatalf("%d runs", len(rep.Results))
		}
	})
}
