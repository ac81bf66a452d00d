package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/streamgate/streamgate/cmd/internal/cli"
	"github.com/streamgate/streamgate/cmd/internal/modelcache"
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
	Spawn         bool
	SpawnSplit    bool // engine and gateway as two processes
	SpawnArgs     []string
	SpawnBinary   string // default: this executable
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

	JSON       bool
	CPUProfile string
	MemProfile string

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

// Command is `streamgate bench`: its help, flags and run.
func Command() *cli.Command {
	return &cli.Command{
		Name:    "bench",
		Purpose: "load generator: what the gateway adds to every response, against a direct gRPC client",
		About: `Targets only the addresses given (default loopback), or with --embedded
an engine and gateway it starts in this process, or with --spawn a fresh
streamgate serve per run.

Presets (--preset): relay, latency, hold, cancel, ws-mux, sequence, and on
a GGUF model (--model FILE.gguf) streams and ttft; any flag given
overrides the preset. Transports: direct (gRPC ModelStreamInfer,
the baseline), sse (POST /v2/models/M/generate_stream), chat (OpenAI
streaming /v1/chat/completions; repeat_int32 runs use the echo model for
it), ws (/v1/ws, streamgate.v1, many requests per socket). With --model
transcribe (the sequence preset) a request is a sequence of --responses
chunks sent --delay apart, over direct or ws only. The report goes to
stdout, progress to stderr.`,
		Examples: []cli.Example{
			{Comment: "Against streamgate serve on loopback: the gateway's cost per response", Line: "streamgate bench --preset relay --compare"},
			{Comment: "Engine and gateway in this process: cancellation reaching the engine", Line: "streamgate bench --embedded --preset cancel --compare"},
			{Comment: "A GGUF model's aggregate decode speed over 8 concurrent chat streams", Line: "streamgate bench --embedded --preset streams --model qwen2.5-0.5b-Q8_0.gguf"},
			{Comment: "SSE and WebSocket, 64 streams of 50 responses 20 ms apart, as JSON", Line: "streamgate bench --transport sse,ws --c 64 --responses 50 --delay 20ms --compare --json"},
		},
		Setup: func(fs *cli.FlagSet) cli.Run {
			v := defineFlags(fs)
			return func(ctx context.Context, _ []string, stdout, stderr io.Writer) error {
				c, err := v.config(fs)
				if err != nil {
					return err
				}
				return runBench(ctx, c, stdout, stderr)
			}
		},
	}
}

// Main runs `streamgate bench` with args (what follows "bench"): it
// parses them, runs the load, and prints the report on stdout (progress
// and warnings on stderr). ctx ends the run early.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return cli.Main(ctx, Command(), args, stdout, stderr)
}

// parseFlags is the Config of args, as Main reads it.
func parseFlags(args []string) (Config, error) {
	fs := cli.NewFlagSet("bench")
	v := defineFlags(fs)
	rest, err := cli.Parse(fs, args)
	if err != nil {
		return Config{}, err
	}
	if len(rest) > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q", rest[0])
	}
	return v.config(fs)
}

// flagValues is what the flags fill in: the Config, and the flags
// config turns into its fields.
type flagValues struct {
	c                           Config
	transports, pids, spawnArgs string
}

