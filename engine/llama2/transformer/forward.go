package transformer

import (
	"fmt"

	"github.com/streamgate/streamgate/engine/llama2/kernels"
)

// Session is one sequence's key/value cache. Its zero state is "no
// positions yet"; Forward writes position p's keys and values when it runs
// a step at p, so a session is reused simply by starting again at 0.
type Session struct {
	key, value []float32 // [layers][seqLen][kvDim]
}

// NewSession allocates a KV cache: 2·layers·seqLen·kvDim floats.
func (m *Model) NewSession() *Session {
	n := m.cfg.Layers * m.cfg.SeqLen * m.cfg.KVDim()
	return &Session{key: make([]float32, n), value: make([]float32, n)}
}

// SessionBytes is the memory of one Session's KV cache.
func (m *Model) SessionBytes() int64 {
	return 2 * 4 * int64(m.cfg.Layers) * int64(m.cfg.SeqLen) * int64(m.cfg.KVDim())
}

// Step is one token of one session in a batched forward pass.
type Step struct {
	Session *Session
	Pos     int // position of Token, 0 <= Pos < SeqLen
	Token   int
	// Logits receives the next-token logits (Vocab floats); nil skips the
	// classifier for this step (prompt tokens other than the last).
	Logits []float32
}

// WorkspaceOptions configure a Workspace.
type WorkspaceOptions struct {
	// MaxRows is the most steps one Forward call takes (at least 1).
	MaxRows int
	// MaxLogits is the most steps of one call that want logits; 0 means
	// MaxRows.
	MaxLogits int
	// Groups, with more than one entry, enables sequence parallelism for
	// models small enough to stay in a core's cache (up to 4 MiB of
	// weights): a pass of several sessions is cut into up to len(Groups)
	// groups of whole sessions that run concurrently on Pool, group i with
	// kernels Groups[i], which must not use Pool themselves (one sync point
	// per pass instead of one per kernel call). Other passes, and all
	// passes of larger models (memory-bound: each group would stream all
	// weights), run on the Workspace's own kernels.
	Groups []kernels.Kernels
	Pool   *kernels.Pool
}

// Workspace holds the activations of forward passes. A Workspace is used
// by one goroutine at a time.
type Workspace struct {
	m         *Model
	k         kernels.Kernels
	maxRows   int
	maxLogits int
	groups    []kernels.Kernels
	pool      *kernels.Pool

	x, xb, xb2, q, kv, vv, hb, hb2 []float32 // [rows][width]
	xf, logits                     []float32 // rows that want logits
	att                            []kernels.Attention
	cuts                           []int // group boundaries of the current pass
	// jobs holds the MatMul jobs of one kernel call, one set per
	// concurrent group, so that a pass allocates nothing.
	jobs [][3]kernels.MatMul
}

// smallModel is the weight size up to which a model stays in a core's L2
// cache, so that splitting a pass by sessions costs no extra memory traffic.
const smallModel = 4 << 20

// NewWorkspace returns scratch space for passes that run on k.
func (m *Model) NewWorkspace(k kernels.Kernels, opts WorkspaceOptions) *Workspace {
	c := m.cfg
	maxRows := max(opts.MaxRows, 1)
	maxLogits := opts.MaxLogits
	if maxLogits <= 0 || maxLogits > maxRows {
		maxLogits = maxRows
	}
	f := func(width int) []float32 { return make([]float32, maxRows*width) }
	w := &Workspace{
		m: m, k: k, maxRows: maxRows, maxLogits: maxLogits,
		x: f(c.Dim), xb: f(c.Dim), xb2: f(c.QDim()), q: f(c.QDim()),
		kv: f(c.KVDim()), vv: f(c.KVDim()),
		hb: f(c.HiddenDim), hb2: f(c.HiddenDim),
		xf:     make([]float32, maxLogits*c.Dim),
		logits: make([]float32, maxLogits*c.Vocab),
		att:    make([]kernels.Attention, maxRows),
	}
	if len(opts.Groups) > 1 && opts.Pool != nil && m.weightBytes <= smallModel {
		w.groups, w.pool = opts.Groups, opts.Pool
	}
	w.jobs = make([][3]kernels.MatMul, max(len(w.groups), 1))
	return w
}

