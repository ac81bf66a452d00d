package llama2

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/streamgate/streamgate/engine/gguf"
	"github.com/streamgate/streamgate/engine/gguf/ggufmodel"
	"github.com/streamgate/streamgate/engine/internal/llamacpp"
	"github.com/streamgate/streamgate/engine/llama2/tokenizer"
	"github.com/streamgate/streamgate/engine/llama2/tokenizer/hfref"
)

// generalKeys is the general.* and quantize.* metadata that downloaded
// files carry beyond what the engine reads (llama.cpp's converter and
// quantizer write them).
func generalKeys(basename, size string) []gguf.KV {
	return []gguf.KV{
		{Key: "general.type", Value: "model"},
		{Key: "general.basename", Value: basename},
		{Key: "general.finetune", Value: "Instruct"},
		{Key: "general.size_label", Value: size},
		{Key: "general.license", Value: "apache-2.0"},
		{Key: "general.tags", Value: []string{"chat", "text-generation"}},
		{Key: "general.languages", Value: []string{"en", "fr", "zh"}},
		{Key: "general.quantization_version", Value: uint32(2)},
		{Key: "quantize.imatrix.file", Value: basename + ".imatrix"},
		{Key: "quantize.imatrix.dataset", Value: "calibration_datav3.txt"},
		{Key: "quantize.imatrix.entries_count", Value: int32(112)},
		{Key: "quantize.imatrix.chunks_count", Value: int32(125)},
	}
}

