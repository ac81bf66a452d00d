package stack

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/streamgate/streamgate/cmd/internal/cli"
	"github.com/streamgate/streamgate/cmd/internal/gctune"
	"github.com/streamgate/streamgate/cmd/internal/telemetry"
	"github.com/streamgate/streamgate/cmd/internal/tlsfiles"
	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/engine/backend"
	"github.com/streamgate/streamgate/engine/builtin"
	"github.com/streamgate/streamgate/engine/llama2"
	"github.com/streamgate/streamgate/gateway"
	"github.com/streamgate/streamgate/gateway/sse"
	"github.com/streamgate/streamgate/gateway/store"
	"github.com/streamgate/streamgate/gateway/ws"
	"github.com/streamgate/streamgate/upstream"
	"github.com/streamgate/streamgate/upstream/budget"
)

// Flags is what the engine, gateway and serve commands read from their
// flags and the environment. Parse fills it; Config turns it into a stack.
type Flags struct {
	// Command is "engine", "gateway" or "serve".
	Command string
	Engine  EngineFlags  // engine and serve
	Gateway GatewayFlags // gateway and serve
	// ShutdownGrace is how long running streams may take to finish on
	// SIGTERM.
	ShutdownGrace time.Duration
	// GCMinHeap is the heap the garbage collector may grow to before a
	// cycle while the live heap is small (gctune); 0 leaves GOGC alone.
	GCMinHeap uint64
	Log       LogFlags
}

// EngineFlags are the engine's flags.
type EngineFlags struct {
	GRPC       string
	Metrics    string // engine only: serve's metrics are on the gateway
	Models     string
	ModelDir   string
	Model      string
	ModelCache string
	// MaxContext caps a GGUF model's context length; KVCacheMB is each
	// GGUF model's KV-cache memory (0: the backend's defaults).
	MaxContext int
	KVCacheMB  int
	// NoMmap copies a GGUF model's weights into memory (onto huge pages
	// where the OS has them) instead of reading them where the file is
	// mapped.
	NoMmap bool
	// Readiness: how long a model may make no progress with work queued
	// before it reports not ready, and whether one such model makes the
	// whole server not ready (Triton's strict readiness).
	StallTimeout    time.Duration
	StrictReadiness bool
	// TLS: the engine command only; serve's engine is plaintext on
	// loopback.
	TLS tlsfiles.ServerFiles
}

// GatewayFlags are the gateway's flags.
type GatewayFlags struct {
	HTTP     string
	Upstream string // gateway only: serve's upstream is its engine

	// Redis is the URL of the shared store; empty: in-process.
	Redis string
	// KeysFile is the API keys file of a single replica (without Redis).
	KeysFile string
	// NoKeys serves without API keys even with Redis.
	NoKeys bool
	// KeyCacheTTL is how long a replica keeps a key it validated in Redis.
	KeyCacheTTL time.Duration
	// LimitsOnStoreFailure is open or closed: what per-key limits do
	// while Redis fails.
	LimitsOnStoreFailure string
	// Resumable, ResumeGrace, ResumeTTL and ResumeFlush: gateway.Options'.
	Resumable   string
	ResumeGrace time.Duration
	ResumeTTL   time.Duration
	ResumeFlush time.Duration

	// Transport: HTTPS (HTTP/2 by ALPN) or, plaintext, h2c.
	TLS tlsfiles.ServerFiles
	H2C bool

	// Upstream TLS (gateway only).
	UpstreamTLS   bool
	UpstreamFiles tlsfiles.ClientFiles

	// Upstream client.
	Cancel         string
	StreamsPer     int
	Transport      string // upstream.Options.Transport
	HealthInterval time.Duration
	HealthTimeout  time.Duration
	IdleTimeout    time.Duration
	ModelIdle      string // NAME=DURATION[,...]

	// Responses waiting for slow clients.
	QueueBytes         int64
	QueueMemory        int64
	ClientStallTimeout time.Duration

	// Requests and errors.
	MaxBody     int64
	BodyTimeout time.Duration
	BodyMinRate int64
	MaxStreams  int
	MaxPerConn  int
	RetryAfter  time.Duration

	// Event streams.
	SSEKeepalive    time.Duration
	SSEWriteTimeout time.Duration

	// WebSocket.
	WSMaxInFlight     int
	WSOrigins         string
	WSSkipOriginCheck bool
	WSWriteTimeout    time.Duration
	WSQueueBytes      int64
	WSPingInterval    time.Duration
	WSPingTimeout     time.Duration

	// WebSocket sequences (client-side streaming).
	WSMaxSequences  int
	WSMaxChunkBytes int
	WSChunkRate     float64
	WSSequenceQueue int
	WSSequenceIdle  time.Duration

	// Browsers on other origins, and the names an open gateway answers.
	Origins      string
	CORSOrigins  string
	AllowedHosts string

	// Responses API.
	ResponseTTL time.Duration
	KeyStorage  int64
	StorageCap  int64
}

