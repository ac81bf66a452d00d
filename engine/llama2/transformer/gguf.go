package transformer

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/streamgate/streamgate/engine/gguf"
	"github.com/streamgate/streamgate/engine/internal/mmap"
	"github.com/streamgate/streamgate/engine/llama2/kernels"
)

// Errors wrapped by FromGGUF's failures.
var (
	// ErrGGUFUnsupported marks a well-formed GGUF file this package does
	// not run: its architecture, a tensor type, a hyperparameter.
	ErrGGUFUnsupported = errors.New("unsupported GGUF model")
	// ErrGGUFModel marks a GGUF model whose metadata or tensors are
	// missing or inconsistent.
	ErrGGUFModel = errors.New("malformed GGUF model")
)

// Architectures lists the GGUF general.architecture values FromGGUF runs.
var Architectures = []string{"llama", "qwen2", "qwen3"}

// DTypes maps the GGUF tensor types the kernels run to theirs.
var dtypes = map[gguf.Type]kernels.DType{
	gguf.F32: kernels.F32, gguf.F16: kernels.F16, gguf.BF16: kernels.BF16,
	gguf.Q8_0: kernels.Q8_0, gguf.Q4_0: kernels.Q4_0, gguf.Q4_K: kernels.Q4_K, gguf.Q6_K: kernels.Q6_K,
	gguf.Q4_1: kernels.Q4_1, gguf.Q5_0: kernels.Q5_0, gguf.Q5_1: kernels.Q5_1, gguf.Q5_K: kernels.Q5_K,
}

// SupportedTypes names the tensor types FromGGUF accepts.
const SupportedTypes = "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K"

// GGUFOptions configure FromGGUF.
type GGUFOptions struct {
	// MaxContext caps the context length the file declares (0: no cap).
	MaxContext int
	// KeepMapped leaves the weight matrices where the file maps them. By
	// default, where the platform has huge pages (Linux), the quantized
	// and half-precision matrices are copied once into memory on huge
	// pages and the file's pages are dropped from the resident set:
	// decoding streams every weight once per token, and on 4 KiB file
	// pages that is a TLB miss every 4 KiB (about 1.5x slower on the box
	// this was measured on).
	KeepMapped bool
}

