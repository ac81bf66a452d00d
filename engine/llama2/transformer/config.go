package transformer

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Errors wrapped by every Load and Parse failure that concerns the file's
// contents (I/O errors are returned as they are).
var (
	// ErrFormat marks a file that is not a well-formed llama2.c checkpoint:
	// too short, an implausible header, or a size that disagrees with it.
	ErrFormat = errors.New("not a valid llama2.c checkpoint")
	// ErrUnsupported marks a recognised llama2.c export this package does
	// not read (version 2, int8 Q8_0, and unknown versions).
	ErrUnsupported = errors.New("unsupported llama2.c checkpoint version")
)

// Config is a checkpoint's hyperparameters.
type Config struct {
	Dim       int // transformer width
	HiddenDim int // FFN width
	Layers    int
	Heads     int // query heads
	KVHeads   int // key/value heads (< Heads for grouped-query attention)
	Vocab     int
	SeqLen    int // maximum context length
	// SharedClassifier is true when the output classifier is the token
	// embedding table (legacy header: vocab_size > 0).
	SharedClassifier bool

	// Set by GGUF files; the zero values are llama2.c's.
	Arch     string  // GGUF general.architecture: llama, qwen2, qwen3
	HeadDim  int     // width of one head when it is not Dim/Heads (Qwen3)
	NormEps  float32 // RMSNorm epsilon; 0 means 1e-5
	RopeBase float64 // RoPE frequency base; 0 means 10000
	RopeNeox bool    // rotate (i, i+half) pairs (Qwen) instead of adjacent ones
}

// HeadSize is the width of one attention head: HeadDim, or Dim/Heads.
func (c Config) HeadSize() int {
	if c.HeadDim > 0 {
		return c.HeadDim
	}
	return c.Dim / c.Heads
}

// QDim is the width of one position's queries (all heads).
func (c Config) QDim() int { return c.Heads * c.HeadSize() }

// eps is the RMSNorm epsilon.
func (c Config) eps() float32 {
	if c.NormEps > 0 {
		return c.NormEps
	}
	return 1e-5
}

// KVDim is the width of one position's keys (or values).
func (c Config) KVDim() int { return c.KVHeads * c.HeadSize() }

// String formats the header values the way they are stored.
func (c Config) String() string {
	return fmt.Sprintf("dim=%d hidden_dim=%d n_layers=%d n_heads=%d n_kv_heads=%d vocab_size=%d seq_len=%d shared_classifier=%v",
		c.Dim, c.HiddenDim, c.Layers, c.Heads, c.KVHeads, c.Vocab, c.SeqLen, c.SharedClassifier)
}

// maxDim bounds every header value, so that sizes computed from a foreign
// file's bytes cannot overflow and are rejected as implausible.
const maxDim = 1 << 20

// Validate checks that the values describe a model this package can run.
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"dim", c.Dim}, {"hidden_dim", c.HiddenDim}, {"n_layers", c.Layers}, {"n_heads", c.Heads},
		{"n_kv_heads", c.KVHeads}, {"vocab_size", c.Vocab}, {"seq_len", c.SeqLen}} {
		if f.v <= 0 || f.v > maxDim {
			return fmt.Errorf("%w: header field %s=%d is out of range (1..%d)", ErrFormat, f.name, f.v, maxDim)
		}
	}
	switch {
	case c.HeadDim == 0 && c.Dim%c.Heads != 0:
		return fmt.Errorf("%w: dim=%d is not a multiple of n_heads=%d", ErrFormat, c.Dim, c.Heads)
	case c.HeadSize()%2 != 0:
		return fmt.Errorf("%w: head size %d (dim/n_heads) is odd; RoPE needs pairs", ErrFormat, c.HeadSize())
	case c.KVHeads > c.Heads || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("%w: n_heads=%d is not a multiple of n_kv_heads=%d", ErrFormat, c.Heads, c.KVHeads)
	}
	return nil
}

