package transformer_test

import (
	"path/filepath"
	"testing"

	"github.com/streamgate/streamgate/engine/gguf"
	"github.com/streamgate/streamgate/engine/gguf/ggufmodel"
	"github.com/streamgate/streamgate/engine/internal/llamacpp"
	"github.com/streamgate/streamgate/engine/llama2/transformer"
)

// logitTolerance is the largest difference from llama.cpp's logits
// accepted per weight type (the logits of these files span about ±10,
// with a top-2 margin of about 4). Both engines quantize activations the
// same way (Q8_0 or Q8_K rows, bfloat16 for BF16); what differs is the
// order of float additions, and now and then an activation that rounds to
// the other integer, which moves later values by a weight times a
// quantization step. Measured on this project's machine (x86 with
// AVX-512): F32 within 2e-6, F16 5e-4, BF16 5e-3, the quantized types
// 1e-6 to 0.03 (engine/gguf/README.md has each). The margins leave room
// for llama.cpp's other CPU variants.
var logitTolerance = map[gguf.Type]float64{
	gguf.F32: 1e-4, gguf.F16: 2e-2, gguf.BF16: 2e-2, gguf.Q8_0: 0.1, gguf.Q4_0: 0.1, gguf.Q4_K: 0.1, gguf.Q6_K: 0.1,
	gguf.Q4_1: 0.1, gguf.Q5_0: 0.1, gguf.Q5_1: 0.1, gguf.Q5_K: 0.1,
}

// TestGGUFParityLlamaCpp writes a random-weight GGUF file for every
// architecture and weight type and checks this engine against llama.cpp on
// it: the logits after an 8-token prompt within logitTolerance, and the
// greedy continuation identical for 64 tokens (the logits of every step
// within tolerance too).
func TestGGUFParityLlamaCpp(t *testing.T) {
	dir := t.TempDir()
	const steps = 64
	type file struct {
		name string
		typ  gguf.Type
		path string
	}
	var files []file
	var jobs []llamacpp.Job
	prompt := []int{1, 270, 300, 262, 301, 263, 302, 280}
	for _, arch := range []string{"llama", "qwen2", "qwen3"} {
		for _, typ := range []gguf.Type{gguf.F32, gguf.F16, gguf.BF16, gguf.Q8_0, gguf.Q4_0, gguf.Q4_1, gguf.Q5_0, gguf.Q5_1, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K} {
			f := file{name: arch + "-" + typ.String(), typ: typ}
			f.path = filepath.Join(dir, f.name+".gguf")
			if err := ggufmodel.Write(f.path, ggufmodel.Small(arch, typ, 7)); err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
			vocab := len(ggufmodel.SmallVocab(arch).Tokens)
			jobs = append(jobs, llamacpp.Job{Model: f.path, Vocab: vocab, Tokens: prompt, Steps: steps, Context: 256})
		}
	}
	// Tied output embeddings (as Qwen3-0.6B and Llama 3.2 1B have).
	tied := file{name: "qwen3-Q8_0-tied", typ: gguf.Q8_0, path: filepath.Join(dir, "tied.gguf")}
	s := ggufmodel.Small("qwen3", gguf.Q8_0, 8)
	s.Tied = true
	if err := ggufmodel.Write(tied.path, s); err != nil {
		t.Fatal(err)
	}
	files = append(files, tied)
	jobs = append(jobs, llamacpp.Job{Model: tied.path, Vocab: len(ggufmodel.SmallVocab("qwen3").Tokens), Tokens: prompt, Steps: steps, Context: 256})
	// A Q4_K_M-like file, as llama.cpp quantizes Qwen2.5-0.5B: Q4_K with
	// one layer's ffn_down in Q6_K, and every matrix whose rows (384 wide)
	// are not whole 256-element super-blocks in the fallback types, Q5_0
	// for Q4_K and Q8_0 for Q6_K (output.weight).
	mixed := file{name: "qwen2-mixed-Q4_K_M", typ: gguf.Q4_K, path: filepath.Join(dir, "mixed.gguf")}
	s = ggufmodel.Small("qwen2", gguf.Q4_K, 9)
	s.Dim, s.Hidden, s.Heads, s.KVHeads = 384, 768, 6, 2
	s.Types = map[string]gguf.Type{"blk.0.ffn_down.weight": gguf.Q6_K, "output.weight": gguf.Q6_K}
	if err := ggufmodel.Write(mixed.path, s); err != nil {
		t.Fatal(err)
	}
	checkTypes(t, mixed.path, map[string]gguf.Type{
		"blk.0.attn_q.weight": gguf.Q5_0, "blk.1.ffn_down.weight": gguf.Q4_K,
		"blk.0.ffn_down.weight": gguf.Q6_K, "output.weight": gguf.Q8_0,
	})
	files = append(files, mixed)
	jobs = append(jobs, llamacpp.Job{Model: mixed.path, Vocab: len(ggufmodel.SmallVocab("qwen2").Tokens), Tokens: prompt, Steps: steps, Context: 256})
	ref := llamacpp.Run(t, jobs...)
	for i, f := range files {
		t.Run(f.name, func(t *testing.T) {
			g, err := gguf.Open(f.path)
			if err != nil {
				t.Fatal(err)
			}
			m, err := transformer.FromGGUF(g, transformer.GGUFOptions{})
			if err != nil {
				g.Close()
				t.Fatal(err)
			}
			defer m.Close()
			llamacpp.Compare(t, llamacpp.Greedy(t, m, prompt, steps), ref[i].Steps, logitTolerance[f.typ])
		})
	}
}

// checkTypes checks the types of some of a file's tensors.
func checkTypes(t *testing.T, path string, want map[string]gguf.Type) {
	t.Helper()
	g, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for name, typ := range want {
		if info, _, ok := g.Tensor(name); !ok || info.Type != typ {
			t.Errorf("%s: %s has type %s, want %s", path, name, info.Type, typ)
		}
	}
}