func defineFlags(fs *cli.FlagSet) *flagValues {
	v := &flagValues{}
	c := &v.c
	fs.Group("Scenario")
	fs.StringVar(&c.Preset, "preset", "", "scenario: relay, latency, hold, cancel, ws-mux, sequence, streams, ttft (default: none, the flags alone)")
	fs.StringVar(&v.transports, "transport", "sse", "transports to run, comma-separated: "+strings.Join(knownTransports, ", "))
	fs.BoolVar(&c.Compare, "compare", false, "also run the direct gRPC baseline, first, and print ratios against it")
	fs.BoolVar(&c.BaselineLast, "baseline-last", false, "with --compare, run the baseline after the other transports")
	fs.StringVar(&c.Model, "model", modelRepeat, "model: repeat_int32, echo, stories260k, transcribe (sequences of --responses chunks, --delay apart), or a GGUF file (FILE.gguf: served, with --embedded or --spawn, by its base name)")
	fs.Group("Load")
	fs.IntVar(&c.Concurrency, "c", 64, "concurrent streams (closed loop); with --rate, the cap on requests in flight")
	fs.Float64Var(&c.Rate, "rate", 0, "open loop: start this many requests per second (0: closed loop)")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "measurement window of each transport, after the warmup")
	fs.Int64Var(&c.Requests, "requests", 0, "stop each transport after starting this many requests (0: no limit)")
	fs.DurationVar(&c.Warmup, "warmup", time.Second, "load before the window opens (not measured)")
	fs.DurationVar(&c.Ramp, "ramp", 0, "spread the start of the concurrent streams over this long")
	fs.IntVar(&c.Responses, "responses", 100, "responses per request (repeat IN length, echo words, a language model's max_tokens)")
	fs.DurationVar(&c.Delay, "delay", 0, "delay before each response (repeat DELAY, echo delay_ms); whole milliseconds")
	fs.StringVar(&c.Prompt, "prompt", "Once upon a time", "a language model's prompt (stories260k, GGUF)")
	fs.IntVar(&c.CancelAfter, "cancel-after", 0, "leave each request after this many responses (0: never); engine stop times need --embedded")
	fs.DurationVar(&c.Pause, "pause", time.Second, "pause between transports")
	fs.Group("Servers")
	fs.StringVar(&c.HTTP, "http", "127.0.0.1:8080", "gateway `address`")
	fs.StringVar(&c.GRPC, "grpc", "127.0.0.1:8001", "engine gRPC `address` (direct baseline)")
	fs.StringVar(&c.APIKey, "api-key", "", "API `key` sent to the gateway with every request (Authorization: Bearer), for a gateway with keys")
	fs.StringVar(&v.pids, "server-pid", "", "server process ids to measure (comma-separated); default: the local listeners of --http and --grpc")
	fs.BoolVar(&c.Embedded, "embedded", false, "run an engine and gateway in this process on loopback ports instead of --http/--grpc")
	fs.StringVar(&c.Redis, "embedded-redis", "", "with --embedded: the gateway's shared store (serve's --redis `URL`); empty: in-process")
	fs.IntVar(&c.QueueBytes, "embedded-queue-bytes", 0, "with --embedded: memory each request holds of its own for responses its client has not read (serve's --queue-bytes; 0: its default)")
	fs.BoolVar(&c.Spawn, "spawn", false, "start a fresh 'streamgate serve' (this binary) for every run, on loopback ports of its own, instead of using --http/--grpc; its GC is traced (preset hold: default true)")
	fs.StringVar(&v.spawnArgs, "spawn-args", "", "flags added to the spawned servers' (space-separated; they already get --max-streams of twice --c and the --upstream-streams to carry them)")
	fs.BoolVar(&c.SpawnSplit, "spawn-split", false, "with --spawn, start 'streamgate engine' and 'streamgate gateway' as two processes (--spawn-args go to the gateway) and report the gateway's own memory per stream (preset hold: default true)")
	fs.StringVar(&c.SpawnBinary, "spawn-binary", "", "the streamgate binary --spawn starts (default: this one), e.g. an older build to compare")
	fs.Group("Clients")
	fs.IntVar(&c.DirectStreams, "direct-streams", 0, "direct: share this many ModelStreamInfer streams (0: one stream per request)")
	fs.IntVar(&c.WSPerSocket, "ws-per-socket", 64, "ws: concurrent requests per socket")
	fs.BoolVar(&c.HTTP2, "http2", false, "sse and chat: HTTP/2 without TLS (h2c, prior knowledge) to the gateway, --h2-per-conn streams per connection, instead of one HTTP/1.1 connection per stream; a spawned or embedded gateway gets --h2c and room for them (--max-streams-per-conn)")
	fs.IntVar(&c.H2PerConn, "h2-per-conn", 64, "with --http2: concurrent requests per HTTP/2 connection (connections = ⌈c / this⌉; a spawned or embedded gateway allows twice this per connection); above the gateway's --max-streams-per-conn they are refused (429), above twice it they wait")
	fs.Group("Report and profiles")
	fs.BoolVar(&c.JSON, "json", false, "print the report as JSON")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of this process (with --embedded: server and load generator)")
	fs.StringVar(&c.MemProfile, "memprofile", "", "write a heap profile of this process to FILE.<transport> as each window closes, at full load")
	return v
}