// weightFloats returns the number of float32 weights, in the legacy layout
// (which includes the unused RoPE tables) or not.
func (c Config) weightFloats(legacy bool) int64 {
	dim, hid, l, kv := int64(c.Dim), int64(c.HiddenDim), int64(c.Layers), int64(c.KVDim())
	n := int64(c.Vocab)*dim + // token embedding
		2*l*dim + // rms_att, rms_ffn
		2*l*dim*dim + // wq, wo
		2*l*kv*dim + // wk, wv
		3*l*hid*dim + // w1, w2, w3
		dim // rms_final
	if legacy {
		n += int64(c.SeqLen) * int64(c.HeadSize()) // freq_cis real and imaginary halves
	}
	if !c.SharedClassifier {
		n += int64(c.Vocab) * dim
	}
	return n
}

// Header sizes of the two formats this package reads.
const (
	legacyHeaderSize = 7 * 4
	v1HeaderSize     = 256
	magicAK42        = 0x616b3432 // "ak42" read as a little-endian uint32
)

// FileSize returns the exact size in bytes of a legacy (version 0)
// checkpoint with this configuration.
func (c Config) FileSize() int64 { return legacyHeaderSize + 4*c.weightFloats(true) }

// format is a parsed header: the configuration and where the weights start.
type format struct {
	cfg     Config
	version int
	offset  int64 // first weight byte
}

// size is the file size the header calls for.
func (f format) size() int64 { return f.offset + 4*f.cfg.weightFloats(f.version == 0) }

// parseHeader reads a checkpoint header from the first bytes of a file.
func parseHeader(b []byte) (format, error) {
	le := binary.LittleEndian
	if len(b) >= 4 && le.Uint32(b) == magicAK42 {
		if len(b) < 8 {
			return format{}, fmt.Errorf("%w: %d bytes, too short for an \"ak42\" header", ErrFormat, len(b))
		}
		v := int32(le.Uint32(b[4:]))
		if v != 1 {
			return format{}, fmt.Errorf("%w: export version %d (\"ak42\" header); only the legacy version 0 and fp32 version 1 are read", ErrUnsupported, v)
		}
		if len(b) < v1HeaderSize {
			return format{}, fmt.Errorf("%w: %d bytes, too short for the %d-byte version 1 header", ErrFormat, len(b), v1HeaderSize)
		}
		p := func(i int) int { return int(int32(le.Uint32(b[8+4*i:]))) }
		cfg := Config{Dim: p(0), HiddenDim: p(1), Layers: p(2), Heads: p(3), KVHeads: p(4), Vocab: p(5), SeqLen: p(6)}
		switch b[8+7*4] {
		case 0:
		case 1:
			cfg.SharedClassifier = true
		default:
			return format{}, fmt.Errorf("%w: version 1 shared_classifier flag is %d, not 0 or 1", ErrFormat, b[8+7*4])
		}
		if err := cfg.Validate(); err != nil {
			return format{}, err
		}
		return format{cfg: cfg, version: 1, offset: v1HeaderSize}, nil
	}
	if len(b) < legacyHeaderSize {
		return format{}, fmt.Errorf("%w: %d bytes, too short for the %d-byte header", ErrFormat, len(b), legacyHeaderSize)
	}
	p := func(i int) int { return int(int32(le.Uint32(b[4*i:]))) }
	cfg := Config{Dim: p(0), HiddenDim: p(1), Layers: p(2), Heads: p(3), KVHeads: p(4), Vocab: p(5), SeqLen: p(6)}
	cfg.SharedClassifier = cfg.Vocab > 0
	if cfg.Vocab < 0 {
		cfg.Vocab = -cfg.Vocab
	}
	if err := cfg.Validate(); err != nil {
		return format{}, err
	}
	return format{cfg: cfg, version: 0, offset: legacyHeaderSize}, nil
}

// checkSize compares a file's size with the one its header calls for.
func (f format) checkSize(size int64) error {
	want := f.size()
	switch {
	case size < want:
		return fmt.Errorf("%w: file is %d bytes but its header (%v) needs %d: truncated", ErrFormat, size, f.cfg, want)
	case size > want:
		return fmt.Errorf("%w: file is %d bytes but its header (%v) needs %d: %d unexpected trailing bytes", ErrFormat, size, f.cfg, want, size-want)
	}
	return nil
}
