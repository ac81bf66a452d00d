package llama2

import (
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"

	"github.com/streamgate/streamgate/engine/backend"
	"github.com/streamgate/streamgate/engine/llama2/constrain"
	"github.com/streamgate/streamgate/engine/llama2/kernels"
	"github.com/streamgate/streamgate/engine/llama2/sampler"
	"github.com/streamgate/streamgate/engine/llama2/transformer"
)

var errGuideStuck = backend.Errorf(codes.Internal, "llama2: guided_decoding: no token of the vocabulary continues the output within the constraint")

var errClosing = backend.Errorf(codes.Unavailable, "llama2: model is being unloaded")

// Scheduling limits.
const (
	// maxBacklog is how many released pieces a streaming sequence may have
	// waiting for its Execute goroutine before the scheduler stops stepping
	// it (a slow client slows only its own request).
	maxBacklog = 64
	// prefillRows is how many prompt rows one step takes beyond one row per
	// generating sequence, so long prompts are fed in chunks without
	// stalling the other sequences.
	prefillRows = 64
)

// Finish reasons.
const (
	finishStop   = "stop"   // EOS/BOS token or a stop sequence
	finishLength = "length" // max_tokens or the context length
)

// sequence is one request's generation. The scheduler goroutine owns the
// fields above mu; Execute and the scheduler share those below it.
type sequence struct {
	req     request
	prompt  []int
	sampler *sampler.Sampler
	guide   *constrain.Matcher // nil without guided_decoding
	text    textStream
	full    strings.Builder // released text of a non-streaming request

	slot      *slot
	pos       int // positions fed so far
	next      int // token to feed at pos once the prompt is fed
	generated int

	cancelled atomic.Bool
	notify    chan struct{} // cap 1

	mu     sync.Mutex
	pieces []string
	fin    *finish
}

// finish is a sequence's outcome.
type finish struct {
	text         string // held-back text (streaming) or the whole output
	reason       string
	outputTokens int
	err          error
}

// slot is a KV cache with its logits buffer.
type slot struct {
	sess   *transformer.Session
	logits []float32
}

func newSequence(in request, prompt []int, guides *constrain.Vocab) *sequence {
	p := in.params
	s := &sequence{
		req:     in,
		prompt:  prompt,
		sampler: sampler.New(p.Options, prompt),
		text:    textStream{stops: p.stop},
		notify:  make(chan struct{}, 1),
	}
	if p.guided != nil {
		s.guide = p.guided.Matcher(guides)
	}
	return s
}

// take returns and clears the released pieces and the outcome, if any.
// wasFull reports that the backlog had reached maxBacklog.
func (s *sequence) take() (pieces []string, fin *finish, wasFull bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pieces, s.pieces = s.pieces, nil
	return pieces, s.fin, len(pieces) >= maxBacklog
}

func (s *sequence) backlogFull() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pieces) >= maxBacklog
}

func (s *sequence) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// emit releases text: one piece for a streaming request, appended to the
// whole output otherwise.
func (s *sequence) emit(text string) {
	if text == "" {
		return
	}
	if !s.req.stream {
		s.full.WriteString(text)
		return
	}
	s.mu.Lock()
	s.pieces = append(s.pieces, text)
	s.mu.Unlock()
	s.signal()
}

// end publishes the outcome.
func (s *sequence) end(f *finish) {
	s.mu.Lock()
	s.fin = f
	s.mu.Unlock()
	s.signal()
}

// scheduler is the state of the scheduler goroutine.
type scheduler struct {
	b      *Backend
	ws     *transformer.Workspace
	active []*sequence
	free   []*slot
	steps  []transformer.Step
	owners []*sequence // owners[i] is the sequence of steps[i]
}

// run is the scheduler goroutine: it admits waiting sequences into free KV
// caches, runs one batched forward pass over every runnable sequence, and
// hands out the sampled text, until Close.
func (b *Backend) run() {
	defer close(b.done)
	rows := b.maxSeq + prefillRows
	groups := make([]kernels.Kernels, b.pool.Workers())
	for i := range groups {
		groups[i] = kernels.NewCPU(kernels.NewPool(1)) // serial: the pool runs the groups
	}
	sc := &scheduler{
		b: b,
		ws: b.model.NewWorkspace(b.kern, transformer.WorkspaceOptions{
			MaxRows: rows, MaxLogits: b.maxSeq, Groups: groups, Pool: b.pool,
		}),
		steps:  make([]transformer.Step, 0, rows),
		owners: make([]*sequence, 0, rows),
	}
	for {
		if !sc.admit() {
			sc.shutdown()
			return
		}
		b.metrics.KVSlots(int(b.slotsInUse.Load()), b.maxSeq)
		if !sc.plan() {
			select {
			case <-b.wake:
			case <-b.quit:
			}
			continue
		}
		n := b.passes.Add(1)
		if err := sc.ws.Forward(sc.steps); err != nil {
			for _, s := range sc.active {
				sc.retire(s, &finish{err: err})
			}
			sc.active = sc.active[:0]
			continue
		}
		if b.onPass != nil {
			b.onPass(n)
		}
		sc.report()
		sc.advance()
	}
}

