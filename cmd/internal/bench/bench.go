package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/streamgate/streamgate/engine/backend"
)

// Config is one bench invocation, from flags (see Main) and a preset.
type Config struct {
	Preset     string
	Transports []string // direct, sse, chat, ws
	Compare    bool
	Model      string
	// GGUF is the file of --model FILE.gguf; Model is then its name as
	// serve names it.
	GGUF        string
	Concurrency int
	Rate        float64
	Duration    time.Duration
	Requests    int64
	Warmup      time.Duration
	Ramp        time.Duration
	Responses   int
	Delay       time.Duration
	Prompt      string
	CancelAfter int

	HTTP string
	GRPC string
	// APIKey is sent with every gateway request (a gateway with keys:
	// `streamgate keys create`).
	APIKey   string
	Embedded bool
	// Spawn starts a fresh `streamgate serve` for every run (SpawnArgs
	// added to its flags) instead of using HTTP and GRPC.
	Spawn       bool
	SpawnSplit  bool // engine and gateway as two processes
	SpawnArgs   []string
	SpawnBinary string // default: this executable
	// SlopeAt runs every transport a second time at this many streams
	// (on a fresh server) and reports memory's growth per stream between
	// the two counts; 0: no second run.
	SlopeAt       int
	ServerPIDs    []int
	DirectStreams int
	WSPerSocket   int
	// HTTP2 sends sse and chat requests over HTTP/2 without TLS (h2c),
	// H2PerConn on each connection; spawned and embedded gateways then
	// serve h2c and allow H2PerConn requests per connection.
	HTTP2        bool
	H2PerConn    int
	BaselineLast bool
	Pause        time.Duration
	// QueueBytes sets the embedded gateway's upstream.Options.QueueBytes
	// (0: upstream's default), to try the relay preset with other queues.
	QueueBytes int
	// Redis is the embedded gateway's --redis (resumable streams' store).
	Redis string
	// Floor runs every sse and ws run again against the floor server
	// (floor.go), right after it, and reports the gateway over the floor.
	Floor bool
	// FloorTick is how often the floor's pacer sends what is due (0:
	// each response when it is due).
	FloorTick time.Duration
	// FloorBinary is the streamgate binary that serves the floor
	// (default: this executable).
	FloorBinary string

	JSON       bool
	CPUProfile string
	MemProfile string
	// Llamacpp is the npm project that runs llama.cpp for the ttft
	// preset's reference ("": engine/internal/llamacpp when installed
	// under the working directory).
	Llamacpp string
	// LlamacppThreads is llama.cpp's thread count there (0: GOMAXPROCS,
	// as the engine's workers).
	LlamacppThreads int

	// Args are the flags set, on the command line or by their variables
	// (as --name=value), echoed in the report.
	Args []string
}

// preset is a named scenario of issue 6; flags given on the command line
// override its fields.
type preset struct {
	transports   []string
	conc         int
	responses    int
	delay        time.Duration
	duration     time.Duration
	warmup, ramp time.Duration
	cancelAfter  int
	perSocket    int
	baselineLast bool
	embedded     bool   // the preset needs --embedded for its main figure
	model        string // "" keeps --model's default
	gguf         bool   // the preset needs --model FILE.gguf
	spawn        bool   // a fresh server per run by default
	about        string
}