func (f *EngineFlags) register(fs *cli.FlagSet, engineOnly bool) {
	fs.Group("Listen addresses")
	fs.StringVar(&f.GRPC, "grpc", "127.0.0.1:8001", "engine gRPC listen `address`: HOST:PORT, :PORT (every interface), a PORT alone (loopback) or a unix socket, unix:PATH; Triton's default port is 8001")
	if engineOnly {
		fs.StringVar(&f.Metrics, "metrics", "", "HTTP listen `address` of the engine's Prometheus /metrics (Triton's default port is 8002); empty serves none")
		fs.Group("TLS and HTTP/2")
		registerServerTLS(fs, &f.TLS, "serve gRPC over TLS", "clients (gateways)")
	}
	fs.Group("Models")
	fs.StringVar(&f.Models, "models", "", "model repository `directory` in Triton's layout (<dir>/<model>/config.pbtxt); empty serves the built-in models")
	fs.StringVar(&f.ModelDir, "model-dir", "", "`directory` with llama2.c weights (stories260K.bin, tok512.bin; stories15M.bin, tokenizer.bin; ...), searched first; then shared/models in and above the working directory and the binary's, then the model cache")
	fs.StringVar(&f.Model, "model", "", "models to serve: `NAME[,NAME...]`, each a name 'streamgate models list' shows or the path of a GGUF file (served under its file name, lower-case, without .gguf), each an error when not found; empty serves stories260k and every other known model that is found, GGUF files in the model cache included")
	fs.IntVar(&f.MaxContext, "max-context", llama2.DefaultMaxContext, "cap on a GGUF model's context length in `tokens` (the file's own length when smaller)")
	fs.BoolVar(&f.NoMmap, "no-mmap", false, "copy a GGUF model's weights into memory, on huge pages where the OS has them, instead of mapping the file: faster decoding (about 1.5x on the machine measured), at the cost of one copy at load and no page cache shared with other processes")
	fs.IntVar(&f.KVCacheMB, "kv-cache-mb", llama2.DefaultKVCacheMB, "KV-cache memory of each GGUF model in `MiB`: concurrent generations are limited to what fits (at most 16)")
	RegisterModelCache(fs, &f.ModelCache)
	fs.Group("Readiness")
	fs.DurationVar(&f.StallTimeout, "stall-timeout", engine.DefaultStallTimeout, "a model with requests queued, every instance busy and nothing started or finished for this long reports not ready")
	fs.BoolVar(&f.StrictReadiness, "strict-readiness", true, "ServerReady is false while any model is not ready, as Triton's default --strict-readiness; false keeps the server ready (a gateway then keeps sending the other models' requests)")
}

