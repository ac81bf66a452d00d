package llama2

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/streamgate/streamgate/engine/backend"
	"github.com/streamgate/streamgate/engine/llama2/kernels"
	"github.com/streamgate/streamgate/engine/llama2/tokenizer"
	"github.com/streamgate/streamgate/engine/llama2/transformer"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// Config parameters read by New.
const (
	paramCheckpoint   = "checkpoint"
	paramTokenizer    = "tokenizer"
	paramMaxSequences = "max_sequences"
	paramMaxQueue     = "max_queue"
	paramWorkers      = "workers"
	paramGGUF         = "gguf"
	paramMaxContext   = "max_context"
	paramKVCacheMB    = "kv_cache_mb"
)

// Backend generates text with a llama2.c checkpoint. One scheduler
// goroutine, started by New and stopped by Close, runs batched forward
// passes over all active requests (continuous batching); Execute only
// queues a request and relays its results, so any number of Execute calls
// may run concurrently.
type Backend struct {
	model *transformer.Model
	tok   tokenizer.Codec
	// chat is true for GGUF models: prompts are rendered chat templates,
	// whose special-token text becomes special tokens, with BOS added
	// only when the text does not start with it.
	chat     bool
	bos      int // with chat: the BOS to add, or -1
	pool     *kernels.Pool
	kern     kernels.Kernels
	maxSeq   int
	maxQueue int
	metrics  backend.Metrics
	// promptBytes is the longest prompt, in bytes, that can fit the
	// context; 0 when the vocabulary sets no bound (see promptByteLimit).
	promptBytes int

	mu       sync.Mutex
	closing  bool
	waiting  []*sequence // admitted, no KV cache yet; len <= maxQueue beyond free caches
	inflight int         // admitted and not finished

	wake      chan struct{} // cap 1: something for the scheduler to look at
	quit      chan struct{}
	done      chan struct{} // closed when the scheduler has exited
	closeOnce sync.Once

	slotsInUse atomic.Int32 // KV caches held by sequences
	passes     atomic.Int64 // forward passes run

	// onPass, if set (by tests, before the first request), runs on the
	// scheduler goroutine after each forward pass with the pass count.
	onPass func(passes int64)
	// sleep waits out a request's delay_ms on its Execute goroutine
	// (backend.Sleep; tests replace it before the first request).
	sleep func(ctx context.Context, d time.Duration) bool
}

var (
	_ backend.Backend = (*Backend)(nil)
	_ backend.Closer  = (*Backend)(nil)
	_ backend.Factory = New
)

// New is the backend.Factory of the llama2 backend. It reads the config
// parameters (string_value):
//   - checkpoint (required): llama2.c .bin file, relative to cfg.Dir;
//   - tokenizer (required): llama2.c tokenizer .bin, relative to cfg.Dir;
//   - max_sequences: concurrent generations, each with its own KV cache
//     (default 16);
//   - max_queue: requests waiting for a KV cache beyond those (default 64);
//     further requests fail with "too many requests";
//   - workers: compute goroutines (default GOMAXPROCS).
func New(cfg backend.Config) (backend.Backend, error) {
	b, err := open(cfg)
	if err != nil {
		return nil, err
	}
	return b, nil
}