var presets = map[string]preset{
	"relay": {
		transports: []string{"sse", "ws", "chat"}, conc: 256, responses: 100,
		duration: 10 * time.Second, warmup: 2 * time.Second,
		about: "max throughput: 256 concurrent streams, 100 responses each, no delay",
	},
	"latency": {
		transports: []string{"sse", "ws"}, conc: 1000, responses: 20, delay: 50 * time.Millisecond,
		duration: 10 * time.Second, warmup: 2 * time.Second, ramp: time.Second,
		about: "1,000 concurrent streams at 20 responses/s each (50 ms apart, 20 per request)",
	},
	"hold": {
		transports: []string{"sse"}, conc: 10000, responses: 30, delay: time.Second,
		duration: 10 * time.Second, warmup: 8 * time.Second, ramp: 5 * time.Second, spawn: true,
		about: "10,000 concurrent streams at 1 response/s, opened over 5 s, each transport on a fresh server; server RSS per stream",
	},
	"cancel": {
		transports: []string{"sse", "ws"}, conc: 100, responses: 200, delay: 10 * time.Millisecond,
		duration: 10 * time.Second, warmup: time.Second, ramp: 100 * time.Millisecond, cancelAfter: 10, embedded: true,
		about: "100 concurrent streams, 10 ms apart; the client leaves after 10 responses; time until the engine stops",
	},
	"sequence": {
		transports: []string{"direct", "ws"}, model: modelTranscribe, conc: 64, perSocket: 8, responses: 50, delay: 100 * time.Millisecond,
		duration: 10 * time.Second, warmup: 2 * time.Second, ramp: time.Second,
		about: "64 concurrent sequences (client-side streaming into transcribe) of 50 chunks, 100 ms apart; 8 per WebSocket; chunk sent → its partial result",
	},
	"streams": {
		transports: []string{"chat"}, conc: 8, responses: 64, gguf: true,
		duration: 20 * time.Second, warmup: 5 * time.Second,
		about: "8 concurrent /v1/chat/completions streams of 64 greedy tokens on a GGUF model: the engine decodes them in one batch, so responses/s is its aggregate decode tok/s",
	},
	"ttft": {
		transports: []string{"chat"}, conc: 1, responses: 1, gguf: true,
		duration: 20 * time.Second, warmup: 3 * time.Second,
		about: "one /v1/chat/completions stream at a time, one token each, on a GGUF model: TTFT is prompt processing plus what the gateway and engine add",
	},
	"ws-mux": {
		transports: []string{"ws", "sse"}, conc: 100, perSocket: 100, responses: 100, delay: 10 * time.Millisecond,
		duration: 10 * time.Second, warmup: 2 * time.Second, ramp: 100 * time.Millisecond,
		about: "one WebSocket carrying 100 concurrent requests vs 100 SSE connections, 100 responses/s each",
	},
}

var knownTransports = []string{"direct", "sse", "chat", "ws", "sse-resumable", "chat-resumable", "sse-resume", "sse-delete"}

// resumable transports: sse and chat asking for resumable streams
// (Streamgate-Resumable: true), to compare the live client's latency with
// and without the stream log; sse-resume leaves each request after
// --cancel-after responses and resumes it with GET /v1/streams/{sid}
// (resume latency: GET sent → first event); sse-delete cancels it there
// with DELETE /v1/streams/{sid} (with --embedded: DELETE sent → engine
// stopped).

// plannedRun is one transport run of an invocation.
type plannedRun struct {
	transport string
	wl        workload
	conc      int  // streams; 0: --c
	floor     bool // against the floor server (--floor)
}

// name is the run's name in the report: the transport, and "-floor" for
// the floor server's run of it.
func (pr plannedRun) name() string {
	if pr.floor {
		return pr.transport + "-floor"
	}
	return pr.transport
}

// hasFloor reports whether --floor runs transport t again on the floor
// server.
func hasFloor(t string) bool { return t == "sse" || t == "ws" }

// plan lists the runs: for every workload in use, its direct baseline
// (with --compare, or when asked for) and the transports using it. The
// chat transport needs a text model: repeat_int32 invocations run it on
// echo, which gets a baseline of its own.
func (c *Config) plan() (runs []plannedRun, notes []string) {
	kind := c.Model
	if c.GGUF != "" {
		kind = modelGGUF
	}
	base := workload{Model: c.Model, Kind: kind, Responses: c.Responses, Delay: c.Delay, Prompt: c.Prompt, APIKey: c.APIKey}
	type group struct {
		wl    workload
		trans []string
	}
	var groups []*group
	find := func(wl workload) *group {
		for _, g := range groups {
			if g.wl == wl {
				return g
			}
		}
		g := &group{wl: wl}
		groups = append(groups, g)
		return g
	}
	find(base)
	for _, t := range c.Transports {
		wl := base
		if strings.HasPrefix(t, "chat") && !wl.textModel() {
			wl.Model, wl.Kind = modelEcho, modelEcho
		}
		if strings.HasPrefix(t, "chat") && wl.Kind == modelEcho && wl.Delay > 0 {
			if !c.Embedded && !c.Spawn {
				notes = append(notes, fmt.Sprintf("chat skipped: OpenAI requests cannot carry echo's delay_ms, so a %v cadence needs --embedded or --spawn (which serve a paced echo model, %s)", wl.Delay, pacedEcho))
				continue
			}
			wl.Model, wl.PacedByConfig = pacedEcho, true
		}
		g := find(wl)
		g.trans = append(g.trans, t)
	}
	for _, g := range groups {
		ts := g.trans
		if c.Compare && !slices.Contains(ts, "direct") {
			if c.BaselineLast {
				ts = append(ts, "direct")
			} else {
				ts = append([]string{"direct"}, ts...)
			}
		}
		for _, t := range ts {
			runs = append(runs, plannedRun{transport: t, wl: g.wl})
			if c.Floor && hasFloor(t) {
				runs = append(runs, plannedRun{transport: t, wl: g.wl, floor: true})
			}
		}
	}
	return runs, notes
}