// TestGGUFMetadataLlamaCpp writes files shaped as the Llama 3.2, Qwen2.5,
// SmolLM2 and TinyLlama downloads are, with the metadata they carry (and
// some they may leave out, for llama.cpp's defaults), and checks what the
// engine reads from each against llama.cpp on the same file: BOS and EOS,
// whether BOS and EOS are added, every token that ends a generation,
// the token ids of the corpus, and 16 greedy tokens after a prompt (which
// RoPE scaling and alignment would move).
func TestGGUFMetadataLlamaCpp(t *testing.T) {
	data := llama2cTokenizer(t)
	bpe := func(name, pre string) tokenizer.Vocab { return hfVocab(t, name, pre) }
	id := func(v tokenizer.Vocab, text string) uint32 {
		i := slices.Index(v.Tokens, text)
		if i < 0 {
			t.Fatalf("no token %q", text)
		}
		return uint32(i)
	}
	small := func(arch string, v tokenizer.Vocab) ggufmodel.Spec {
		return ggufmodel.Spec{Arch: arch, Type: gguf.Q8_0, Dim: 64, Hidden: 128, Layers: 1, Heads: 2, KVHeads: 1,
			Context: 256, Seed: 11, Vocab: &v, Tied: true, OutputScale: 0.05}
	}
	type file struct {
		name string
		spec ggufmodel.Spec
	}
	var files []file

	// Llama 3.2 1B Instruct (the Llama 3.1 vocabulary, whose package names
	// ids 128004 and 128008 as reserved tokens): llama3 rope_freqs, head
	// width in key_length, no add_bos_token (llama.cpp adds BOS for
	// llama-bpe), EOT found by text, EOM by its key, a padding token, data
	// aligned to 64 bytes.
	llama3 := bpe("llama3_1", "llama-bpe")
	s := small("llama", llama3)
	s.Name, s.RopeFreqs, s.RopeBase, s.ChatTemplate = "Llama 3.2 1B Instruct", true, 500000, hfref.Load(t, "llama3_1").Config.ChatTemplate
	s.Drop = []string{"tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token"}
	s.Extra = append(generalKeys("Llama-3.2", "1B"),
		gguf.KV{Key: "general.alignment", Value: uint32(64)},
		gguf.KV{Key: "llama.attention.key_length", Value: uint32(32)},
		gguf.KV{Key: "llama.attention.value_length", Value: uint32(32)},
		gguf.KV{Key: "tokenizer.ggml.padding_token_id", Value: uint32(128004)},
		gguf.KV{Key: "tokenizer.ggml.eom_token_id", Value: uint32(128008)})
	files = append(files, file{"llama3.2", s})

	// Qwen2.5 0.5B Instruct: QKV biases, BOS id set but not added, a
	// padding token; and a file-separator id set by key on a token that
	// is no FIM token by its text, which then ends a generation.
	qwen := bpe("qwen3", "qwen2")
	s = small("qwen2", qwen)
	s.Name, s.RopeBase, s.ChatTemplate = "Qwen2.5 0.5B Instruct", 1000000, hfref.Load(t, "qwen3").Config.ChatTemplate
	s.Extra = append(generalKeys("Qwen2.5", "0.5B"),
		gguf.KV{Key: "tokenizer.ggml.bos_token_id", Value: id(qwen, "<|endoftext|>")},
		gguf.KV{Key: "tokenizer.ggml.padding_token_id", Value: id(qwen, "<|endoftext|>")},
		gguf.KV{Key: "tokenizer.ggml.add_bos_token", Value: false},
		gguf.KV{Key: "tokenizer.ggml.fim_sep_token_id", Value: id(qwen, "<|box_end|>")})
	files = append(files, file{"qwen2.5", s})

	// SmolLM2 135M Instruct: llama architecture with a byte-level BPE
	// vocabulary (smollm pre-tokenizer), BOS <|im_start|>, EOS <|im_end|>,
	// unknown <|endoftext|>, add_space_prefix false, no add_bos_token.
	smol := bpe("qwen3", "smollm")
	s = small("llama", smol)
	s.Name, s.RopeBase = "SmolLM2 135M Instruct", 100000
	s.Drop = []string{"tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token"}
	s.Extra = append(generalKeys("SmolLM2", "135M"),
		gguf.KV{Key: "tokenizer.ggml.bos_token_id", Value: id(smol, "<|im_start|>")},
		gguf.KV{Key: "tokenizer.ggml.eos_token_id", Value: id(smol, "<|im_end|>")},
		gguf.KV{Key: "tokenizer.ggml.unknown_token_id", Value: id(smol, "<|endoftext|>")},
		gguf.KV{Key: "tokenizer.ggml.padding_token_id", Value: id(smol, "<|im_end|>")},
		gguf.KV{Key: "tokenizer.ggml.add_space_prefix", Value: false})
	files = append(files, file{"smollm2", s})

	// TinyLlama 1.1B Chat: SentencePiece with scores and byte, unknown
	// and control token types, a padding id, and linear RoPE scaling by a
	// factor with no scaling type (llama.cpp's default is linear).
	spm := hfref.Llama2cVocab(data)
	s = small("llama", spm)
	s.Name = "TinyLlama 1.1B Chat v1.0"
	s.Extra = append(generalKeys("TinyLlama", "1.1B"),
		gguf.KV{Key: "tokenizer.ggml.padding_token_id", Value: uint32(2)},
		gguf.KV{Key: "llama.rope.scaling.factor", Value: float32(4)})
	files = append(files, file{"tinyllama", s})

	// A SentencePiece file from before those keys: no special token ids
	// (llama.cpp's defaults: BOS 1, EOS 2, unknown 0), no add_* flags,
	// and linear scaling under its old key.
	s = small("llama", spm)
	s.Name = "old sentencepiece"
	s.Drop = []string{"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
		"tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token", "tokenizer.ggml.add_space_prefix"}
	s.Extra = []gguf.KV{{Key: "llama.rope.scale_linear", Value: float32(2)}}
	files = append(files, file{"old-spm", s})

	dir := t.TempDir()
	ctx := context.Background()
	texts := append(hfref.Corpus(), tokenizerTexts...)
	prompts := make([][]int, len(files))
	var jobs []llamacpp.Job
	for i, f := range files {
		path := filepath.Join(dir, f.name+".gguf")
		if err := ggufmodel.Write(path, f.spec); err != nil {
			t.Fatal(err)
		}
		m, tok, _, err := loadGGUF(path, 256)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		prompts[i], err = tok.Tokenize(ctx, "Hello world, 2+2=4. Ça va? 日本語", true, true)
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, llamacpp.Job{Model: path, Vocab: len(f.spec.Vocab.Tokens), Tokenize: texts, Special: true,
			Tokens: prompts[i], Steps: 16, LogitSteps: 4, Context: 256})
	}
	refs := llamacpp.Run(t, jobs...)
	for i, f := range files {
		t.Run(f.name, func(t *testing.T) {
			ref := refs[i]
			m, codec, bos, err := loadGGUF(jobs[i].Model, 256)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			tok := codec.(*tokenizer.GGUF)
			sp := ref.Special
			if tok.BOS() != sp.BOS || tok.EOS() != sp.EOS {
				t.Errorf("BOS %d, EOS %d; llama.cpp %d, %d", tok.BOS(), tok.EOS(), sp.BOS, sp.EOS)
			}
			if (bos >= 0) != sp.AddBOS {
				t.Errorf("adds BOS: %v, llama.cpp %v", bos >= 0, sp.AddBOS)
			}
			eos, _ := tok.Tokenize(ctx, "x", true, false)
			if addsEOS := eos[len(eos)-1] == tok.EOS(); addsEOS != sp.AddEOS {
				t.Errorf("adds EOS: %v, llama.cpp %v", addsEOS, sp.AddEOS)
			}
			var eog []int
			for id := range tok.Vocab() {
				if tok.EndOfGeneration(id) {
					eog = append(eog, id)
				}
			}
			if !slices.Equal(eog, sp.EOG) {
				t.Errorf("tokens ending a generation %v, llama.cpp %v", eog, sp.EOG)
			}
			for j, text := range texts {
				got, err := tok.Tokenize(ctx, text, false, true)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, ref.Tokens[j]) {
					t.Errorf("%q: token ids\n%v, llama.cpp\n%v", text, got, ref.Tokens[j])
				}
			}
			llamacpp.Compare(t, llamacpp.Greedy(t, m, prompts[i], 16), ref.Steps, 0.1)
		})
	}
}