// MaxRows is the most steps one Forward call takes.
func (w *Workspace) MaxRows() int { return w.maxRows }

// Forward runs one transformer pass over steps, which may mix sessions and
// several consecutive positions of one session (a prompt chunk, in position
// order, contiguous in steps): every step's keys and values are stored
// before attention, and each step attends to positions 0..Pos of its
// session.
func (w *Workspace) Forward(steps []Step) error {
	c := w.m.cfg
	if len(steps) > w.maxRows {
		return fmt.Errorf("forward: %d steps exceed the workspace's %d rows", len(steps), w.maxRows)
	}
	want := 0
	for i, s := range steps {
		switch {
		case s.Session == nil:
			return fmt.Errorf("forward: step %d has no session", i)
		case s.Pos < 0 || s.Pos >= c.SeqLen:
			return fmt.Errorf("forward: step %d position %d is outside the context [0,%d)", i, s.Pos, c.SeqLen)
		case s.Token < 0 || s.Token >= c.Vocab:
			return fmt.Errorf("forward: step %d token %d is outside the vocabulary [0,%d)", i, s.Token, c.Vocab)
		case s.Logits != nil && len(s.Logits) != c.Vocab:
			return fmt.Errorf("forward: step %d logits hold %d floats, want %d", i, len(s.Logits), c.Vocab)
		}
		if s.Logits != nil {
			want++
		}
	}
	if want > w.maxLogits {
		return fmt.Errorf("forward: %d steps want logits, the workspace holds %d", want, w.maxLogits)
	}
	if len(steps) == 0 {
		return nil
	}
	if w.split(steps) {
		w.pool.Run(len(w.cuts)-1, func(g, _ int) {
			lo, hi := w.cuts[g], w.cuts[g+1]
			lbase := 0
			for _, s := range steps[:lo] {
				if s.Logits != nil {
					lbase++
				}
			}
			w.pass(w.groups[g], &w.jobs[g], steps[lo:hi], lo, lbase)
		})
		return nil
	}
	w.pass(w.k, &w.jobs[0], steps, 0, 0)
	return nil
}

// split decides whether to run steps as concurrent groups and, if so, sets
// cuts to the group boundaries: roughly equal numbers of steps, cut only
// between sessions (a session's steps must see each other's keys).
func (w *Workspace) split(steps []Step) bool {
	if w.groups == nil {
		return false
	}
	n := min(len(w.groups), len(steps))
	if n < 2 {
		return false
	}
	w.cuts = append(w.cuts[:0], 0)
	target := (len(steps) + n - 1) / n
	start := 0
	for i := 1; i < len(steps) && len(w.cuts) < n; i++ {
		if i-start >= target && steps[i].Session != steps[i-1].Session {
			w.cuts = append(w.cuts, i)
			start = i
		}
	}
	w.cuts = append(w.cuts, len(steps))
	return len(w.cuts) > 2
}