func (f *GatewayFlags) register(fs *cli.FlagSet, withUpstream bool) {
	fs.Group("Listen addresses")
	fs.StringVar(&f.HTTP, "http", "127.0.0.1:8080", "gateway HTTP listen `address`: HOST:PORT, :PORT (every interface) or a PORT alone (loopback)")
	fs.Group("TLS and HTTP/2")
	registerServerTLS(fs, &f.TLS, "serve HTTPS (HTTP/2 by ALPN beside HTTP/1.1)", "clients")
	fs.BoolVar(&f.H2C, "h2c", false, "plaintext listener also speaks HTTP/2 to clients that know it in advance (a balancer's cleartext HTTP/2 to its backends); not with --tls-cert")
	fs.Group("Upstream")
	if withUpstream {
		fs.StringVar(&f.Upstream, "upstream", "127.0.0.1:8001", "engine or Triton gRPC `targets`: ADDR[,ADDR...] (HOST:PORT or a unix socket, unix:PATH) or dns:///name:port")
	}
	fs.StringVar(&f.Cancel, "cancel", "auto", "upstream cancellation `mode`: auto, inband, stream or none")
	fs.IntVar(&f.StreamsPer, "upstream-streams", 64, "pooled ModelStreamInfer streams per upstream target")
	fs.StringVar(&f.Transport, "upstream-transport", upstream.TransportH2, "`transport` of the pooled ModelStreamInfer streams: h2 (an HTTP/2 connection per stream, read without grpc-go) or grpc (grpc-go, multiplexed on one connection per target). Health checks, metadata and the per-request streams of --cancel stream stay on grpc-go either way")
	fs.DurationVar(&f.HealthInterval, "health-interval", 2*time.Second, "how often each upstream target is checked with ServerReady; negative disables checks")
	fs.DurationVar(&f.HealthTimeout, "health-timeout", upstream.DefaultHealthTimeout, "bound of one upstream health check; a check that misses it counts as unanswered")
	fs.DurationVar(&f.IdleTimeout, "upstream-idle-timeout", time.Minute, "end a request when upstream sends nothing for it this long (first response included): 504 upstream_timeout before its response started, an error event or frame after; negative disables")
	fs.StringVar(&f.ModelIdle, "upstream-idle-timeout-model", "", "--upstream-idle-timeout per model, `NAME=DURATION[,...]` (e.g. stories110m=5m; negative disables it for that model)")
	if withUpstream {
		fs.Group("Upstream TLS")
		fs.BoolVar(&f.UpstreamTLS, "upstream-tls", false, "connect to the upstream targets over TLS (Triton's --grpc-use-ssl)")
		fs.StringVar(&f.UpstreamFiles.CA, "upstream-ca", "", "CA bundle `file` (PEM) the targets' certificates must chain to; empty: the system's roots (needs --upstream-tls)")
		fs.StringVar(&f.UpstreamFiles.Cert, "upstream-cert", "", "client certificate chain `file` (PEM) for targets that require one (Triton's --grpc-use-ssl-mutual), reloaded when the file changes (needs --upstream-tls)")
		fs.StringVar(&f.UpstreamFiles.Key, "upstream-key", "", "private key `file` (PEM) of --upstream-cert")
		fs.StringVar(&f.UpstreamFiles.ServerName, "upstream-server-name", "", "`name` the targets' certificates must carry; empty: each target's host (for dns:///name:port, name) (needs --upstream-tls)")
	}
	fs.Group("Slow clients")
	fs.Int64Var(&f.QueueBytes, "queue-bytes", upstream.DefaultQueueBytes, "memory each request may hold of its own for responses its client has not read yet; beyond it the request borrows from --queue-memory")
	fs.Int64Var(&f.QueueMemory, "queue-memory", upstream.DefaultMemory, "memory shared by every request and WebSocket for responses their clients have not read yet, beyond their own; a request that needs more when it is spent fails (memory_budget), a socket is closed with 1008")
	fs.DurationVar(&f.ClientStallTimeout, "client-stall-timeout", 30*time.Second, "a request whose client reads nothing for this long while responses wait for it fails (too_slow); a slow client that makes progress never does; negative disables")
	fs.Group("Limits and errors")
	fs.Int64Var(&f.MaxBody, "max-body", 1<<20, "largest request body in `bytes` (413 beyond)")
	fs.DurationVar(&f.BodyTimeout, "body-timeout", 10*time.Second, "how long a request body may take to arrive, plus what --body-min-rate allows for its size (408 and the connection closed beyond); negative disables")
	fs.Int64Var(&f.BodyMinRate, "body-min-rate", 16<<10, "`bytes` per second a request body must arrive at, beyond --body-timeout")
	fs.IntVar(&f.MaxStreams, "max-streams", 4096, "inference requests in flight through the gateway (503 beyond)")
	fs.IntVar(&f.MaxPerConn, "max-streams-per-conn", 64, "inference requests in flight per client connection (429 beyond)")
	fs.DurationVar(&f.RetryAfter, "retry-after", time.Second, "Retry-After sent with 429 and 503 answers (rounded up to seconds)")
	fs.Group("Event streams (SSE)")
	fs.DurationVar(&f.SSEKeepalive, "sse-keepalive", 15*time.Second, "interval of SSE ': keepalive' comments; negative disables them")
	fs.DurationVar(&f.SSEWriteTimeout, "sse-write-timeout", 30*time.Second, "bound of writing one batch of SSE events; a client that does not read for this long is dropped; negative disables")
	fs.Group("WebSocket")
	fs.IntVar(&f.WSMaxInFlight, "ws-max-in-flight", 64, "requests in flight per WebSocket (too_many_requests beyond)")
	fs.BoolVar(&f.WSSkipOriginCheck, "ws-skip-origin-check", false, "accept WebSockets from any origin (unsafe for browsers with credentials)")
	fs.DurationVar(&f.WSWriteTimeout, "ws-write-timeout", 30*time.Second, "bound of writing one WebSocket frame; past it the socket is dropped")
	fs.Int64Var(&f.WSQueueBytes, "ws-queue-bytes", 4<<20, "frames waiting for one WebSocket's client, in bytes, beyond which the socket is closed with 1008 at once")
	fs.DurationVar(&f.WSPingInterval, "ws-ping-interval", 30*time.Second, "interval of WebSocket pings; negative disables them")
	fs.DurationVar(&f.WSPingTimeout, "ws-ping-timeout", 15*time.Second, "how long a pong may take before the socket is dropped")
	fs.Group("WebSocket sequences (client-side streaming)")
	fs.IntVar(&f.WSMaxSequences, "ws-max-sequences", 32, "sequences open at once per WebSocket (too_many_sequences beyond)")
	fs.IntVar(&f.WSMaxChunkBytes, "ws-max-chunk-bytes", 64<<10, "largest chunk of a sequence in bytes (a frame's body, a binary frame's data); a larger one ends its sequence (chunk_too_large)")
	fs.Float64Var(&f.WSChunkRate, "ws-chunk-rate", 100, "sequence chunks per second per WebSocket, in bursts of a second's worth; beyond it a chunk ends its sequence (too_many_chunks); negative disables")
	fs.IntVar(&f.WSSequenceQueue, "ws-sequence-queue", 32, "chunks of one sequence that may wait while the previous one runs; one more ends the sequence (too_many_chunks)")
	fs.DurationVar(&f.WSSequenceIdle, "ws-sequence-idle", 30*time.Second, "a sequence whose client sends no chunk for this long is ended (sequence_idle), sooner when the model's max_sequence_idle is shorter; negative leaves only the model's")
	RegisterKeyStore(fs, &f.Redis, &f.KeysFile)
	fs.BoolVar(&f.NoKeys, "no-keys", false, "serve without API keys even with --redis (behind a proxy that authenticates callers): anyone who reaches the gateway may use it, with no per-key limits")
	fs.DurationVar(&f.KeyCacheTTL, "key-cache-ttl", store.DefaultKeyCacheTTL, "with --redis: how long a replica keeps an API key it validated (0: it asks Redis for every request); a key revoked while Redis is up stops working on every replica within about a second (pub/sub), while Redis is down a cached key works until its entry expires")
	fs.StringVar(&f.LimitsOnStoreFailure, "limits-on-store-failure", "open", "with --redis: the `policy` of per-key limits while Redis fails: open (each replica enforces its share, the limit divided by the replicas last seen, counted in streamgate_gateway_limits_local_total) or closed (503)")
	fs.Group("Resumable streams")
	fs.StringVar(&f.Resumable, "resumable", gateway.ResumableOptIn, "which event streams and WebSocket requests are resumable: never, opt-in (those that ask with Streamgate-Resumable: true or \"resumable\": true) or always")
	fs.DurationVar(&f.ResumeGrace, "resume-grace", 30*time.Second, "how long a resumable stream's request runs on once its client has left, waiting for it to resume, before it is cancelled")
	fs.DurationVar(&f.ResumeTTL, "resume-ttl", 10*time.Minute, "how long a resumable stream can be read again after its end")
	fs.DurationVar(&f.ResumeFlush, "resume-flush-interval", 150*time.Millisecond, "how long a resumable stream's events gather before they are written to the store in one round trip; readers following it live see them up to this late (its live client does not wait), and a replica that dies loses at most about this much of its logs; 0 writes each batch at once")
	fs.Group("Responses API")
	fs.DurationVar(&f.ResponseTTL, "response-ttl", gateway.DefaultResponseTTL, "how long a stored response (POST /v1/responses with store, the default) can be read, continued, cancelled and deleted after its last write")
	fs.Int64Var(&f.KeyStorage, "key-storage", gateway.DefaultKeyStorage, "`bytes` of stored responses an API key may keep until they expire or are deleted, unless the key sets its own (keys create --storage); beyond it storing gets 400 storage_limit_exceeded")
	fs.Int64Var(&f.StorageCap, "storage-cap", gateway.DefaultStorageCap, "`bytes` of stored responses the gateway keeps for all keys (or, without keys, all clients) together; beyond it storing gets 400 storage_limit_exceeded")
	fs.Group("Browsers on other origins (CORS, WebSocket) and host names")
	fs.StringVar(&f.Origins, "origins", "", "origins whose browser pages may call the HTTP routes (CORS) and open /v1/ws, comma-separated `patterns` of the origin or its host (e.g. https://app.example.com,*.example.org, or * for any); empty: the gateway's own origin only")
	fs.StringVar(&f.CORSOrigins, "cors-origins", "", "the same as --origins (its former name), added to it")
	fs.StringVar(&f.WSOrigins, "ws-origins", "", "the same as --origins (the former list of /v1/ws only), added to it")
	fs.StringVar(&f.AllowedHosts, "allowed-hosts", "", "host `names` (comma-separated patterns, * for any) a gateway without API keys answers besides localhost and IP addresses; any other Host header gets 403, so that a page whose name rebinds to this address cannot use it; with keys, set it to check the Host too")
}