func runBench(ctx context.Context, c Config, stdout, stderr io.Writer) error {
	rep := &Report{
		Preset:      c.Preset,
		Command:     strings.Join(c.Args, " "),
		Cores:       runtime.NumCPU(),
		LoadBefore:  loadAvg(),
		Embedded:    c.Embedded,
		GeneratedAt: time.Now().UTC().Format(time.RFC3339),
	}
	if p, ok := presets[c.Preset]; ok {
		rep.Notes = append(rep.Notes, "preset "+c.Preset+": "+p.about)
		if p.embedded && !c.Embedded {
			rep.Notes = append(rep.Notes, "preset "+c.Preset+" reads engine-side stop times only with --embedded")
		}
	}
	nofile, err := raiseNoFile()
	if err != nil {
		fmt.Fprintln(stderr, "bench: raising RLIMIT_NOFILE:", err)
	}
	rep.NoFile = nofile
	conns := c.Concurrency
	if c.HTTP2 {
		conns = (c.Concurrency + c.H2PerConn - 1) / c.H2PerConn
	}
	need := uint64(max(conns, c.SlopeAt))*2 + 256 // embedded: both ends of every connection
	if nofile > 0 && nofile < need {
		fmt.Fprintf(stderr, "bench: warning: open-file limit %d may be too low for %d streams\n", nofile, c.Concurrency)
	}

	runs, notes := c.plan()
	rep.Notes = append(rep.Notes, notes...)
	base := c.Concurrency
	if c.SlopeAt > 0 {
		for _, pr := range slices.Clone(runs) {
			pr.conc = c.SlopeAt
			runs = append(runs, pr)
		}
	}
	var emb *embedded
	var pids []int
	var pacedRepo string // --spawn: the paced echo model's (writePacedEcho)
	if c.Embedded {
		o := embeddedOptions{conc: c.Concurrency, perSocket: c.WSPerSocket, textModel: c.textModel(), queueBytes: c.QueueBytes, redis: c.Redis}
		if c.HTTP2 {
			o.h2PerConn = c.H2PerConn
		}
		for _, r := range runs {
			if r.wl.PacedByConfig {
				o.echoDelay = r.wl.Delay
			}
		}
		emb, err = startEmbedded(o)
		if err != nil {
			return fmt.Errorf("embedded server: %w", err)
		}
		defer emb.close()
		c.HTTP, c.GRPC = emb.HTTPAddr, emb.EngineAddr
		pids = []int{os.Getpid()}
		rep.Notes = append(rep.Notes, "embedded: server and load generator share one process; its CPU and RSS count both")
	} else if c.Spawn {
		for _, r := range runs {
			if r.wl.PacedByConfig && pacedRepo == "" { // one delay: the workload's
				var remove func()
				if pacedRepo, remove, err = writePacedEcho("", r.wl.Delay); err != nil {
					return fmt.Errorf("the paced echo model's repository: %w", err)
				}
				defer remove()
			}
		}
		what := "`streamgate serve`"
		if c.SpawnSplit {
			what = "`streamgate engine` + `streamgate gateway` pair"
		}
		rep.Notes = append(rep.Notes, "spawn: every run on a fresh "+what+" of its own; GC figures from gctrace")
	} else {
		pids = c.ServerPIDs
		if len(pids) == 0 {
			pids = discoverServer(stderr, c.HTTP, c.GRPC)
		}
		if needsSameServer(runs) {
			var notSame *errNotSame
			switch err := verifySameServer(ctx, c.HTTP, c.GRPC, runs); {
			case errors.As(err, &notSame):
				return err
			case err != nil:
				fmt.Fprintln(stderr, "bench: warning:", err)
				rep.Notes = append(rep.Notes, "not checked that --http and --grpc are the same server: "+err.Error())
			default:
				rep.Notes = append(rep.Notes, "checked: --http and --grpc are the same server (ServerMetadata, and the engine counted the bench's nonce requests sent through the gateway)")
			}
		}
	}
	rep.HTTP, rep.GRPC, rep.ServerPIDs = c.HTTP, c.GRPC, pids
	if !c.Embedded && !c.Spawn && len(pids) == 0 {
		rep.Notes = append(rep.Notes, "server CPU and RSS unknown: no local server process found (give --server-pid)")
	}

	if c.CPUProfile != "" {
		f, err := os.Create(c.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	var serial atomic.Int32
	for i, pr := range runs {
		if ctx.Err() != nil {
			break
		}
		c.Concurrency = cmp.Or(pr.conc, base)
		if i > 0 && c.Pause > 0 {
			runtime.GC()
			backend.Sleep(ctx, c.Pause)
		}
		var sp *spawned
		var pc *pacer          // the floor server's
		rc, runPIDs := c, pids // the floor's run: its own server
		if pr.floor {
			if sp, pc, err = spawnFloor(ctx, c.FloorBinary, pr.wl, c.FloorTick); err != nil {
				return fmt.Errorf("the floor server: %w", err)
			}
			rc.HTTP, runPIDs = sp.http, sp.pids()
		} else if c.Spawn {
			// Room for every stream: the gateway's limit, and upstream
			// streams at 256 requests each.
			streams := max(2*c.Concurrency, 4096)
			args := []string{"--max-streams", strconv.Itoa(streams), "--upstream-streams", strconv.Itoa(max((streams+255)/256, 64))}
			if c.HTTP2 {
				// Twice the streams the bench puts on a connection: a
				// stream the client left (or whose error it read) is
				// counted by the gateway until its handler returns, while
				// the client already sends the next one.
				args = append(args, "--h2c", "--max-streams-per-conn", strconv.Itoa(max(2*c.H2PerConn, 64)))
			}
			if c.GGUF != "" {
				args = append(args, "--model", c.GGUF)
			}
			args = append(args, c.SpawnArgs...)
			var engineArgs []string
			if pr.wl.PacedByConfig {
				engineArgs = []string{"--models", pacedRepo}
			}
			if sp, err = spawnServer(ctx, c.SpawnBinary, c.SpawnSplit, engineArgs, args); err != nil {
				return err
			}
			c.HTTP, c.GRPC, pids = sp.http, sp.grpc, sp.pids()
			rc, runPIDs = c, pids
			rep.HTTP, rep.GRPC = "spawned", "spawned"
		}
		tr, err := rc.newTransport(pr)
		if err != nil {
			if sp != nil {
				sp.stop()
			}
			if pc != nil {
				pc.close()
			}
			return fmt.Errorf("%s: %w", pr.transport, err)
		}
		spec := runSpec{
			name: pr.name(), tr: tr, wl: pr.wl, conc: c.Concurrency, rate: c.Rate,
			duration: c.Duration, warmup: c.Warmup, ramp: c.Ramp, requests: c.Requests,
			cancelAfter: c.CancelAfter, pids: runPIDs, embedded: c.Embedded && !pr.floor, serial: &serial,
		}
		if sp != nil {
			spec.gc = sp.gcWindow
			if c.SpawnSplit && !pr.floor {
				gw := sp.gateway()
				spec.gatewayPID, spec.gatewayGC = gw.cmd.Process.Pid, gw.gc.window
			}
		}
		if c.MemProfile != "" {
			spec.atWindowEnd = func() { writeHeapProfile(c.MemProfile+"."+pr.transport, stderr) }
		}
		if emb != nil && c.CancelAfter > 0 && pr.wl.Kind == modelRepeat && !pr.floor {
			spec.tracker = emb.tracker
			emb.tracker.enable(true)
		}
		fmt.Fprintf(stderr, "bench: %s %s, %d streams, %v + %v warmup...\n", pr.name(), pr.wl, c.Concurrency, c.Duration, c.Warmup)
		res := run(ctx, spec)
		if h, ok := tr.(*httpStream); ok && h.h2 != nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s over HTTP/2 (h2c): %d connections, up to %d streams each", pr.transport, h.h2.connections(), c.H2PerConn))
		}
		tr.close()
		if sp != nil {
			sp.stop()
		}
		if pc != nil {
			pc.close()
		}
		if emb != nil {
			emb.tracker.enable(false)
		}
		res.Floor = pr.floor
		fmt.Fprintf(stderr, "bench: %s: %.0f responses/s, %.0f requests/s, %d errors\n", pr.name(), res.RespPerSec, res.ReqPerSec, res.errorCount())
		rep.Results = append(rep.Results, res)
	}
	for _, r := range rep.Results {
		if r.Transport == "direct" || r.Floor {
			continue
		}
		for _, b := range rep.Results {
			if b.Transport == "direct" && b.Model == r.Model && b.Workload == r.Workload && b.Concurrency == r.Concurrency {
				r.Ratios = compare(r, b)
			}
		}
	}
	if c.Floor {
		overFloor(rep.Results)
	}
	if c.SlopeAt > 0 {
		memSlopes(rep.Results, base, c.SlopeAt)
	}
	if c.Preset == "ttft" && c.GGUF != "" && ctx.Err() == nil {
		if err := c.reference(ctx, rep, stderr); err != nil {
			return err
		}
	}
	rep.LoadAfter = loadAvg()
	if busy(rep.LoadBefore, rep.Cores) || busy(rep.LoadAfter, rep.Cores) {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the 1-minute load average exceeded the %d cores: other processes competed for the CPU, and latency percentiles include their scheduling delays", rep.Cores))
	}
	if c.JSON {
		return rep.writeJSON(stdout)
	}
	rep.writeTable(stdout)
	return ctx.Err()
}

// reference adds llama.cpp's time to first token on the same prompt and
// file to rep, or a note saying why it could not.
func (c *Config) reference(ctx context.Context, rep *Report, stderr io.Writer) error {
	dir, err := llamacppDir(c.Llamacpp)
	switch {
	case err != nil:
		return err
	case dir == "":
		rep.Notes = append(rep.Notes, "llama.cpp reference not run: no --llamacpp, and no "+defaultLlamacppDir+" with node_modules under the working directory (npm install --omit=optional --ignore-scripts there)")
		return nil
	}
	fmt.Fprintf(stderr, "bench: llama.cpp: the same prompt, %d runs...\n", llamacppRuns)
	ref, err := referenceTTFT(ctx, dir, c.LlamacppThreads, c.GGUF, c.Model, c.Prompt, c.HTTP, c.APIKey)
	if err != nil {
		return fmt.Errorf("llama.cpp reference: %w", err)
	}
	rep.Reference = ref
	return nil
}

// busy reports whether a /proc/loadavg triple's first figure exceeds cores.
func busy(load string, cores int) bool {
	f := strings.Fields(load)
	if len(f) == 0 {
		return false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return err == nil && v > float64(cores)
}

// writeHeapProfile writes a heap profile of this process to name and
// reports the Go memory figures to stderr.
func writeHeapProfile(name string, stderr io.Writer) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Fprintf(stderr, "bench: %s: %d goroutines, heap in use %.1f MB, stacks %.1f MB, runtime total %.1f MB\n",
		name, runtime.NumGoroutine(), float64(ms.HeapInuse)/(1<<20), float64(ms.StackInuse)/(1<<20), float64(ms.Sys)/(1<<20))
	f, err := os.Create(name)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		fmt.Fprintln(stderr, "bench:", err)
	}
	g, err := os.Create(name + ".goroutines")
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return
	}
	defer g.Close()
	pprof.Lookup("goroutine").WriteTo(g, 1)
}