// pass runs steps on k, using workspace rows [base, base+len(steps)),
// logits rows from lbase, and jobs for the MatMul calls.
func (w *Workspace) pass(k kernels.Kernels, jobs *[3]kernels.MatMul, steps []Step, base, lbase int) {
	c := w.m.cfg
	wt := &w.m.w
	dim, hid, kvDim, hs, qDim := c.Dim, c.HiddenDim, c.KVDim(), c.HeadSize(), c.QDim()
	eps := c.eps()
	half := hs / 2
	rows := len(steps)
	sub := func(buf []float32, width int) []float32 { return buf[base*width : (base+rows)*width] }
	x, xb, xb2, q := sub(w.x, dim), sub(w.xb, dim), sub(w.xb2, qDim), sub(w.q, qDim)
	kv, vv, hb, hb2 := sub(w.kv, kvDim), sub(w.vv, kvDim), sub(w.hb, hid), sub(w.hb2, hid)
	att := w.att[base : base+rows]
	row := func(buf []float32, r, width int) []float32 { return buf[r*width : (r+1)*width] }
	heads := kernels.Heads{Heads: c.Heads, KVHeads: c.KVHeads, HeadSize: hs}

	for r, s := range steps {
		wt.tokenEmbedding.row(s.Token, row(x, r, dim))
	}
	for l := range c.Layers {
		ly := &wt.layers[l]
		for r := range rows {
			k.RMSNorm(row(xb, r, dim), row(x, r, dim), ly.attnNorm, eps)
		}
		jobs[0], jobs[1], jobs[2] = ly.wq.job(q, xb, rows, dim, qDim), ly.wk.job(kv, xb, rows, dim, kvDim), ly.wv.job(vv, xb, rows, dim, kvDim)
		k.MatMul(jobs[:3]...)
		if ly.bq != nil {
			for r := range rows {
				addTo(row(q, r, qDim), ly.bq)
				addTo(row(kv, r, kvDim), ly.bk)
				addTo(row(vv, r, kvDim), ly.bv)
			}
		}
		layer := l * c.SeqLen * kvDim
		for r, s := range steps {
			cos, sin := w.m.cos[s.Pos*half:(s.Pos+1)*half], w.m.sin[s.Pos*half:(s.Pos+1)*half]
			qr, kr := row(q, r, qDim), row(kv, r, kvDim)
			if ly.qNorm != nil {
				for h := 0; h < qDim; h += hs {
					k.RMSNorm(qr[h:h+hs], qr[h:h+hs], ly.qNorm, eps)
				}
				for h := 0; h < kvDim; h += hs {
					k.RMSNorm(kr[h:h+hs], kr[h:h+hs], ly.kNorm, eps)
				}
			}
			k.RoPE(qr, cos, sin, c.RopeNeox)
			k.RoPE(kr, cos, sin, c.RopeNeox)
			at := layer + s.Pos*kvDim
			copy(s.Session.key[at:at+kvDim], kr)
			copy(s.Session.value[at:at+kvDim], row(vv, r, kvDim))
			n := s.Pos + 1
			att[r] = kernels.Attention{
				Out: row(xb2, r, qDim), Q: qr,
				Keys:   s.Session.key[layer : layer+n*kvDim],
				Values: s.Session.value[layer : layer+n*kvDim],
				Len:    n,
			}
		}
		k.Attention(heads, att...)
		jobs[0] = ly.wo.job(xb, xb2, rows, qDim, dim)
		k.MatMul(jobs[:1]...)
		addTo(x, xb)
		for r := range rows {
			k.RMSNorm(row(xb, r, dim), row(x, r, dim), ly.ffnNorm, eps)
		}
		jobs[0], jobs[1] = ly.w1.job(hb, xb, rows, dim, hid), ly.w3.job(hb2, xb, rows, dim, hid)
		k.MatMul(jobs[:2]...)
		k.SwiGLU(hb, hb2)
		jobs[0] = ly.w2.job(xb, hb, rows, hid, dim)
		k.MatMul(jobs[:1]...)
		addTo(x, xb)
	}

	// Final norm and classifier only for the rows that want logits.
	xf, logits := w.xf[lbase*dim:], w.logits[lbase*c.Vocab:]
	j := 0
	for r, s := range steps {
		if s.Logits != nil {
			k.RMSNorm(row(xf, j, dim), row(x, r, dim), wt.rmsFinal, eps)
			j++
		}
	}
	if j == 0 {
		return
	}
	jobs[0] = wt.classifier.job(logits[:j*c.Vocab], xf[:j*dim], j, dim, c.Vocab)
	k.MatMul(jobs[:1]...)
	j = 0
	for _, s := range steps {
		if s.Logits != nil {
			copy(s.Logits, row(logits, j, c.Vocab))
			j++
		}
	}
}

func addTo(x, y []float32) {
	y = y[:len(x)]
	for i := range x {
		x[i] += y[i]
	}
}
