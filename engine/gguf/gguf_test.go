package gguf

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sample(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	meta := []KV{
		{Key: "general.architecture", Value: "llama"},
		{Key: "llama.block_count", Value: uint32(2)},
		{Key: "llama.rope.freq_base", Value: float32(500000)},
		{Key: "tokenizer.ggml.tokens", Value: []string{"a", "b"}},
		{Key: "tokenizer.ggml.scores", Value: []float32{0, -1}},
		{Key: "tokenizer.ggml.token_type", Value: []int32{1, 3}},
		{Key: "tokenizer.ggml.add_bos_token", Value: true},
		{Key: "big", Value: uint64(1 << 40)},
	}
	tensors := []NewTensor{
		{Name: "a", Dims: []uint64{3}, Type: F32, Data: make([]byte, 12)},
		{Name: "b", Dims: []uint64{64, 2}, Type: Q8_0, Data: bytes.Repeat([]byte{7}, 4*34)},
		{Name: "c", Dims: []uint64{32}, Type: Type(99), Data: []byte{1, 2, 3}},
	}
	if err := Write(&buf, meta, tensors); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	data := sample(t)
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Version != 3 || f.Alignment != 32 || len(f.Keys) != 8 || len(f.Tensors) != 3 {
		t.Fatalf("version %d alignment %d keys %v tensors %d", f.Version, f.Alignment, f.Keys, len(f.Tensors))
	}
	if s, _ := f.String("general.architecture"); s != "llama" {
		t.Errorf("architecture %q", s)
	}
	if n, ok := f.Uint("llama.block_count"); !ok || n != 2 {
		t.Errorf("block_count %d %v", n, ok)
	}
	if v, ok := f.Float("llama.rope.freq_base"); !ok || v != 500000 {
		t.Errorf("freq_base %v %v", v, ok)
	}
	if b, ok := f.Bool("tokenizer.ggml.add_bos_token"); !ok || !b {
		t.Errorf("add_bos %v %v", b, ok)
	}
	if toks, _ := f.Metadata["tokenizer.ggml.tokens"].([]string); len(toks) != 2 || toks[1] != "b" {
		t.Errorf("tokens %v", f.Metadata["tokenizer.ggml.tokens"])
	}
	if ty, _ := f.Metadata["tokenizer.ggml.token_type"].([]int32); len(ty) != 2 || ty[1] != 3 {
		t.Errorf("types %v", f.Metadata["tokenizer.ggml.token_type"])
	}
	info, raw, ok := f.Tensor("b")
	if !ok || info.Type != Q8_0 || len(raw) != 4*34 || raw[0] != 7 || info.Offset%32 != 0 {
		t.Errorf("tensor b: %+v, %d bytes", info, len(raw))
	}
	if info, raw, ok := f.Tensor("c"); !ok || raw != nil || info.Type.String() != "type 99" {
		t.Errorf("unknown-type tensor: %+v %v %v", info, raw, ok)
	}
}

func TestMalformed(t *testing.T) {
	good := sample(t)
	for name, c := range map[string]struct {
		data []byte
		want string
	}{
		"magic":      {append([]byte("GGUX"), good[4:]...), `no "GGUF" magic`},
		"version":    {append(append([]byte("GGUF"), 1, 0, 0, 0), good[8:]...), "version 1"},
		"truncated":  {good[:100], "truncated"},
		"short data": {good[:len(good)-200], "extends beyond the end of the file"},
		"counts":     {append(append(append([]byte{}, good[:8]...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0), good[16:]...), "cannot fit"},
	} {
		_, err := Parse(c.data)
		if err == nil || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrFormat with %q", name, err, c.want)
		}
	}
}
