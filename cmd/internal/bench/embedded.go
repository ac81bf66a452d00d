package bench

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/engine/backend"
	"github.com/streamgate/streamgate/engine/builtin"
	"github.com/streamgate/streamgate/engine/llama2"
	"github.com/streamgate/streamgate/gateway"
	"github.com/streamgate/streamgate/gateway/ws"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/upstream"
	"google.golang.org/protobuf/encoding/prototext"
)

// pacedEcho is the model name of the embedded echo whose delay comes from
// its config, so OpenAI requests (which cannot carry delay_ms) are paced.
const pacedEcho = "bench_echo"

// embedded is an engine and a gateway running inside the bench process,
// on loopback ports of their own, wired by cmd/internal/stack as
// `streamgate serve` is. Its repeat backend reports when each request's
// Execute returns (tracker): the engine-side signal of the cancel preset.
type embedded struct {
	*stack.Stack
	tracker *tracker
}

type embeddedOptions struct {
	conc       int
	perSocket  int
	textModel  string        // a text model to load (an engine --model): stories260k or a GGUF file
	echoDelay  time.Duration // > 0: add pacedEcho with this delay
	queueBytes int           // upstream.Options.QueueBytes; 0 default
	redis      string        // the gateway's store (stack.Config.Redis)
	h2PerConn  int           // > 0: serve h2c, this many requests per connection
}

func startEmbedded(o embeddedOptions) (*embedded, error) {
	e := &embedded{tracker: newTracker()}
	backends := stack.Backends()
	repeat := backends["repeat"]
	backends["repeat"] = func(c backend.Config) (backend.Backend, error) {
		b, err := repeat(c)
		if err != nil {
			return nil, err
		}
		return trackedBackend{Backend: b, t: e.tracker}, nil
	}
	var extra []*pb.ModelConfig
	quiet := slog.New(slog.DiscardHandler)
	if o.textModel != "" {
		var err error
		if extra, err = stack.TextModels(stack.EngineFlags{Model: o.textModel, MaxContext: llama2.DefaultMaxContext, KVCacheMB: llama2.DefaultKVCacheMB}, quiet); err != nil {
			return nil, err // says where it looked and how to get the weights
		}
	}
	if o.echoDelay > 0 {
		cfg, err := pacedEchoConfig(o.echoDelay)
		if err != nil {
			return nil, err
		}
		extra = append(extra, cfg)
	}
	// Room for the largest presets: 10,000 streams, 100 requests a socket.
	streams := max(2*o.conc, 4096)
	st, err := stack.Start(stack.Config{
		Engine:          &engine.Options{Repository: builtin.FS, Backends: backends, Extra: extra},
		UpstreamOptions: &upstream.Options{MaxStreamsPerTarget: max((streams+255)/256, 64), QueueBytes: o.queueBytes},
		Gateway: &gateway.Options{
			MaxStreams:        streams,
			MaxStreamsPerConn: max(2*o.h2PerConn, 64), // room for streams the client left and the handler still counts
			// The bench measures the gateway, not its per-socket abuse
			// limits: chunk rate and queued chunks are unbounded here.
			WebSocket: &ws.Options{MaxInFlight: max(o.perSocket, 64), MaxSequences: max(o.perSocket, 32),
				ChunkRate: -1, SequenceQueue: 1 << 16},
			ChatTemplates: stack.ChatTemplates(),
		},
		Redis:  o.redis,
		H2C:    o.h2PerConn > 0,
		Logger: quiet,
	})
	if err != nil {
		return nil, err
	}
	e.Stack = st
	return e, nil
}

// pacedEchoConfig is the config of pacedEcho: the built-in echo model
// whose every word takes delay.
func pacedEchoConfig(delay time.Duration) (*pb.ModelConfig, error) {
	src, err := builtin.FS.ReadFile("echo/config.pbtxt")
	if err != nil {
		return nil, err
	}
	cfg, err := engine.ParseConfig(src)
	if err != nil {
		return nil, err
	}
	cfg.Name = pacedEcho
	if cfg.Parameters == nil {
		cfg.Parameters = map[string]*pb.ModelParameter{}
	}
	cfg.Parameters["delay_ms"] = &pb.ModelParameter{StringValue: strconv.FormatInt(delay.Milliseconds(), 10)}
	return cfg, nil
}

// writePacedEcho writes a model repository in Triton's layout that serves
// pacedEcho alone, under a new directory in dir, for a spawned engine
// (--models); remove removes it.
func writePacedEcho(dir string, delay time.Duration) (repo string, remove func(), err error) {
	cfg, err := pacedEchoConfig(delay)
	if err != nil {
		return "", nil, err
	}
	src, err := prototext.Marshal(cfg)
	if err != nil {
		return "", nil, err
	}
	if repo, err = os.MkdirTemp(dir, "streamgate-bench-models-"); err != nil {
		return "", nil, err
	}
	remove = func() { os.RemoveAll(repo) }
	model := filepath.Join(repo, pacedEcho)
	if err = os.MkdirAll(filepath.Join(model, "1"), 0o755); err == nil {
		err = os.WriteFile(filepath.Join(model, "config.pbtxt"), src, 0o644)
	}
	if err != nil {
		remove()
		return "", nil, err
	}
	return repo, remove, nil
}

// close stops the gateway, then the engine, within 2s, and waits for both.
func (e *embedded) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	e.Stop(ctx)
}

// tracker records when the engine finished executing each repeat_int32
// request, recognised by its IN[0], which the bench sets to the request's
// serial number. Recording is on only while a cancel run wants it.
type tracker struct {
	on atomic.Bool
	mu sync.Mutex
	m  map[int32]*trackEntry
}

type trackEntry struct {
	done chan struct{}
	at   time.Time // set before done is closed
}

func newTracker() *tracker { return &tracker{m: map[int32]*trackEntry{}} }

// enable turns recording on or off and forgets every entry.
func (t *tracker) enable(on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.on.Store(on)
	clear(t.m)
}

func (t *tracker) entry(serial int32) *trackEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.m[serial]
	if e == nil {
		e = &trackEntry{done: make(chan struct{})}
		t.m[serial] = e
	}
	return e
}

// finished records that serial's Execute returned now.
func (t *tracker) finished(serial int32) {
	e := t.entry(serial)
	select {
	case <-e.done:
		return // a serial seen twice (not ours); keep the first
	default:
	}
	e.at = time.Now()
	close(e.done)
}

// await waits up to timeout for serial's Execute to return and gives the
// time it did.
func (t *tracker) await(ctx context.Context, serial int32, timeout time.Duration) (time.Time, bool) {
	e := t.entry(serial)
	defer t.forget(serial)
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	select {
	case <-e.done:
		return e.at, true
	case <-tm.C:
	case <-ctx.Done():
	}
	return time.Time{}, false
}

func (t *tracker) forget(serial int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, serial)
}

// trackedBackend wraps the repeat backend to report to a tracker.
type trackedBackend struct {
	backend.Backend
	t *tracker
}

func (b trackedBackend) Execute(ctx context.Context, req *backend.Request, r backend.Responder) (*backend.Response, error) {
	resp, err := b.Backend.Execute(ctx, req, r)
	if b.t.on.Load() {
		if in := req.Inputs["IN"]; in != nil {
			if v, e := in.Int32s(); e == nil && len(v) > 0 {
				b.t.finished(v[0])
			}
		}
	}
	return resp, err
}
