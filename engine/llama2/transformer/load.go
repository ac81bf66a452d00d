package transformer

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"unsafe"
)

// weights are views of the checkpoint's tensors, stacked over layers.
type weights struct {
	tokenEmbedding []float32 // [vocab][dim]
	rmsAtt         []float32 // [layers][dim]
	wq             []float32 // [layers][dim][dim]
	wk             []float32 // [layers][kvDim][dim]
	wv             []float32 // [layers][kvDim][dim]
	wo             []float32 // [layers][dim][dim]
	rmsFFN         []float32 // [layers][dim]
	w1             []float32 // [layers][hidden][dim]
	w2             []float32 // [layers][dim][hidden]
	w3             []float32 // [layers][hidden][dim]
	rmsFinal       []float32 // [dim]
	classifier     []float32 // [vocab][dim], the embedding table when shared
}

// Model is a loaded checkpoint. It is immutable and safe for concurrent use;
// per-sequence state lives in Sessions and per-pass scratch in Workspaces.
type Model struct {
	cfg     Config
	w       weights
	cos     []float32 // [seqLen][headSize/2] RoPE rotation per position
	sin     []float32
	release func() error
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
		data, release, err = mapFile(f, st.Size())
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
	var w weights
	if hdr.version == 0 {
		w.tokenEmbedding = take(c.Vocab * dim)
		w.rmsAtt = take(l * dim)
		w.wq = take(l * dim * dim)
		w.wk = take(l * kv * dim)
		w.wv = take(l * kv * dim)
		w.wo = take(l * dim * dim)
		w.rmsFFN = take(l * dim)
		w.w1 = take(l * hid * dim)
		w.w2 = take(l * dim * hid)
		w.w3 = take(l * hid * dim)
		w.rmsFinal = take(dim)
		take(c.SeqLen * c.HeadSize()) // legacy freq_cis_real and freq_cis_imag
	} else {
		w.rmsAtt = take(l * dim)
		w.rmsFFN = take(l * dim)
		w.rmsFinal = take(dim)
		w.tokenEmbedding = take(c.Vocab * dim)
		w.wq = take(l * dim * dim)
		w.wk = take(l * kv * dim)
		w.wv = take(l * kv * dim)
		w.wo = take(l * dim * dim)
		w.w1 = take(l * hid * dim)
		w.w2 = take(l * dim * hid)
		w.w3 = take(l * hid * dim)
	}
	if c.SharedClassifier {
		w.classifier = w.tokenEmbedding
	} else {
		w.classifier = take(c.Vocab * dim)
	}
	m := &Model{cfg: c, w: w, release: func() error { return nil }}
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
