// Package ggufmodel writes GGUF model files with random weights for tests
// and benchmarks: any supported architecture (llama, qwen2, qwen3), shape
// and weight type, with a small synthetic vocabulary (SentencePiece-style
// for llama, byte-level BPE for Qwen) or one supplied by the caller.
//
// The weights are random but not flat: the output matrix is a scaled copy
// of the token embeddings under a random permutation plus noise, so that
// each position's logits have one clear maximum (the successor of the
// current token, moved by what attention adds). Greedy generation then
// does not hinge on near-ties that the rounding differences between two
// correct engines could flip. Start with Write.
package ggufmodel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"

	"github.com/streamgate/streamgate/engine/gguf"
	"github.com/streamgate/streamgate/engine/llama2/kernels"
	"github.com/streamgate/streamgate/engine/llama2/tokenizer"
)

// Spec is a model file to write.
type Spec struct {
	Arch string    // llama, qwen2 or qwen3
	Type gguf.Type // of every weight matrix (norms and biases are F32)
	// Types overrides Type for the matrices whose tensor name ends with a
	// key (llama.cpp's Q4_K_M keeps attn_v and ffn_down in Q6_K). A K-quant
	// matrix whose rows are not a whole number of 256-element super-blocks
	// falls back as llama.cpp's quantizer does: Q4_K to Q5_0, Q5_K to Q5_1,
	// Q6_K to Q8_0.
	Types                               map[string]gguf.Type
	Dim, Hidden, Layers, Heads, KVHeads int
	HeadDim                             int // 0: Dim/Heads
	Context                             int
	Tied                                bool // no output.weight: the classifier is token_embd
	RopeFreqs                           bool // a llama3-style rope_freqs.weight tensor
	RopeBase                            float32
	Seed                                uint64
	// Vocab is the tokenizer; nil writes SmallVocab(Arch).
	Vocab *tokenizer.Vocab
	// ChatTemplate is tokenizer.chat_template ("" for none).
	ChatTemplate string
	// Name is general.name ("": "random ARCH TYPE").
	Name string
	// Extra is more metadata: each key replaces the one written from the
	// fields above, or is added. Drop leaves keys out.
	Extra []gguf.KV
	Drop  []string
	// OutputScale scales the output matrix (0: 0.1); larger makes the
	// logits more peaked.
	OutputScale float32
}

// Small returns the small test shape: every row a whole number of K-quant
// super-blocks (256), grouped-query attention, and for qwen3 a head width
// that is not Dim/Heads.
func Small(arch string, typ gguf.Type, seed uint64) Spec {
	s := Spec{Arch: arch, Type: typ, Dim: 256, Hidden: 512, Layers: 2, Heads: 4, KVHeads: 2, Context: 256, Seed: seed, OutputScale: 0.03}
	switch arch {
	case "qwen3":
		s.HeadDim = 128
		s.RopeBase = 1000000
		s.ChatTemplate = ChatML
	case "qwen2":
		s.RopeBase = 1000000
		s.ChatTemplate = ChatML
	case "llama":
		s.RopeFreqs = true
		s.RopeBase = 500000
	}
	return s
}

// Write writes the model s describes to path.
func Write(path string, s Spec) error {
	meta, tensors, err := Build(s)
	if err != nil {
		return err
	}
	return Save(path, meta, tensors)
}