// config is the Config of v once fs, where v's flags are, is parsed:
// the preset fills in what no flag (nor its variable) set.
func (v *flagValues) config(fs *cli.FlagSet) (Config, error) {
	c := v.c
	transports := &v.transports
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) {
		set[f.Name] = true
		c.Args = append(c.Args, "--"+f.Name+"="+f.Value.String())
	})

	if c.Preset != "" {
		p, ok := presets[c.Preset]
		if !ok {
			return c, fmt.Errorf("unknown preset %q (relay, latency, hold, cancel, ws-mux, sequence, streams, ttft)", c.Preset)
		}
		apply := func(name string, f func()) {
			if !set[name] {
				f()
			}
		}
		apply("transport", func() { *transports = strings.Join(p.transports, ",") })
		apply("c", func() { c.Concurrency = p.conc })
		apply("responses", func() { c.Responses = p.responses })
		apply("delay", func() { c.Delay = p.delay })
		apply("duration", func() { c.Duration = p.duration })
		apply("warmup", func() { c.Warmup = p.warmup })
		apply("ramp", func() { c.Ramp = p.ramp })
		apply("cancel-after", func() { c.CancelAfter = p.cancelAfter })
		apply("baseline-last", func() { c.BaselineLast = p.baselineLast })
		if p.model != "" {
			apply("model", func() { c.Model = p.model })
		}
		apply("spawn", func() { c.Spawn = p.spawn && !c.Embedded })
		apply("spawn-split", func() { c.SpawnSplit = p.spawn && !c.Embedded })
		if p.perSocket > 0 {
			apply("ws-per-socket", func() { c.WSPerSocket = p.perSocket })
		}
		if p.gguf && !isGGUF(c.Model) {
			return c, fmt.Errorf("preset %s runs on a GGUF model: give --model FILE.gguf", c.Preset)
		}
	}
	if isGGUF(c.Model) {
		c.GGUF, c.Model = c.Model, modelcache.GGUFName(c.Model)
	}
	for _, t := range strings.Split(*transports, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		if !slices.Contains(knownTransports, t) {
			return c, fmt.Errorf("unknown transport %q (%s)", t, strings.Join(knownTransports, ", "))
		}
		if !slices.Contains(c.Transports, t) {
			c.Transports = append(c.Transports, t)
		}
	}
	c.SpawnArgs = strings.Fields(v.spawnArgs)
	if v.pids != "" {
		for _, p := range strings.Split(v.pids, ",") {
			pid, err := strconv.Atoi(strings.TrimSpace(p))
			if err != nil || pid <= 0 {
				return c, fmt.Errorf("--server-pid: bad pid %q", p)
			}
			c.ServerPIDs = append(c.ServerPIDs, pid)
		}
	}
	return c, c.validate()
}

func (c *Config) validate() error {
	switch {
	case len(c.Transports) == 0:
		return errors.New("no transport given")
	case c.GGUF == "" && c.Model != modelRepeat && c.Model != modelEcho && c.Model != modelStories && c.Model != modelTranscribe:
		return fmt.Errorf("unknown model %q (repeat_int32, echo, stories260k, transcribe, FILE.gguf)", c.Model)
	case c.GGUF != "" && !c.Embedded && !c.Spawn:
		return fmt.Errorf("--model %s: a GGUF file is served by the bench's own server: add --embedded or --spawn", c.GGUF)
	case c.Model == modelTranscribe && c.Responses < 2:
		return errors.New("--responses: a transcribe sequence needs at least 2 chunks")
	case c.Model == modelTranscribe && c.CancelAfter > 0:
		return errors.New("--cancel-after does not apply to transcribe sequences")
	case c.Concurrency < 1:
		return errors.New("--c must be at least 1")
	case c.Rate < 0:
		return errors.New("--rate must not be negative")
	case c.Duration <= 0:
		return errors.New("--duration must be positive")
	case c.Responses < 1:
		return errors.New("--responses must be at least 1")
	case c.Delay < 0 || c.Delay%time.Millisecond != 0:
		return errors.New("--delay must be a non-negative whole number of milliseconds")
	case c.WSPerSocket < 1:
		return errors.New("--ws-per-socket must be at least 1")
	case c.H2PerConn < 1:
		return errors.New("--h2-per-conn must be at least 1")
	case c.DirectStreams < 0:
		return errors.New("--direct-streams must not be negative")
	case c.CancelAfter < 0 || c.CancelAfter > 0 && c.CancelAfter >= c.Responses:
		return errors.New("--cancel-after must be below --responses")
	case c.Spawn && c.Embedded:
		return errors.New("--spawn and --embedded exclude each other")
	case c.CancelAfter == 0 && (slices.Contains(c.Transports, "sse-resume") || slices.Contains(c.Transports, "sse-delete")):
		return errors.New("sse-resume and sse-delete leave each request after --cancel-after responses: set it")
	case c.Redis != "" && !c.Embedded:
		return errors.New("--embedded-redis is for --embedded (give --spawn-args=--redis=URL to spawned servers)")
	}
	if !c.Embedded && !c.Spawn {
		for _, a := range []string{c.HTTP, c.GRPC} {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return fmt.Errorf("address %q: %w", a, err)
			}
		}
	}
	return nil
}

