package transformer

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"unsafe"

	"github.com/streamgate/streamgate/engine/internal/mmap"
	"github.com/streamgate/streamgate/engine/llama2/kernels"
)

// matrix is a weight matrix [out][in]: float32 (f), or raw blocks of a
// quantized or half-precision type (raw), as the file holds it.
type matrix struct {
	typ kernels.DType
	f   []float32
	raw []byte
}

func f32(f []float32) matrix { return matrix{typ: kernels.F32, f: f} }

// row decodes row i of an [rows][n] matrix into out (n floats).
func (m matrix) row(i int, out []float32) {
	n := len(out)
	if m.typ == kernels.F32 {
		copy(out, m.f[i*n:(i+1)*n])
		return
	}
	rb := m.typ.RowBytes(n)
	kernels.Dequantize(m.typ, m.raw[i*rb:(i+1)*rb], out)
}

// job is the MatMul of x (rows of n) by m, an [d][n] matrix, into out.
func (m matrix) job(out, x []float32, rows, n, d int) kernels.MatMul {
	return kernels.MatMul{Out: out, X: x, W: m.f, Raw: m.raw, Type: m.typ, Rows: rows, N: n, D: d}
}

// layer is one transformer block's weights. The optional ones (biases,
// QK-norm) are nil when the architecture has none.
type layer struct {
	attnNorm, ffnNorm []float32 // [dim]
	wq, wk, wv, wo    matrix    // [qDim][dim], [kvDim][dim] twice, [dim][qDim]
	w1, w2, w3        matrix    // gate [hidden][dim], down [dim][hidden], up [hidden][dim]
	bq, bk, bv        []float32 // QKV biases (Qwen2)
	qNorm, kNorm      []float32 // [headSize] RMSNorm of each head before RoPE (Qwen3)
}

// weights are views of the model file's tensors.
type weights struct {
	tokenEmbedding matrix // [vocab][dim]
	layers         []layer
	rmsFinal       []float32 // [dim]
	classifier     matrix    // [vocab][dim], the embedding table when shared
}

// Model is a loaded model. It is immutable and safe for concurrent use;
// per-sequence state lives in Sessions and per-pass scratch in Workspaces.
type Model struct {
	cfg         Config
	w           weights
	cos         []float32 // [seqLen][headSize/2] RoPE rotation per position
	sin         []float32
	weightBytes int64
	release     func() error
	hugePages   bool // the weights were copied onto huge pages
}

// mmapThreshold is the size from which Load maps the file instead of
// reading it.
const mmapThreshold = 4 << 20

