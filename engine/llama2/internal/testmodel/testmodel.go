// Package testmodel writes llama2.c model files for tests and benchmarks:
// checkpoints with random weights of any shape, "scripted" checkpoints whose
// greedy output follows a given token chain, and synthetic tokenizers.
//
// Start with Random, Script and WriteTokenizer.
package testmodel

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
)

// Shape is a checkpoint's header.
type Shape struct {
	Dim, Hidden, Layers, Heads, KVHeads, Vocab, SeqLen int
	Shared                                             bool // classifier = token embedding
}

// Stories15M is the shape of Karpathy's stories15M.bin.
var Stories15M = Shape{Dim: 288, Hidden: 768, Layers: 6, Heads: 6, KVHeads: 6, Vocab: 32000, SeqLen: 256, Shared: true}

// Weights are the tensors of a checkpoint, each stacked over layers.
type Weights struct {
	Emb, RMSAtt, WQ, WK, WV, WO, RMSFFN, W1, W2, W3, RMSFinal, Cls []float32
}

// NewWeights allocates zero weights of shape s (Cls nil when shared).
func NewWeights(s Shape) *Weights {
	kv := s.KVHeads * (s.Dim / s.Heads)
	l := s.Layers
	w := &Weights{
		Emb: make([]float32, s.Vocab*s.Dim), RMSAtt: make([]float32, l*s.Dim),
		WQ: make([]float32, l*s.Dim*s.Dim), WK: make([]float32, l*kv*s.Dim), WV: make([]float32, l*kv*s.Dim),
		WO: make([]float32, l*s.Dim*s.Dim), RMSFFN: make([]float32, l*s.Dim),
		W1: make([]float32, l*s.Hidden*s.Dim), W2: make([]float32, l*s.Dim*s.Hidden), W3: make([]float32, l*s.Hidden*s.Dim),
		RMSFinal: make([]float32, s.Dim),
	}
	if !s.Shared {
		w.Cls = make([]float32, s.Vocab*s.Dim)
	}
	return w
}

// RandomWeights fills weights of shape s with values uniform in
// [-scale, scale] (norm weights in [0.5, 1.5]) from seed.
func RandomWeights(s Shape, seed uint64) *Weights {
	w := NewWeights(s)
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	fill := func(v []float32, lo, hi float32) {
		for i := range v {
			v[i] = lo + (hi-lo)*r.Float32()
		}
	}
	scale := float32(1 / math.Sqrt(float64(s.Dim)))
	for _, v := range [][]float32{w.Emb, w.WQ, w.WK, w.WV, w.WO, w.W1, w.W2, w.W3, w.Cls} {
		fill(v, -scale, scale)
	}
	fill(w.Emb, -1, 1)
	for _, v := range [][]float32{w.RMSAtt, w.RMSFFN, w.RMSFinal} {
		fill(v, 0.5, 1.5)
	}
	return w
}

// Random writes a legacy (version 0) checkpoint of shape s with random
// weights to path.
func Random(path string, s Shape, seed uint64) error {
	return Write(path, s, RandomWeights(s, seed), 0)
}

// Write writes a checkpoint in the legacy layout (version 0) or the fp32
// "ak42" version 1 layout.
func Write(path string, s Shape, w *Weights, version int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	le := binary.LittleEndian
	var hdr []byte
	vocab := s.Vocab
	switch version {
	case 0:
		if !s.Shared {
			vocab = -vocab
		}
	case 1:
		hdr = le.AppendUint32(hdr, 0x616b3432)
		hdr = le.AppendUint32(hdr, 1)
	default:
		return fmt.Errorf("testmodel: cannot write version %d", version)
	}
	for _, v := range []int{s.Dim, s.Hidden, s.Layers, s.Heads, s.KVHeads, vocab, s.SeqLen} {
		hdr = le.AppendUint32(hdr, uint32(int32(v)))
	}
	if version == 1 {
		shared := byte(0)
		if s.Shared {
			shared = 1
		}
		hdr = append(hdr, shared)
		hdr = append(hdr, make([]byte, 256-len(hdr))...)
	}
	bw.Write(hdr)
	put := func(vs ...[]float32) {
		var b [4]byte
		for _, v := range vs {
			for _, x := range v {
				le.PutUint32(b[:], math.Float32bits(x))
				bw.Write(b[:])
			}
		}
	}
	if version == 0 {
		put(w.Emb, w.RMSAtt, w.WQ, w.WK, w.WV, w.WO, w.RMSFFN, w.W1, w.W2, w.W3, w.RMSFinal)
		put(make([]float32, s.SeqLen*(s.Dim/s.Heads))) // freq_cis real + imaginary
	} else {
		put(w.RMSAtt, w.RMSFFN, w.RMSFinal, w.Emb, w.WQ, w.WK, w.WV, w.WO, w.W1, w.W2, w.W3)
	}
	if !s.Shared {
		put(w.Cls)
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Pieces returns a llama2.c-style vocabulary of n >= 259 pieces: <unk>, BOS,
// EOS, the 256 byte tokens <0x00>..<0xFF>, then extra, then filler pieces.
func Pieces(n int, extra ...string) []string {
	p := []string{"<unk>", "\n<s>\n", "\n</s>\n"}
	for b := range 256 {
		p = append(p, fmt.Sprintf("<0x%02X>", b))
	}
	p = append(p, extra...)
	for i := 0; len(p) < n; i++ {
		p = append(p, fmt.Sprintf("~%d~", i))
	}
	return p[:n]
}

// Byte returns the id of the byte token for b in a Pieces vocabulary.
func Byte(b byte) int { return int(b) + 3 }

// WriteTokenizer writes a tokenizer.bin with the given pieces; scores
// default to minus the index (earlier pieces merge first).
func WriteTokenizer(path string, pieces []string, scores []float32) error {
	le := binary.LittleEndian
	maxLen := 1
	for _, p := range pieces {
		maxLen = max(maxLen, len(p))
	}
	b := le.AppendUint32(nil, uint32(maxLen))
	for i, p := range pieces {
		sc := -float32(i)
		if scores != nil {
			sc = scores[i]
		}
		b = le.AppendUint32(b, math.Float32bits(sc))
		b = le.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	return os.WriteFile(path, b, 0o644)
}

// Script writes a checkpoint with vocabulary vocab whose greedy next token
// after token t is next[t] (tokens missing from next lead to EOS). All
// layers are zero, so the residual stream stays the one-hot embedding of the
// current token and the classifier maps it to its successor.
func Script(path string, vocab, seqLen int, next map[int]int) error {
	s := Shape{Dim: vocab, Hidden: 2, Layers: 1, Heads: 1, KVHeads: 1, Vocab: vocab, SeqLen: seqLen}
	if vocab%2 != 0 {
		return fmt.Errorf("testmodel: scripted vocabulary size %d must be even", vocab)
	}
	w := NewWeights(s)
	w.Cls = make([]float32, vocab*vocab)
	s.Shared = false
	for t := range vocab {
		w.Emb[t*vocab+t] = 1
		n, ok := next[t]
		if !ok {
			n = 2
		}
		w.Cls[n*vocab+t] = 10
	}
	for i := range w.RMSFinal {
		w.RMSFinal[i] = 1
	}
	return Write(path, s, w, 0)
}