// FromGGUF builds a model from a parsed GGUF file of a supported
// architecture. Weights stay where the file maps them, in their own types;
// the model takes f over, and Close closes it. An unsupported architecture,
// tensor type or hyperparameter is an error wrapping ErrGGUFUnsupported that
// names it.
func FromGGUF(f *gguf.File, opts GGUFOptions) (*Model, error) {
	arch, _ := f.String("general.architecture")
	switch arch {
	case "llama", "qwen2", "qwen3":
	case "":
		return nil, fmt.Errorf("%w: GGUF file has no general.architecture", ErrGGUFModel)
	default:
		return nil, fmt.Errorf("%w: architecture %q (supported: %s)", ErrGGUFUnsupported, arch, strings.Join(Architectures, ", "))
	}
	l := ggufLoader{f: f, arch: arch}
	c := Config{
		Arch:      arch,
		Dim:       l.int("embedding_length", 0),
		HiddenDim: l.int("feed_forward_length", 0),
		Layers:    l.int("block_count", 0),
		Heads:     l.int("attention.head_count", 0),
		SeqLen:    l.int("context_length", 0),
		NormEps:   float32(l.float("attention.layer_norm_rms_epsilon", 1e-5)),
		RopeBase:  l.float("rope.freq_base", 10000),
		RopeNeox:  arch != "llama",
	}
	c.KVHeads = l.int("attention.head_count_kv", c.Heads)
	if l.err != nil {
		return nil, l.err
	}
	if c.Heads > 0 && c.Dim > 0 {
		hs := l.int("attention.key_length", c.Dim/c.Heads)
		if v := l.int("attention.value_length", hs); v != hs {
			l.fail(fmt.Errorf("%w: %s.attention.value_length %d differs from key_length %d", ErrGGUFUnsupported, arch, v, hs))
		}
		if hs != c.Dim/c.Heads || c.Dim%c.Heads != 0 {
			c.HeadDim = hs
		}
		if rd := l.int("rope.dimension_count", hs); rd != hs {
			l.fail(fmt.Errorf("%w: partial RoPE (%s.rope.dimension_count %d of head size %d)", ErrGGUFUnsupported, arch, rd, hs))
		}
	}
	// As llama.cpp: the scaling type is linear unless the file says, and
	// its factor is rope.scaling.factor, or the older rope.scale_linear (0
	// or absent: 1).
	freqScale := 1.0
	switch t, ok := f.String(arch + ".rope.scaling.type"); {
	case ok && t == "none":
	case !ok || t == "linear":
		fac, ok := f.Float(arch + ".rope.scaling.factor")
		if !ok {
			fac, _ = f.Float(arch + ".rope.scale_linear")
		}
		if fac > 0 {
			freqScale = 1 / fac
		}
	default:
		l.fail(fmt.Errorf("%w: RoPE scaling %q (supported: none, linear, llama3 rope_freqs)", ErrGGUFUnsupported, t))
	}
	if opts.MaxContext > 0 && c.SeqLen > opts.MaxContext {
		c.SeqLen = opts.MaxContext
	}
	emb := l.matrix("token_embd.weight", c.Dim, -1)
	if info, _, ok := f.Tensor("token_embd.weight"); ok && len(info.Dims) == 2 {
		c.Vocab = int(info.Dims[1])
	}
	if l.err != nil {
		return nil, l.err
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrGGUFModel, err)
	}
	dim, hid, qDim, kvDim, hs := c.Dim, c.HiddenDim, c.QDim(), c.KVDim(), c.HeadSize()
	w := weights{tokenEmbedding: emb, rmsFinal: l.vector("output_norm.weight", dim)}
	if _, _, ok := f.Tensor("output.weight"); ok {
		w.classifier = l.matrix("output.weight", dim, c.Vocab)
	} else {
		w.classifier, c.SharedClassifier = emb, true
	}
	for i := range c.Layers {
		p := fmt.Sprintf("blk.%d.", i)
		ly := layer{
			attnNorm: l.vector(p+"attn_norm.weight", dim),
			ffnNorm:  l.vector(p+"ffn_norm.weight", dim),
			wq:       l.matrix(p+"attn_q.weight", dim, qDim),
			wk:       l.matrix(p+"attn_k.weight", dim, kvDim),
			wv:       l.matrix(p+"attn_v.weight", dim, kvDim),
			wo:       l.matrix(p+"attn_output.weight", qDim, dim),
			w1:       l.matrix(p+"ffn_gate.weight", dim, hid),
			w2:       l.matrix(p+"ffn_down.weight", hid, dim),
			w3:       l.matrix(p+"ffn_up.weight", dim, hid),
		}
		switch arch {
		case "qwen2":
			ly.bq = l.vector(p+"attn_q.bias", qDim)
			ly.bk = l.vector(p+"attn_k.bias", kvDim)
			ly.bv = l.vector(p+"attn_v.bias", kvDim)
		case "qwen3":
			ly.qNorm = l.vector(p+"attn_q_norm.weight", hs)
			ly.kNorm = l.vector(p+"attn_k_norm.weight", hs)
		}
		w.layers = append(w.layers, ly)
	}
	var factors []float32
	if _, _, ok := f.Tensor("rope_freqs.weight"); ok {
		factors = l.vector("rope_freqs.weight", hs/2)
	}
	if l.err != nil {
		return nil, l.err
	}
	var size int64
	for _, t := range f.Tensors {
		size += int64(t.Bytes())
	}
	release := f.Close
	if !opts.KeepMapped && mmap.HugePages {
		free, err := w.copyToHugePages(f.Mapped())
		if err != nil {
			return nil, err
		}
		release = func() error { return errors.Join(free(), f.Close()) }
	}
	m := &Model{cfg: c, w: w, weightBytes: size, release: release}
	m.cos, m.sin = ggmlRopeTables(c, freqScale, factors)
	return m, nil
}

// ggmlRopeTables computes RoPE rotations as ggml's CPU backend does: the
// angle of pair i at position p is p·base^(-2i/headSize), accumulated by
// repeated float32 multiplication, divided by the pair's llama3 frequency
// factor and multiplied by the linear scale.
func ggmlRopeTables(c Config, freqScale float64, factors []float32) (cos, sin []float32) {
	hs := c.HeadSize()
	half := hs / 2
	cos = make([]float32, c.SeqLen*half)
	sin = make([]float32, c.SeqLen*half)
	thetaScale := float32(math.Pow(c.RopeBase, -2/float64(hs)))
	for pos := range c.SeqLen {
		theta := float32(pos)
		for i := range half {
			ff := float32(1)
			if factors != nil {
				ff = factors[i]
			}
			t := float32(freqScale) * (theta / ff)
			cos[pos*half+i] = float32(math.Cos(float64(t)))
			sin[pos*half+i] = float32(math.Sin(float64(t)))
			theta *= thetaScale
		}
	}
	return cos, sin
}

// ggufLoader reads hyperparameters and tensors, keeping the first error.
type ggufLoader struct {
	f    *gguf.File
	arch string
	err  error
}

func (l *ggufLoader) fail(err error) {
	if l.err == nil {
		l.err = err
	}
}

// int reads the architecture's key; def < 1 means the key is required.
func (l *ggufLoader) int(key string, def int) int {
	k := l.arch + "." + key
	v, ok := l.f.Uint(k)
	if _, present := l.f.Metadata[k]; !present {
		if def < 1 {
			l.fail(fmt.Errorf("%w: GGUF metadata %s is missing", ErrGGUFModel, k))
		}
		return def
	}
	if !ok || v < 1 || v > maxDim*64 {
		l.fail(fmt.Errorf("%w: GGUF metadata %s = %v is not a positive integer in range (per-layer arrays are not supported)", ErrGGUFModel, k, l.f.Metadata[k]))
		return def
	}
	return int(v)
}