// Save writes a GGUF file with meta and tensors to path.
func Save(path string, meta []gguf.KV, tensors []gguf.NewTensor) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := gguf.Write(f, meta, tensors); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Build returns the metadata and tensors of the model s describes.
func Build(s Spec) ([]gguf.KV, []gguf.NewTensor, error) {
	if s.Vocab == nil {
		v := SmallVocab(s.Arch)
		s.Vocab = &v
	}
	hs := s.HeadDim
	if hs == 0 {
		hs = s.Dim / s.Heads
	}
	qDim, kvDim := s.Heads*hs, s.KVHeads*hs
	vocab := len(s.Vocab.Tokens)
	a := s.Arch
	if s.Name == "" {
		s.Name = fmt.Sprintf("random %s %s", a, s.Type)
	}
	meta := []gguf.KV{
		{Key: "general.architecture", Value: a},
		{Key: "general.name", Value: s.Name},
		{Key: "general.file_type", Value: uint32(fileType(s.Type))},
		{Key: a + ".context_length", Value: uint32(s.Context)},
		{Key: a + ".embedding_length", Value: uint32(s.Dim)},
		{Key: a + ".block_count", Value: uint32(s.Layers)},
		{Key: a + ".feed_forward_length", Value: uint32(s.Hidden)},
		{Key: a + ".attention.head_count", Value: uint32(s.Heads)},
		{Key: a + ".attention.head_count_kv", Value: uint32(s.KVHeads)},
		{Key: a + ".attention.layer_norm_rms_epsilon", Value: float32(1e-6)},
		{Key: a + ".rope.dimension_count", Value: uint32(hs)},
	}
	if s.HeadDim != 0 {
		meta = append(meta,
			gguf.KV{Key: a + ".attention.key_length", Value: uint32(hs)},
			gguf.KV{Key: a + ".attention.value_length", Value: uint32(hs)})
	}
	if s.RopeBase != 0 {
		meta = append(meta, gguf.KV{Key: a + ".rope.freq_base", Value: s.RopeBase})
	}
	if s.Arch == "llama" {
		meta = append(meta, gguf.KV{Key: a + ".vocab_size", Value: uint32(vocab)})
	}
	meta = append(meta, VocabMetadata(*s.Vocab, s.ChatTemplate)...)
	meta = slices.DeleteFunc(meta, func(kv gguf.KV) bool {
		return slices.Contains(s.Drop, kv.Key) || slices.ContainsFunc(s.Extra, func(e gguf.KV) bool { return e.Key == kv.Key })
	})
	meta = append(meta, s.Extra...)

	rng := rand.New(rand.NewPCG(s.Seed, 0x9e3779b97f4a7c15))
	normal := func(n int, std float64) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(rng.NormFloat64() * std)
		}
		return out
	}
	around1 := func(n int) []float32 {
		out := normal(n, 0.1)
		for i := range out {
			out[i]++
		}
		return out
	}
	var tensors []gguf.NewTensor
	add := func(name string, typ gguf.Type, x []float32, dims ...uint64) {
		tensors = append(tensors, gguf.NewTensor{Name: name, Dims: dims, Type: typ, Data: encode(typ, x)})
	}
	mat := func(name string, in, out int, gain float64) {
		add(name, s.matType(name, in), normal(in*out, gain/math.Sqrt(float64(in))), uint64(in), uint64(out))
	}
	emb := normal(vocab*s.Dim, 1)
	add("token_embd.weight", s.matType("token_embd.weight", s.Dim), emb, uint64(s.Dim), uint64(vocab))
	add("output_norm.weight", gguf.F32, around1(s.Dim), uint64(s.Dim))
	if !s.Tied {
		scale := s.OutputScale
		if scale == 0 {
			scale = 0.1
		}
		out := normal(vocab*s.Dim, 0.02)
		perm := rng.Perm(vocab)
		for j := range vocab { // row perm[t] is token t's embedding: t is followed by perm[t]
			src, dst := emb[j*s.Dim:(j+1)*s.Dim], out[perm[j]*s.Dim:(perm[j]+1)*s.Dim]
			for i, v := range src {
				dst[i] += scale * v
			}
		}
		add("output.weight", s.matType("output.weight", s.Dim), out, uint64(s.Dim), uint64(vocab))
	}
	if s.RopeFreqs {
		f := make([]float32, hs/2)
		for i := range f { // llama3's shape: high frequencies 1, low ones up to 8
			f[i] = float32(1 + 7*float64(i)/float64(len(f)-1))
		}
		add("rope_freqs.weight", gguf.F32, f, uint64(hs/2))
	}
	for l := range s.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		add(p+"attn_norm.weight", gguf.F32, around1(s.Dim), uint64(s.Dim))
		mat(p+"attn_q.weight", s.Dim, qDim, 1)
		mat(p+"attn_k.weight", s.Dim, kvDim, 1)
		mat(p+"attn_v.weight", s.Dim, kvDim, 1)
		switch s.Arch {
		case "qwen2":
			add(p+"attn_q.bias", gguf.F32, normal(qDim, 0.1), uint64(qDim))
			add(p+"attn_k.bias", gguf.F32, normal(kvDim, 0.1), uint64(kvDim))
			add(p+"attn_v.bias", gguf.F32, normal(kvDim, 0.1), uint64(kvDim))
		case "qwen3":
			add(p+"attn_q_norm.weight", gguf.F32, around1(hs), uint64(hs))
			add(p+"attn_k_norm.weight", gguf.F32, around1(hs), uint64(hs))
		}
		mat(p+"attn_output.weight", qDim, s.Dim, 0.5)
		add(p+"ffn_norm.weight", gguf.F32, around1(s.Dim), uint64(s.Dim))
		mat(p+"ffn_gate.weight", s.Dim, s.Hidden, 1)
		mat(p+"ffn_up.weight", s.Dim, s.Hidden, 1)
		mat(p+"ffn_down.weight", s.Hidden, s.Dim, 0.5)
	}
	return meta, tensors, nil
}

// matType is the type of the matrix name with rows of in elements.
func (s Spec) matType(name string, in int) gguf.Type {
	t := s.Type
	for suffix, o := range s.Types {
		if strings.HasSuffix(name, suffix) {
			t = o
		}
	}
	if in%t.BlockSize() != 0 {
		t = map[gguf.Type]gguf.Type{gguf.Q4_K: gguf.Q5_0, gguf.Q5_K: gguf.Q5_1, gguf.Q6_K: gguf.Q8_0}[t]
	}
	return t
}

func encode(t gguf.Type, x []float32) []byte {
	k := map[gguf.Type]kernels.DType{
		gguf.F32: kernels.F32, gguf.F16: kernels.F16, gguf.BF16: kernels.BF16, gguf.Q8_0: kernels.Q8_0,
		gguf.Q4_0: kernels.Q4_0, gguf.Q4_K: kernels.Q4_K, gguf.Q6_K: kernels.Q6_K,
		gguf.Q4_1: kernels.Q4_1, gguf.Q5_0: kernels.Q5_0, gguf.Q5_1: kernels.Q5_1, gguf.Q5_K: kernels.Q5_K,
	}[t]
	return kernels.Quantize(k, x)
}

// fileType is general.file_type (llama.cpp's LLAMA_FTYPE) of a file whose
// matrices are mostly of type t (Q4_K is Q4_K_M, Q5_K is Q5_K_M).
func fileType(t gguf.Type) int {
	return map[gguf.Type]int{
		gguf.F32: 0, gguf.F16: 1, gguf.Q4_0: 2, gguf.Q4_1: 3, gguf.Q8_0: 7, gguf.Q5_0: 8, gguf.Q5_1: 9,
		gguf.Q4_K: 15, gguf.Q5_K: 17, gguf.Q6_K: 18, gguf.BF16: 32,
	}[t]
}