// admit drops cancelled sequences (freeing their KV caches), then moves
// waiting sequences into free caches. It returns false when the backend is
// closing.
func (sc *scheduler) admit() bool {
	kept := sc.active[:0]
	for _, s := range sc.active {
		if s.cancelled.Load() {
			sc.retire(s, nil)
			continue
		}
		kept = append(kept, s)
	}
	clear(sc.active[len(kept):])
	sc.active = kept

	b := sc.b
	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		return false
	}
	n := 0
	for n < len(b.waiting) && len(sc.active) < b.maxSeq {
		s := b.waiting[n]
		n++
		if s.cancelled.Load() {
			b.inflight--
			continue
		}
		sc.active = append(sc.active, s)
	}
	b.waiting = append(b.waiting[:0], b.waiting[n:]...)
	b.mu.Unlock()

	for _, s := range sc.active {
		if s.slot == nil {
			s.slot = sc.takeSlot()
		}
	}
	return true
}

func (sc *scheduler) takeSlot() *slot {
	sc.b.slotsInUse.Add(1)
	if n := len(sc.free); n > 0 {
		s := sc.free[n-1]
		sc.free = sc.free[:n-1]
		return s
	}
	return &slot{sess: sc.b.model.NewSession(), logits: make([]float32, sc.b.model.Config().Vocab)}
}

// retire frees s's KV cache and admission, and publishes f (nil for a
// cancelled sequence, whose Execute has returned).
func (sc *scheduler) retire(s *sequence, f *finish) {
	if s.slot != nil {
		sc.free = append(sc.free, s.slot)
		s.slot = nil
		sc.b.slotsInUse.Add(-1)
	}
	b := sc.b
	b.mu.Lock()
	b.inflight--
	b.mu.Unlock()
	if f != nil {
		s.end(f)
	}
}

// plan fills steps with one row per generating sequence, then prompt rows
// of the sequences still reading their prompts. It returns false if there is
// nothing to run.
func (sc *scheduler) plan() bool {
	sc.steps, sc.owners = sc.steps[:0], sc.owners[:0]
	add := func(s *sequence, pos, tok int, logits []float32) {
		sc.steps = append(sc.steps, transformer.Step{Session: s.slot.sess, Pos: pos, Token: tok, Logits: logits})
		sc.owners = append(sc.owners, s)
	}
	for _, s := range sc.active {
		if s.pos >= len(s.prompt) && !(s.req.stream && s.backlogFull()) {
			add(s, s.pos, s.next, s.slot.logits)
		}
	}
	budget := prefillRows
	for _, s := range sc.active {
		for p := s.pos; p < len(s.prompt) && budget > 0; p++ {
			var logits []float32
			if p == len(s.prompt)-1 {
				logits = s.slot.logits
			}
			add(s, p, s.prompt[p], logits)
			budget--
		}
	}
	return len(sc.steps) > 0
}

// advance moves every sequence of the pass forward: positions, sampling,
// text, and the end of generation.
func (sc *scheduler) advance() {
	seqLen := sc.b.model.Config().SeqLen
	for i, st := range sc.steps {
		s := sc.owners[i]
		s.pos++
		if st.Logits == nil {
			continue
		}
		if s.guide != nil && !s.guide.Apply(st.Logits) {
			sc.retire(s, &finish{err: errGuideStuck})
			continue
		}
		tok := s.sampler.Sample(st.Logits)
		s.generated++
		if sc.b.tok.EndOfGeneration(tok) && (!s.req.params.ignoreEOS || s.guide != nil) {
			sc.end(s, finishStop)
			continue
		}
		piece := sc.b.tok.Piece(st.Token, tok)
		text, stop := s.text.push(piece)
		s.emit(text)
		switch {
		case s.guide != nil && (!s.guide.Advance(piece) || s.guide.Finished()):
			sc.end(s, finishStop) // Advance fails only on a bug: the mask allowed tok
		case stop:
			sc.end(s, finishStop)
		case s.generated >= s.req.params.maxTokens || s.pos >= seqLen:
			sc.end(s, finishLength)
		default:
			s.next = tok
		}
	}
	kept := sc.active[:0]
	for _, s := range sc.active {
		if s.slot != nil {
			kept = append(kept, s)
		}
	}
	clear(sc.active[len(kept):])
	sc.active = kept
}

// end finishes s with reason, releasing whatever text it still holds.
func (sc *scheduler) end(s *sequence, reason string) {
	rest := s.text.flush()
	if !s.req.stream {
		s.full.WriteString(rest)
		rest = s.full.String()
	}
	sc.retire(s, &finish{text: rest, reason: reason, outputTokens: s.generated})
}

// shutdown fails every admitted sequence: the backend is closing.
func (sc *scheduler) shutdown() {
	for _, s := range sc.active {
		sc.retire(s, &finish{err: errClosing})
	}
	sc.active = nil
	b := sc.b
	b.mu.Lock()
	waiting := b.waiting
	b.waiting = nil
	b.mu.Unlock()
	for _, s := range waiting {
		sc.retire(s, &finish{err: errClosing})
	}
}