func (l *ggufLoader) float(key string, def float64) float64 {
	k := l.arch + "." + key
	if _, present := l.f.Metadata[k]; !present {
		return def
	}
	v, ok := l.f.Float(k)
	if !ok || !(v > 0) {
		l.fail(fmt.Errorf("%w: GGUF metadata %s = %v is not a positive number", ErrGGUFModel, k, l.f.Metadata[k]))
		return def
	}
	return v
}

// tensor finds a tensor and checks its shape: rows of n elements, d rows
// (d < 0: any number).
func (l *ggufLoader) tensor(name string, n, d int) (gguf.TensorInfo, []byte, bool) {
	info, data, ok := l.f.Tensor(name)
	if !ok {
		l.fail(fmt.Errorf("%w: tensor %s is missing (architecture %s)", ErrGGUFModel, name, l.arch))
		return info, nil, false
	}
	want := []uint64{uint64(n)}
	if d >= 0 {
		want = append(want, uint64(d))
	}
	shapeOK := len(info.Dims) >= 1 && info.Dims[0] == uint64(n)
	switch {
	case d < 0:
		shapeOK = shapeOK && len(info.Dims) == 2
	case d == 1:
		shapeOK = shapeOK && (len(info.Dims) == 1 || len(info.Dims) == 2 && info.Dims[1] == 1)
	default:
		shapeOK = shapeOK && len(info.Dims) == 2 && info.Dims[1] == uint64(d)
	}
	if !shapeOK {
		l.fail(fmt.Errorf("%w: tensor %s has shape %v, want %v", ErrGGUFModel, name, info.Dims, want))
		return info, nil, false
	}
	if _, ok := dtypes[info.Type]; !ok {
		l.fail(fmt.Errorf("%w: tensor %s has type %s (supported: %s)", ErrGGUFUnsupported, name, info.Type, SupportedTypes))
		return info, nil, false
	}
	return info, data, true
}

// matrix returns a [d][n] weight matrix as the file holds it.
func (l *ggufLoader) matrix(name string, n, d int) matrix {
	info, data, ok := l.tensor(name, n, d)
	if !ok {
		return matrix{}
	}
	t := dtypes[info.Type]
	if n%t.BlockSize() != 0 {
		l.fail(fmt.Errorf("%w: tensor %s: rows of %d are not whole %s blocks", ErrGGUFModel, name, n, t))
		return matrix{}
	}
	if t == kernels.F32 {
		return f32(floats(data))
	}
	return matrix{typ: t, raw: data}
}

// vector returns a small vector (norm weights, biases, RoPE factors) as
// float32: a view of F32 data, a decoded copy otherwise.
func (l *ggufLoader) vector(name string, n int) []float32 {
	info, data, ok := l.tensor(name, n, 1)
	if !ok {
		return nil
	}
	t := dtypes[info.Type]
	if t == kernels.F32 {
		return floats(data)
	}
	if n%t.BlockSize() != 0 {
		l.fail(fmt.Errorf("%w: tensor %s: %d values are not whole %s blocks", ErrGGUFModel, name, n, t))
		return nil
	}
	out := make([]float32, n)
	kernels.Dequantize(t, data, out)
	return out
}

// copyToHugePages moves the raw weight matrices into one region of
// anonymous memory on huge pages (mmap.Anon), each once even where two
// matrices share it (tied embeddings), and with mapped drops their file
// pages from the resident set. The function it returns frees the region.
func (w *weights) copyToHugePages(mapped bool) (func() error, error) {
	ms := []*matrix{&w.tokenEmbedding, &w.classifier}
	for i := range w.layers {
		ly := &w.layers[i]
		ms = append(ms, &ly.wq, &ly.wk, &ly.wv, &ly.wo, &ly.w1, &ly.w2, &ly.w3)
	}
	total := 0
	for _, m := range ms {
		total += len(m.raw)
	}
	if total == 0 {
		return func() error { return nil }, nil
	}
	mem, free, err := mmap.Anon(total)
	if err != nil {
		return nil, fmt.Errorf("copying the weights to huge pages: %w", err)
	}
	moved := map[*byte][]byte{}
	for _, m := range ms {
		if len(m.raw) == 0 {
			continue
		}
		if to, ok := moved[&m.raw[0]]; ok {
			m.raw = to
			continue
		}
		to := mem[:len(m.raw):len(m.raw)]
		mem = mem[len(m.raw):]
		copy(to, m.raw)
		if mapped {
			mmap.Drop(m.raw)
		}
		moved[&m.raw[0]] = to
		m.raw = to
	}
	return free, nil
}