// commands are the commands whose flags Register defines: the stack's
// processes.
var commands = []string{"serve", "engine", "gateway"}

// Register defines the flags of command ("serve", "engine" or "gateway"),
// in groups, on fs, and returns the Flags that parsing fs fills in. Any
// other command is a wiring error: Register panics.
func Register(fs *cli.FlagSet, command string) *Flags {
	f := &Flags{Command: command}
	switch command {
	case "engine":
		f.Engine.register(fs, true)
	case "gateway":
		f.Gateway.register(fs, true)
	case "serve":
		f.Engine.register(fs, false)
		f.Gateway.register(fs, false)
	default:
		panic(fmt.Sprintf("stack: unknown command %q", command))
	}
	// What other servers call their port flag.
	port := "http"
	if command == "engine" {
		port = "grpc"
	}
	for _, name := range []string{"port", "p", "listen", "addr", "address", "bind", "host"} {
		fs.SeeAlso(name, port)
	}
	f.Log.register(fs)
	fs.Group("Shutdown")
	fs.DurationVar(&f.ShutdownGrace, "shutdown-grace", 10*time.Second, "on SIGTERM, how long running streams may take to finish")
	fs.Group("Garbage collector")
	fs.Uint64Var(&f.GCMinHeap, "gc-min-heap", gctune.DefaultMinHeap, "`bytes` the heap may grow to before a collection while little of it is live (GOGC still applies above it; the GOGC and GOMEMLIMIT variables are honoured); 0 leaves GOGC alone")
	telemetry.RegisterEnv(fs)
	return f
}