// isGGUF reports whether model names a GGUF file.
func isGGUF(model string) bool { return strings.HasSuffix(strings.ToLower(model), ".gguf") }

// textModel is the --model an embedded engine loads ("" for none): the
// GGUF file or stories260k.
func (c *Config) textModel() string {
	switch {
	case c.GGUF != "":
		return c.GGUF
	case c.Model == modelStories:
		return modelStories
	}
	return ""
}

// plannedRun is one transport run of an invocation.
type plannedRun struct {
	transport string
	wl        workload
}

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
			if !c.Embedded {
				notes = append(notes, fmt.Sprintf("chat skipped: OpenAI requests cannot carry echo's delay_ms, so a %v cadence needs --embedded (which serves a paced echo model, %s)", wl.Delay, pacedEcho))
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
	need := uint64(conns)*2 + 256 // embedded: both ends of every connection
	if nofile > 0 && nofile < need {
		fmt.Fprintf(stderr, "bench: warning: open-file limit %d may be too low for %d streams\n", nofile, c.Concurrency)
	}

	runs, notes := c.plan()
	rep.Notes = append(rep.Notes, notes...)
	var emb *embedded
	var pids []int
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
		if i > 0 && c.Pause > 0 {
			runtime.GC()
			backend.Sleep(ctx, c.Pause)
		}
		var sp *spawned
		if c.Spawn {
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
			if sp, err = spawnServer(ctx, c.SpawnBinary, c.SpawnSplit, args); err != nil {
				return err
			}
			c.HTTP, c.GRPC, pids = sp.http, sp.grpc, sp.pids()
			rep.HTTP, rep.GRPC = "spawned", "spawned"
		}
		tr, err := c.newTransport(pr)
		if err != nil {
			if sp != nil {
				sp.stop()
			}
			return fmt.Errorf("%s: %w", pr.transport, err)
		}
		spec := runSpec{
			name: pr.transport, tr: tr, wl: pr.wl, conc: c.Concurrency, rate: c.Rate,
			duration: c.Duration, warmup: c.Warmup, ramp: c.Ramp, requests: c.Requests,
			cancelAfter: c.CancelAfter, pids: pids, embedded: c.Embedded, serial: &serial,
		}
		if sp != nil {
			spec.gc = sp.gcWindow
			if c.SpawnSplit {
				gw := sp.gateway()
				spec.gatewayPID, spec.gatewayGC = gw.cmd.Process.Pid, gw.gc.window
			}
		}
		if c.MemProfile != "" {
			spec.atWindowEnd = func() { writeHeapProfile(c.MemProfile+"."+pr.transport, stderr) }
		}
		if emb != nil && c.CancelAfter > 0 && pr.wl.Kind == modelRepeat {
			spec.tracker = emb.tracker
			emb.tracker.enable(true)
		}
		fmt.Fprintf(stderr, "bench: %s %s, %d streams, %v + %v warmup...\n", pr.transport, pr.wl, c.Concurrency, c.Duration, c.Warmup)
		res := run(ctx, spec)
		if h, ok := tr.(*httpStream); ok && h.h2 != nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s over HTTP/2 (h2c): %d connections, up to %d streams each", pr.transport, h.h2.connections(), c.H2PerConn))
		}
		tr.close()
		if sp != nil {
			sp.stop()
		}
		if emb != nil {
			emb.tracker.enable(false)
		}
		fmt.Fprintf(stderr, "bench: %s: %.0f responses/s, %.0f requests/s, %d errors\n", pr.transport, res.RespPerSec, res.ReqPerSec, res.errorCount())
		rep.Results = append(rep.Results, res)
	}
	for _, r := range rep.Results {
		if r.Transport == "direct" {
			continue
		}
		for _, b := range rep.Results {
			if b.Transport == "direct" && b.Model == r.Model && b.Workload == r.Workload {
				r.Ratios = compare(r, b)
			}
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
