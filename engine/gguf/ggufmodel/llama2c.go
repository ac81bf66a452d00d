package ggufmodel

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/streamgate/streamgate/engine/gguf"
	"github.com/streamgate/streamgate/engine/llama2/tokenizer"
)

// Llama2C converts a llama2.c checkpoint (the legacy version 0 format, as
// the stories*.bin files are) and its tokenizer.bin into a GGUF model of
// architecture llama: the weights as F32 tensors, unchanged (llama2.c
// keeps llama.cpp's layout: rows [out][in], RoPE on adjacent pairs, so
// no permutation), its hyperparameters (RMSNorm epsilon 1e-5, RoPE base
// 10000), and a SentencePiece vocabulary from the tokenizer (pieces with
// "▁" for the space, <unk>, <s> and </s> at 0, 1 and 2, byte tokens at
// 3..258). TinyStories models end a story with BOS, so BOS is also the
// end-of-turn token: generation stops there, as llama2.c's run.c stops.
// chatTemplate is tokenizer.chat_template ("" for none).
func Llama2C(checkpoint, tok []byte, chatTemplate string) ([]gguf.KV, []gguf.NewTensor, error) {
	if len(checkpoint) < 28 {
		return nil, nil, fmt.Errorf("llama2.c checkpoint: %d bytes, shorter than its header", len(checkpoint))
	}
	var h [7]int
	for i := range h {
		h[i] = int(int32(binary.LittleEndian.Uint32(checkpoint[4*i:])))
	}
	dim, hidden, layers, heads, kvHeads, vocab, seqLen := h[0], h[1], h[2], h[3], h[4], h[5], h[6]
	shared := vocab > 0
	vocab = max(vocab, -vocab)
	if dim <= 0 || hidden <= 0 || layers <= 0 || heads <= 0 || kvHeads <= 0 || dim%heads != 0 || heads%kvHeads != 0 || seqLen <= 0 {
		return nil, nil, fmt.Errorf("llama2.c checkpoint: header %v is not a version 0 model's", h)
	}
	hs := dim / heads
	kvDim := kvHeads * hs
	floats := vocab*dim + layers*(2*dim+2*dim*dim+2*kvDim*dim+3*dim*hidden) + dim + seqLen*hs
	if !shared {
		floats += vocab * dim
	}
	if want := 28 + 4*floats; len(checkpoint) != want {
		return nil, nil, fmt.Errorf("llama2.c checkpoint: %d bytes, its header %v needs %d", len(checkpoint), h, want)
	}
	v, err := llama2cVocab(tok, vocab)
	if err != nil {
		return nil, nil, err
	}

	data := checkpoint[28:]
	take := func(n int) []byte {
		b := data[:4*n]
		data = data[4*n:]
		return b
	}
	// stacked splits one tensor stacked over the layers into per-layer
	// slices of n floats.
	stacked := func(n int) [][]byte {
		all := take(layers * n)
		out := make([][]byte, layers)
		for l := range out {
			out[l] = all[4*l*n : 4*(l+1)*n]
		}
		return out
	}
	emb := take(vocab * dim)
	rmsAtt := stacked(dim)
	wq, wk, wv, wo := stacked(dim*dim), stacked(kvDim*dim), stacked(kvDim*dim), stacked(dim*dim)
	rmsFFN := stacked(dim)
	w1, w2, w3 := stacked(hidden*dim), stacked(dim*hidden), stacked(hidden*dim)
	rmsFinal := take(dim)
	take(seqLen * hs) // the legacy freq_cis tables
	f32 := func(name string, b []byte, dims ...int) gguf.NewTensor {
		d := make([]uint64, len(dims))
		for i, x := range dims {
			d[i] = uint64(x)
		}
		return gguf.NewTensor{Name: name, Dims: d, Type: gguf.F32, Data: b}
	}
	tensors := []gguf.NewTensor{f32("token_embd.weight", emb, dim, vocab), f32("output_norm.weight", rmsFinal, dim)}
	if !shared {
		tensors = append(tensors, f32("output.weight", take(vocab*dim), dim, vocab))
	}
	for l := range layers {
		p := fmt.Sprintf("blk.%d.", l)
		tensors = append(tensors,
			f32(p+"attn_norm.weight", rmsAtt[l], dim),
			f32(p+"attn_q.weight", wq[l], dim, dim),
			f32(p+"attn_k.weight", wk[l], dim, kvDim),
			f32(p+"attn_v.weight", wv[l], dim, kvDim),
			f32(p+"attn_output.weight", wo[l], dim, dim),
			f32(p+"ffn_norm.weight", rmsFFN[l], dim),
			f32(p+"ffn_gate.weight", w1[l], dim, hidden),
			f32(p+"ffn_down.weight", w2[l], hidden, dim),
			f32(p+"ffn_up.weight", w3[l], dim, hidden))
	}
	meta := []gguf.KV{
		{Key: "general.architecture", Value: "llama"},
		{Key: "general.name", Value: "llama2.c"},
		{Key: "general.file_type", Value: uint32(0)},
		{Key: "llama.context_length", Value: uint32(seqLen)},
		{Key: "llama.embedding_length", Value: uint32(dim)},
		{Key: "llama.block_count", Value: uint32(layers)},
		{Key: "llama.feed_forward_length", Value: uint32(hidden)},
		{Key: "llama.attention.head_count", Value: uint32(heads)},
		{Key: "llama.attention.head_count_kv", Value: uint32(kvHeads)},
		{Key: "llama.attention.layer_norm_rms_epsilon", Value: float32(1e-5)},
		{Key: "llama.rope.dimension_count", Value: uint32(hs)},
		{Key: "llama.rope.freq_base", Value: float32(10000)},
		{Key: "llama.vocab_size", Value: uint32(vocab)},
	}
	return append(meta, VocabMetadata(v, chatTemplate)...), tensors, nil
}