func open(cfg backend.Config) (*Backend, error) {
	m := cfg.Model
	path := func(key, what string) (string, error) {
		p := backend.Param(m, key, "")
		if p == "" {
			return "", fmt.Errorf("parameters.%s: missing; set string_value to the path of the %s", key, what)
		}
		if !filepath.IsAbs(p) && cfg.Dir != "" {
			p = filepath.Join(cfg.Dir, p)
		}
		return p, nil
	}
	maxSeq, err := intParam(m, paramMaxSequences, DefaultMaxSequences, 1, 4096)
	if err != nil {
		return nil, err
	}
	maxQueue, err := intParam(m, paramMaxQueue, DefaultMaxQueue, 0, 1<<20)
	if err != nil {
		return nil, err
	}
	workers, err := intParam(m, paramWorkers, runtime.GOMAXPROCS(0), 1, 1024)
	if err != nil {
		return nil, err
	}
	maxContext, err := intParam(m, paramMaxContext, DefaultMaxContext, 1, 1<<20)
	if err != nil {
		return nil, err
	}
	kvMB, err := intParam(m, paramKVCacheMB, 0, 1, 1<<30)
	if err != nil {
		return nil, err
	}

	b := &Backend{bos: -1, sleep: backend.Sleep}
	if _, ok := m.GetParameters()[paramGGUF]; ok {
		p, err := path(paramGGUF, "GGUF model file")
		if err != nil {
			return nil, err
		}
		if b.model, b.tok, b.bos, err = loadGGUF(p, maxContext); err != nil {
			return nil, fmt.Errorf("parameters.%s: %w", paramGGUF, err)
		}
		b.chat = true
		if kvMB == 0 {
			kvMB = DefaultKVCacheMB
		}
	} else {
		ckpt, err := path(paramCheckpoint, "llama2.c checkpoint file")
		if err != nil {
			return nil, err
		}
		tokPath, err := path(paramTokenizer, "llama2.c tokenizer file")
		if err != nil {
			return nil, err
		}
		model, err := transformer.Load(ckpt)
		if err != nil {
			return nil, fmt.Errorf("parameters.%s: %w", paramCheckpoint, err)
		}
		tok, err := tokenizer.Load(tokPath, model.Config().Vocab)
		if err != nil {
			model.Close()
			return nil, fmt.Errorf("parameters.%s: %w", paramTokenizer, err)
		}
		if tok.Vocab() <= tokenizer.EOS {
			model.Close()
			return nil, fmt.Errorf("parameters.%s: vocabulary of %d tokens has no BOS and EOS", paramCheckpoint, tok.Vocab())
		}
		b.model, b.tok = model, tok
	}
	if kvMB > 0 {
		per := b.model.SessionBytes()
		fit := int64(kvMB) << 20 / per
		if fit < 1 {
			b.model.Close()
			return nil, fmt.Errorf("parameters.%s: %d MiB cannot hold the KV cache of one sequence (%d MiB for %d positions); raise it or lower parameters.%s", paramKVCacheMB, kvMB, (per+1<<20-1)>>20, b.model.Config().SeqLen, paramMaxContext)
		}
		maxSeq = int(min(int64(maxSeq), fit))
	}
	b.pool = kernels.NewPool(workers)
	b.kern = kernels.NewCPU(b.pool)
	b.maxSeq, b.maxQueue, b.metrics = maxSeq, maxQueue, cfg.Metrics
	b.promptBytes = promptByteLimit(b.model.Config().SeqLen, b.tok.MaxTokenBytes())
	b.wake, b.quit, b.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	if b.metrics == nil {
		b.metrics = backend.NoMetrics{}
	}
	go b.run()
	return b, nil
}

// promptByteLimit returns the length in bytes beyond which a prompt
// cannot fit a context of seqLen tokens when no token stands for more than
// perToken bytes (tokenizer.MaxTokenBytes; 0 means no bound, and then so is
// the result). A prompt of n bytes encodes to BOS and at least
// ceil(n/perToken) more tokens, so n > (seqLen-1)·perToken means more
// than seqLen tokens: such a prompt is refused before the tokenizer spends
// time on it.
func promptByteLimit(seqLen, perToken int) int {
	if perToken <= 0 || seqLen <= 1 {
		return 0
	}
	return (seqLen - 1) * perToken
}

func intParam(m *pb.ModelConfig, key string, def, lo, hi int) (int, error) {
	p, ok := m.GetParameters()[key]
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(p.GetStringValue())
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("parameters.%s: %q is not an integer in [%d, %d]", key, p.GetStringValue(), lo, hi)
	}
	return n, nil
}

// Close stops the scheduler, fails the requests still running with an
// error, and releases the model. It is idempotent.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.closing = true
		b.mu.Unlock()
		close(b.quit)
		<-b.done
		b.pool.Close()
		b.model.Close()
	})
	return nil
}