// Parse reads command's flags ("engine", "gateway" or "serve") from the
// environment variables STREAMGATE_<FLAG> (upper case, dashes as
// underscores), then from args, which win (cli.Parse). Errors name the
// variable or flag at fault; flag.ErrHelp after --help.
func Parse(command string, args []string) (*Flags, error) {
	if !slices.Contains(commands, command) {
		return nil, fmt.Errorf("stack: unknown command %q", command)
	}
	fs := cli.NewFlagSet(command)
	f := Register(fs, command)
	rest, err := cli.Parse(fs, args)
	if err != nil {
		return nil, err
	}
	if len(rest) > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", rest)
	}
	return f, nil
}

// Config is the stack f describes, logging to log (nil: nowhere).
func (f *Flags) Config(log *slog.Logger) (Config, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := Config{Logger: log}
	var err error
	// Listen addresses first: a bad one is refused before anything starts.
	for _, a := range []struct {
		flag  string
		addr  *string
		parse func(string) (string, error)
	}{{"--grpc", &f.Engine.GRPC, GRPCListenAddr}, {"--metrics", &f.Engine.Metrics, ListenAddr}, {"--http", &f.Gateway.HTTP, ListenAddr}} {
		if *a.addr, err = a.parse(*a.addr); err != nil {
			return cfg, fmt.Errorf("%s: %w", a.flag, err)
		}
	}
	if f.Command != "gateway" {
		text, err := TextModels(f.Engine, log)
		if err != nil {
			return cfg, err
		}
		cfg.Engine = &engine.Options{
			ModelDir:   f.Engine.Models,
			Repository: builtin.FS,
			Backends:   Backends(),
			Extra:      text,

			StallTimeout: f.Engine.StallTimeout,
			LaxReadiness: !f.Engine.StrictReadiness,
		}
		cfg.EngineAddr = f.Engine.GRPC
		cfg.MetricsAddr = f.Engine.Metrics
		if cfg.Engine.TLS, err = serverTLS(f.Engine.TLS, log); err != nil {
			return cfg, err
		}
	}
	if f.Command == "engine" {
		return cfg, nil
	}
	g := &f.Gateway
	mode, err := upstream.ParseCancelMode(g.Cancel)
	if err != nil {
		return cfg, err
	}
	if cfg.TLS, err = serverTLS(g.TLS, log); err != nil {
		return cfg, err
	}
	if g.H2C && cfg.TLS != nil {
		return cfg, errors.New("--h2c is for a plaintext listener: with --tls-cert, HTTP/2 is negotiated by ALPN")
	}
	cfg.H2C = g.H2C
	upTLS, err := upstreamTLS(g.UpstreamTLS, g.UpstreamFiles, log)
	if err != nil {
		return cfg, err
	}
	cfg.Upstream = SplitList(g.Upstream)
	if f.Command == "gateway" && len(cfg.Upstream) == 0 {
		return cfg, fmt.Errorf("--upstream: no targets")
	}
	modelIdle, err := parseDurations(g.ModelIdle)
	if err != nil {
		return cfg, fmt.Errorf("--upstream-idle-timeout-model: %w", err)
	}
	if g.QueueBytes <= 0 || g.QueueMemory <= 0 || g.WSQueueBytes <= 0 {
		return cfg, fmt.Errorf("--queue-bytes, --queue-memory and --ws-queue-bytes must be positive")
	}
	if g.Transport != upstream.TransportGRPC && g.Transport != upstream.TransportH2 {
		return cfg, fmt.Errorf("--upstream-transport: %q is neither %s nor %s", g.Transport, upstream.TransportGRPC, upstream.TransportH2)
	}
	mem := budget.New(g.QueueMemory) // shared by upstream's queues and the sockets'
	cfg.UpstreamOptions = &upstream.Options{
		Cancel:              mode,
		MaxStreamsPerTarget: g.StreamsPer,
		Transport:           g.Transport,
		QueueBytes:          int(g.QueueBytes),
		Memory:              mem,
		StallTimeout:        g.ClientStallTimeout,
		HealthInterval:      g.HealthInterval,
		HealthTimeout:       g.HealthTimeout,
		IdleTimeout:         g.IdleTimeout,
		ModelIdleTimeouts:   modelIdle,
		TLS:                 upTLS,
	}
	cfg.HTTPAddr = g.HTTP
	cfg.Redis = g.Redis
	cfg.KeysFile, cfg.NoKeys = g.KeysFile, g.NoKeys
	if g.Redis != "" && g.KeysFile != "" {
		return Config{}, errors.New("--redis and --keys-file: give one; with --redis the API keys are in Redis")
	}
	if g.NoKeys && g.KeysFile != "" {
		return Config{}, errors.New("--no-keys and --keys-file: give one")
	}
	switch g.LimitsOnStoreFailure {
	case "open", "closed":
	default:
		return cfg, fmt.Errorf("--limits-on-store-failure %q: want open or closed", g.LimitsOnStoreFailure)
	}
	if g.KeyCacheTTL < 0 {
		return cfg, errors.New("--key-cache-ttl must not be negative")
	}
	cfg.KeyCacheTTL, cfg.LimitsOpen = g.KeyCacheTTL, g.LimitsOnStoreFailure == "open"
	switch g.Resumable {
	case gateway.ResumableNever, gateway.ResumableOptIn, gateway.ResumableAlways:
	default:
		return cfg, fmt.Errorf("--resumable %q: want never, opt-in or always", g.Resumable)
	}
	if g.ResumeGrace <= 0 || g.ResumeTTL <= 0 {
		return cfg, errors.New("--resume-grace and --resume-ttl must be positive")
	}
	if g.ResumeFlush < 0 {
		return cfg, errors.New("--resume-flush-interval must not be negative")
	}
	flush := g.ResumeFlush
	if flush == 0 {
		flush = -1 // resume.Options: write each batch at once
	}
	cfg.Gateway = &gateway.Options{
		Resumable:           g.Resumable,
		ResumeGrace:         g.ResumeGrace,
		ResumeTTL:           g.ResumeTTL,
		ResumeFlushInterval: flush,
		MaxBodyBytes:        g.MaxBody,
		BodyTimeout:         g.BodyTimeout,
		BodyMinRate:         g.BodyMinRate,
		MaxStreams:          g.MaxStreams,
		MaxStreamsPerConn:   g.MaxPerConn,
		RetryAfter:          g.RetryAfter,
		SSE:                 &sse.Options{KeepAlive: g.SSEKeepalive, WriteTimeout: g.SSEWriteTimeout},
		WebSocket: &ws.Options{
			MaxInFlight:  g.WSMaxInFlight,
			WriteTimeout: g.WSWriteTimeout,
			QueueBytes:   g.WSQueueBytes,
			Memory:       mem,
			PingInterval: g.WSPingInterval,
			PingTimeout:  g.WSPingTimeout,

			MaxSequences:  g.WSMaxSequences,
			MaxChunkBytes: g.WSMaxChunkBytes,
			ChunkRate:     g.WSChunkRate,
			SequenceQueue: g.WSSequenceQueue,
			SequenceIdle:  g.WSSequenceIdle,
		},
		WebSocketSkipOriginCheck: g.WSSkipOriginCheck,
		CORSOrigins:              SplitList(g.Origins + "," + g.CORSOrigins + "," + g.WSOrigins),
		AllowedHosts:             SplitList(g.AllowedHosts),
		ChatTemplates:            ChatTemplates(),
		UnloadedModels:           UnloadedModels(),
		ResponseTTL:              g.ResponseTTL,
		KeyStorage:               g.KeyStorage,
		StorageCap:               g.StorageCap,
	}
	return cfg, nil
}