func (c *Config) newTransport(pr plannedRun) (transport, error) {
	base := "http://" + c.HTTP
	if pr.wl.Kind == modelTranscribe {
		switch pr.transport {
		case "direct":
			d, err := newDirect(c.GRPC, pr.wl, 0)
			return seqDirect{d}, err
		case "ws":
			return seqWS{newWSTransport(base, pr.wl, c.Concurrency, c.WSPerSocket)}, nil
		}
		return nil, fmt.Errorf("transcribe sequences run over direct and ws only")
	}
	switch pr.transport {
	case "direct":
		return newDirect(c.GRPC, pr.wl, c.DirectStreams)
	case "sse":
		return c.http2(newSSETransport(base, pr.wl, c.Concurrency)), nil
	case "chat":
		return c.http2(newChatTransport(base, pr.wl, c.Concurrency)), nil
	case "sse-resumable", "sse-resume", "sse-delete":
		h := newSSETransport(base, pr.wl, c.Concurrency)
		h.resumable, h.base = strings.TrimPrefix(pr.transport, "sse-"), base
		return c.http2(h), nil
	case "chat-resumable":
		h := newChatTransport(base, pr.wl, c.Concurrency)
		h.resumable, h.base = "resumable", base
		return c.http2(h), nil
	case "ws":
		return newWSTransport(base, pr.wl, c.Concurrency, c.WSPerSocket), nil
	}
	return nil, fmt.Errorf("unknown transport %q", pr.transport)
}

// http2 puts h over HTTP/2 (h2c) with --http2.
func (c *Config) http2(h *httpStream) *httpStream {
	if !c.HTTP2 {
		return h
	}
	return h.overHTTP2(c.HTTP, c.H2PerConn, c.APIKey)
}

// discoverServer finds the local processes listening on the gateway and
// engine addresses (one process for ` + "`streamgate serve`" + `).
func discoverServer(stderr io.Writer, addrs ...string) []int {
	var pids []int
	for _, a := range addrs {
		found, err := findListeners(a)
		if err != nil {
			fmt.Fprintf(stderr, "bench: %s: %v\n", a, err)
			continue
		}
		for _, p := range found {
			if !slices.Contains(pids, p) && p != os.Getpid() {
				pids = append(pids, p)
			}
		}
	}
	return pids
}