// Execute runs one request; see the package documentation for the inputs
// and outputs. It releases its model instance at once (admission is the
// backend's own) and returns when the generation ends, the request fails,
// or ctx is done (then (nil, nil), after telling the scheduler to drop the
// sequence before its next step).
func (b *Backend) Execute(ctx context.Context, req *backend.Request, r backend.Responder) (*backend.Response, error) {
	r.Release()
	in, err := parseRequest(req)
	if err != nil {
		return nil, backend.WithCode(codes.InvalidArgument, err)
	}
	seqLen := b.model.Config().SeqLen
	if limit := b.promptBytes; limit > 0 && len(in.prompt) > limit {
		return nil, backend.Errorf(codes.InvalidArgument, "llama2: prompt is %d bytes, longer than the model's context of %d tokens can hold (at most %d bytes: %d per token)", len(in.prompt), seqLen, limit, b.tok.MaxTokenBytes())
	}
	prompt, err := b.tokenize(ctx, in.prompt)
	if ctx.Err() != nil {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(prompt) > seqLen {
		return nil, backend.Errorf(codes.InvalidArgument, "llama2: prompt is %d tokens, longer than the model's context of %d tokens", len(prompt), seqLen)
	}
	s := newSequence(in, prompt)
	if err := b.admit(s); err != nil {
		return nil, err
	}
	for {
		select {
		case <-ctx.Done():
			b.cancel(s)
			return nil, nil
		case <-s.notify:
		}
		pieces, fin, wasFull := s.take()
		if wasFull {
			b.kick() // the scheduler skips sequences whose backlog is full
		}
		for _, p := range pieces {
			if !b.pace(ctx, in.delay, 1) {
				b.cancel(s)
				return nil, nil
			}
			if err := r.Send(ctx, &backend.Response{Outputs: []*tensor.Tensor{tensor.NewString(outputText, p)}}); err != nil {
				b.cancel(s)
				return nil, nil
			}
		}
		if fin != nil {
			if fin.err != nil {
				return nil, fin.err
			}
			// The rest of a stream is one more piece; a whole answer
			// waits as long as its streamed pieces would have.
			n := fin.outputTokens
			if in.stream {
				n = min(len(fin.text), 1)
			}
			if !b.pace(ctx, in.delay, n) {
				return nil, nil
			}
			return finalResponse(in, len(prompt), fin), nil
		}
	}
}

// pace waits n times the request's delay_ms before its next output, on the
// request's own goroutine: the scheduler keeps stepping the other sequences
// (and this one, until its backlog of pieces is full). It reports false when
// ctx ended first.
func (b *Backend) pace(ctx context.Context, delay time.Duration, n int) bool {
	if delay <= 0 || n <= 0 {
		return true
	}
	return b.sleep(ctx, time.Duration(n)*delay)
}

// tokenize encodes a prompt: for llama2.c models with BOS and no special
// tokens (as run.c does); for GGUF models, which receive rendered chat
// templates, with special-token text as special tokens and BOS in front
// unless the text already starts with it (llama.cpp's parse_special, with
// no doubled BOS).
func (b *Backend) tokenize(ctx context.Context, text string) ([]int, error) {
	if !b.chat {
		return b.tok.Tokenize(ctx, text, true, false)
	}
	toks, err := b.tok.Tokenize(ctx, text, false, true)
	if err != nil {
		return nil, err
	}
	if b.bos >= 0 && (len(toks) == 0 || toks[0] != b.bos) {
		toks = append([]int{b.bos}, toks...)
	}
	if len(toks) == 0 {
		return nil, backend.Errorf(codes.InvalidArgument, "llama2: empty prompt (the model adds no BOS token)")
	}
	return toks, nil
}

func finalResponse(in request, inputTokens int, f *finish) *backend.Response {
	text := f.text
	if !in.stream && !in.exclude {
		text = in.prompt + text
	}
	return &backend.Response{Outputs: []*tensor.Tensor{
		tensor.NewString(outputText, text),
		tensor.NewString(outputFinish, f.reason),
		tensor.NewUint32(outputInputTokens, []int64{1}, []uint32{uint32(inputTokens)}),
		tensor.NewUint32(outputOutputTokens, []int64{1}, []uint32{uint32(f.outputTokens)}),
	}}
}

// admit queues s for the scheduler, or fails when the queue is full or the
// backend is closing.
func (b *Backend) admit(s *sequence) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closing {
		return errClosing
	}
	if b.inflight >= b.maxSeq+b.maxQueue {
		return backend.Errorf(codes.ResourceExhausted, "llama2: too many requests (queue full: %d generating, %d waiting)", b.maxSeq, b.maxQueue)
	}
	b.inflight++
	b.waiting = append(b.waiting, s)
	b.kick()
	return nil
}

// cancel marks s cancelled; the scheduler drops it and frees its KV cache
// before its next step.
func (b *Backend) cancel(s *sequence) {
	s.cancelled.Store(true)
	b.kick()
}

// kick wakes the scheduler if it is idle.
func (b *Backend) kick() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}