// ListenAddr is the address to listen on that the flag value s means:
// HOST:PORT as given, :PORT on every interface, a PORT alone on loopback
// (127.0.0.1:PORT, as the defaults), "" as it is (nothing to serve).
// Anything else is an error that says what is wanted.
func ListenAddr(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	if _, err := strconv.ParseUint(s, 10, 16); err == nil {
		return net.JoinHostPort("127.0.0.1", s), nil
	}
	_, port, err := net.SplitHostPort(s)
	if err == nil {
		if _, perr := strconv.ParseUint(port, 10, 16); perr != nil {
			err = fmt.Errorf("port %q is not a number from 0 to 65535", port)
		}
	} else if strings.Contains(err.Error(), "missing port") {
		err = errors.New("missing port")
	}
	if err != nil {
		return "", fmt.Errorf("%q: %v; want HOST:PORT, :PORT (every interface) or a PORT alone (loopback)", s, err)
	}
	return s, nil
}

// GRPCListenAddr is ListenAddr for a gRPC listener, which may also be a
// unix socket, named as gRPC names one (unix:PATH, unix:///ABSOLUTE_PATH,
// unix-abstract:NAME) and as --upstream takes it.
func GRPCListenAddr(s string) (string, error) {
	if _, unix, err := upstream.SocketPath(s); unix {
		return s, err
	}
	return ListenAddr(s)
}