// WriteLlama2C converts the llama2.c checkpoint and tokenizer.bin at the
// paths given (Llama2C) into a GGUF file at path.
func WriteLlama2C(path, checkpoint, tok, chatTemplate string) error {
	c, err := os.ReadFile(checkpoint)
	if err != nil {
		return err
	}
	t, err := os.ReadFile(tok)
	if err != nil {
		return err
	}
	meta, tensors, err := Llama2C(c, t, chatTemplate)
	if err != nil {
		return err
	}
	return Save(path, meta, tensors)
}

// llama2cVocab reads a llama2.c tokenizer.bin of n pieces as a
// SentencePiece vocabulary.
func llama2cVocab(b []byte, n int) (tokenizer.Vocab, error) {
	v := tokenizer.NewVocab("llama")
	v.BOS, v.EOS, v.UNK, v.EOT, v.AddBOS, v.AddSpacePrefix = 1, 2, 0, 1, true, true
	if len(b) < 4 {
		return v, fmt.Errorf("llama2.c tokenizer: %d bytes, shorter than its header", len(b))
	}
	b = b[4:]
	for id := range n {
		if len(b) < 8 {
			return v, fmt.Errorf("llama2.c tokenizer: ends at piece %d of %d", id, n)
		}
		score := math.Float32frombits(binary.LittleEndian.Uint32(b))
		size := int(int32(binary.LittleEndian.Uint32(b[4:])))
		if size < 0 || len(b) < 8+size {
			return v, fmt.Errorf("llama2.c tokenizer: piece %d of %d bytes runs past the end", id, size)
		}
		piece := string(b[8 : 8+size])
		b = b[8+size:]
		typ := int32(1) // normal
		switch {
		case id == 0:
			typ = 2 // unknown
		case id == 1 || id == 2:
			typ, piece = 3, strings.TrimSpace(piece) // control: "\n<s>\n" is <s>
		case id < 259:
			typ = 6 // byte: <0xHH>
		default:
			piece = strings.ReplaceAll(piece, " ", "▁")
		}
		v.Tokens = append(v.Tokens, piece)
		v.Scores = append(v.Scores, score)
		v.Types = append(v.Types, typ)
	}
	return v, nil
}