// Load reads the llama2.c checkpoint at path: the legacy version 0 format
// (shared or separate classifier, grouped-query attention) or the fp32
// version 1 export. Large files are memory-mapped read-only; Close unmaps.
// Errors for malformed files wrap ErrFormat or ErrUnsupported and name the
// path.
func Load(path string) (m *Model, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("checkpoint %s: not a regular file", path)
	}
	head := make([]byte, v1HeaderSize)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return nil, err
	}
	hdr, err := parseHeader(head[:n])
	if err == nil {
		err = hdr.checkSize(st.Size())
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	var data []byte
	release := func() error { return nil }
	if st.Size() >= mmapThreshold {
		data, release, err = mmap.Map(f, st.Size())
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	m, err = parse(data, hdr)
	if err != nil {
		release()
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	m.release = release
	return m, nil
}

// Parse builds a model from a checkpoint held in memory. The model may
// alias data, which must not change while the model is in use.
func Parse(data []byte) (*Model, error) {
	hdr, err := parseHeader(data)
	if err != nil {
		return nil, err
	}
	return parse(data, hdr)
}

func parse(data []byte, hdr format) (*Model, error) {
	if err := hdr.checkSize(int64(len(data))); err != nil {
		return nil, err
	}
	all := floats(data[hdr.offset:])
	c := hdr.cfg
	dim, hid, l, kv := c.Dim, c.HiddenDim, c.Layers, c.KVDim()
	take := func(n int) []float32 {
		t := all[:n:n]
		all = all[n:]
		return t
	}
	var rmsAtt, rmsFFN, wq, wk, wv, wo, w1, w2, w3 []float32
	var w weights
	if hdr.version == 0 {
		w.tokenEmbedding = f32(take(c.Vocab * dim))
		rmsAtt = take(l * dim)
		wq = take(l * dim * dim)
		wk = take(l * kv * dim)
		wv = take(l * kv * dim)
		wo = take(l * dim * dim)
		rmsFFN = take(l * dim)
		w1 = take(l * hid * dim)
		w2 = take(l * dim * hid)
		w3 = take(l * hid * dim)
		w.rmsFinal = take(dim)
		take(c.SeqLen * c.HeadSize()) // legacy freq_cis_real and freq_cis_imag
	} else {
		rmsAtt = take(l * dim)
		rmsFFN = take(l * dim)
		w.rmsFinal = take(dim)
		w.tokenEmbedding = f32(take(c.Vocab * dim))
		wq = take(l * dim * dim)
		wk = take(l * kv * dim)
		wv = take(l * kv * dim)
		wo = take(l * dim * dim)
		w1 = take(l * hid * dim)
		w2 = take(l * dim * hid)
		w3 = take(l * hid * dim)
	}
	if c.SharedClassifier {
		w.classifier = w.tokenEmbedding
	} else {
		w.classifier = f32(take(c.Vocab * dim))
	}
	at := func(s []float32, i, n int) []float32 { return s[i*n : (i+1)*n : (i+1)*n] }
	for i := range l {
		w.layers = append(w.layers, layer{
			attnNorm: at(rmsAtt, i, dim), ffnNorm: at(rmsFFN, i, dim),
			wq: f32(at(wq, i, dim*dim)), wk: f32(at(wk, i, kv*dim)), wv: f32(at(wv, i, kv*dim)), wo: f32(at(wo, i, dim*dim)),
			w1: f32(at(w1, i, hid*dim)), w2: f32(at(w2, i, dim*hid)), w3: f32(at(w3, i, hid*dim)),
		})
	}
	m := &Model{cfg: c, w: w, weightBytes: 4 * c.weightFloats(false), release: func() error { return nil }}
	m.cos, m.sin = ropeTables(c)
	return m, nil
}

// ropeTables precomputes the RoPE rotations the way llama2.c's run.c
// computes them per token: float32 ratio and product, float64 transcendental
// functions rounded to float32.
func ropeTables(c Config) (cos, sin []float32) {
	hs := c.HeadSize()
	half := hs / 2
	cos = make([]float32, c.SeqLen*half)
	sin = make([]float32, c.SeqLen*half)
	for p := range half {
		ratio := float32(2*p) / float32(hs)
		freq := 1 / float32(math.Pow(10000, float64(ratio)))
		for pos := range c.SeqLen {
			v := float64(float32(pos) * freq)
			cos[pos*half+p] = float32(math.Cos(v))
			sin[pos*half+p] = float32(math.Sin(v))
		}
	}
	return cos, sin
}

// floats views little-endian float32 data. On a little-endian machine with
// aligned data it aliases b; otherwise it decodes a copy.
func floats(b []byte) []float32 {
	n := len(b) / 4
	if n == 0 {
		return nil
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	if littleEndian && uintptr(p)%4 == 0 {
		return unsafe.Slice((*float32)(p), n)
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// Config returns the model's hyperparameters.
func (m *Model) Config() Config { return m.cfg }

// Close releases the file mapping, if any. The model must not be used
// afterwards.
func (m *Model) Close() error {
	r := m.release
	m.release = func() error { return nil }
	return r()
}

// HugePages reports whether the weights were copied onto huge pages at
// load (GGUFOptions.HugePages on a platform that has them) rather than
// read where the file is mapped.
func (m *Model) HugePages() bool { return m.hugePages }