// ServiceName is the OpenTelemetry service.name of the process f runs
// (OTEL_SERVICE_NAME wins over it): "streamgate" for serve, whose one
// process is gateway and engine, "streamgate-gateway" and
// "streamgate-engine" for the others.
func (f *Flags) ServiceName() string {
	if f.Command == "serve" {
		return "streamgate"
	}
	return "streamgate-" + f.Command
}

func registerServerTLS(fs *cli.FlagSet, f *tlsfiles.ServerFiles, what, peers string) {
	fs.StringVar(&f.Cert, "tls-cert", "", "certificate chain `file` (PEM, leaf first) to "+what+" with --tls-key; reloaded when the files change")
	fs.StringVar(&f.Key, "tls-key", "", "private key `file` (PEM) of --tls-cert")
	fs.StringVar(&f.ClientCA, "tls-client-ca", "", "CA bundle `file` (PEM): "+peers+" must present a certificate it issued (mutual TLS)")
}

// serverTLS is the server TLS configuration of the --tls-* flags, nil
// when none is set.
func serverTLS(f tlsfiles.ServerFiles, log *slog.Logger) (*tls.Config, error) {
	cfg, err := f.Config(log)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert, --tls-key, --tls-client-ca: %w", err)
	}
	return cfg, nil
}

