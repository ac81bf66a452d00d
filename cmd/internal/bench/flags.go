package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/streamgate/streamgate/cmd/internal/cli"
	"github.com/streamgate/streamgate/cmd/internal/modelcache"
)

// Flags: `streamgate bench`'s command, its flags and the Config they
// make, checked before anything runs.

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
				if v.floorServe != "" {
					return serveFloor(ctx, v.floorServe, stderr)
				}
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
	floorServe                  string
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
	fs.IntVar(&c.SlopeAt, "slope-at", 0, "with --spawn, run every transport again at `N` streams, on a fresh server, and report memory's growth per added stream between --c and N (RSS, and the live heap and stacks): a stream's own cost, without the fixed cost every process has (the runtime, the --gc-min-heap floor)")
	fs.StringVar(&c.SpawnBinary, "spawn-binary", "", "the streamgate binary --spawn starts (default: this one), e.g. an older build to compare")
	fs.BoolVar(&c.Floor, "floor", false, "after each sse and ws run, run its load against a floor server that does only the relay's unavoidable work (a client write per response, upstream reads shared) and report the gateway over it; repeat_int32 over HTTP/1.1")
	fs.DurationVar(&c.FloorTick, "floor-tick", time.Millisecond, "with --floor: the floor's upstream sends the responses due every this long, one read for them all (0: each when due)")
	fs.StringVar(&v.floorServe, "floor-serve", "", "internal: be the floor server --floor starts, paced from `ADDR`")
	fs.Group("Clients")
	fs.IntVar(&c.DirectStreams, "direct-streams", 0, "direct: share this many ModelStreamInfer streams (0: one stream per request)")
	fs.IntVar(&c.WSPerSocket, "ws-per-socket", 64, "ws: concurrent requests per socket")
	fs.BoolVar(&c.HTTP2, "http2", false, "sse and chat: HTTP/2 without TLS (h2c, prior knowledge) to the gateway, --h2-per-conn streams per connection, instead of one HTTP/1.1 connection per stream; a spawned or embedded gateway gets --h2c and room for them (--max-streams-per-conn)")
	fs.IntVar(&c.H2PerConn, "h2-per-conn", 64, "with --http2: concurrent requests per HTTP/2 connection (connections = ⌈c / this⌉; a spawned or embedded gateway allows twice this per connection); above the gateway's --max-streams-per-conn they are refused (429), above twice it they wait")
	fs.Group("Report and profiles")
	fs.BoolVar(&c.JSON, "json", false, "print the report as JSON")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of this process (with --embedded: server and load generator)")
	fs.StringVar(&c.Llamacpp, "llamacpp", "", "ttft preset: the node-llama-cpp project (engine/internal/llamacpp after npm install) that times llama.cpp's prompt processing of the same prompt and file beside ours (default: engine/internal/llamacpp under the working directory when installed; without it the reference is left out)")
	fs.IntVar(&c.LlamacppThreads, "llamacpp-threads", 0, "ttft preset: llama.cpp's threads (0: GOMAXPROCS, the engine's workers)")
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
	case c.SlopeAt < 0 || c.SlopeAt > 0 && c.SlopeAt == c.Concurrency:
		return errors.New("--slope-at must be a stream count other than --c")
	case c.SlopeAt > 0 && !c.Spawn:
		return errors.New("--slope-at needs --spawn: each count is measured on a fresh server")
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
	case c.Floor && (c.Model != modelRepeat || c.HTTP2):
		return errors.New("--floor serves repeat_int32 over HTTP/1.1 only: drop --model and --http2")
	case c.FloorTick < 0:
		return errors.New("--floor-tick must not be negative")
	case c.Floor && !slices.ContainsFunc(c.Transports, hasFloor):
		return errors.New("--floor measures the sse and ws transports: add one")
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