// upstreamTLS is the client TLS configuration of the --upstream-tls
// flags, nil without --upstream-tls.
func upstreamTLS(on bool, f tlsfiles.ClientFiles, log *slog.Logger) (*tls.Config, error) {
	if !on {
		if f != (tlsfiles.ClientFiles{}) {
			return nil, errors.New("--upstream-ca, --upstream-cert, --upstream-key and --upstream-server-name need --upstream-tls")
		}
		return nil, nil
	}
	cfg, err := f.Config(log)
	if err != nil {
		return nil, fmt.Errorf("--upstream-ca, --upstream-cert, --upstream-key: %w", err)
	}
	return cfg, nil
}

// Backends is the backend set streamgate serves with: the built-in ones
// and llama2.
func Backends() map[string]backend.Factory {
	b := builtin.Backends()
	b[llama2.BackendName] = llama2.New
	return b
}

// parseDurations reads NAME=DURATION[,NAME=DURATION...].
func parseDurations(s string) (map[string]time.Duration, error) {
	var m map[string]time.Duration
	for _, kv := range SplitList(s) {
		name, v, ok := strings.Cut(kv, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("%q: want NAME=DURATION", kv)
		}
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("%q: %v", kv, err)
		}
		if m == nil {
			m = map[string]time.Duration{}
		}
		m[name] = d
	}
	return m, nil
}

// SplitList splits a comma-separated flag value, dropping blanks.
func SplitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// RegisterKeyStore defines --redis and --keys-file, the stores of the
// gateway's shared state and API keys, the same for the gateway and for
// `streamgate keys`.
func RegisterKeyStore(fs *cli.FlagSet, redis, keysFile *string) {
	fs.Group("Shared state (Redis)")
	fs.StringVar(redis, "redis", "", "Redis `URL` of the state replicas share (resumable streams, API keys, per-key limits): redis://host:6379/0, Sentinel redis://sentinel:26379/0?master_name=NAME&addr=sentinel2:26379, Cluster redis://node1:6379?addr=node2:6379; empty keeps it in this process (one replica). With it, requests need an API key (streamgate keys create)")
	fs.StringVar(keysFile, "keys-file", "", "API keys `file` of a single replica without --redis (streamgate keys create --keys-file); with it, requests need an API key. Without --redis or --keys-file the gateway is open to anyone who reaches it")
}
