package llama2

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/streamgate/streamgate/engine/gguf"
	"github.com/streamgate/streamgate/engine/gguf/ggufmodel"
	"github.com/streamgate/streamgate/engine/internal/llamacpp"
	"github.com/streamgate/streamgate/engine/llama2/tokenizer/hfref"
)

// TestGGUFRealVocabularyLlamaCpp writes GGUF files with the real Llama 3
// and Qwen3 vocabularies and chat templates (random weights, a small
// width) and checks what the backend loads from them against llama.cpp
// on the same files: the token ids of the tokenization corpus and of a
// rendered chat prompt (special-token text as special tokens, no BOS
// added: the engine's chat path), and 16 greedy tokens after that prompt
// (tied embeddings; the 64-token runs of TestGGUFParityLlamaCpp use small
// vocabularies, which keep the race detector's run short).
func TestGGUFRealVocabularyLlamaCpp(t *testing.T) {
	for _, c := range []struct{ name, arch, pre, chat string }{
		{"llama3", "llama", "llama-bpe", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2? Ça va? 日本語<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"qwen3", "qwen3", "qwen2", "<|im_start|>user\nWhat is 2+2? Ça va? 日本語<|im_end|>\n<|im_start|>assistant\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := hfref.Load(t, c.name)
			v, err := files.Vocab(c.pre)
			if err != nil {
				t.Fatal(err)
			}
			s := ggufmodel.Spec{Arch: c.arch, Type: gguf.Q8_0, Dim: 64, Hidden: 128, Layers: 1, Heads: 2, KVHeads: 1,
				Context: 256, Seed: 5, Vocab: &v, ChatTemplate: files.Config.ChatTemplate, RopeBase: 500000, Tied: true}
			path := filepath.Join(t.TempDir(), c.name+".gguf")
			if err := ggufmodel.Write(path, s); err != nil {
				t.Fatal(err)
			}
			m, tok, _, err := loadGGUF(path, 256, false)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			texts := append(hfref.Corpus(), c.chat)
			ids := make([][]int, len(texts))
			for i, text := range texts {
				if ids[i], err = tok.Tokenize(context.Background(), text, false, true); err != nil {
					t.Fatal(err)
				}
			}
			// The chat prompt as the engine tokenizes it, checked below.
			prompt := ids[len(ids)-1]
			ref := llamacpp.Run(t, llamacpp.Job{Model: path, Tokenize: texts,
				Vocab: len(v.Tokens), Tokens: prompt, Steps: 16, LogitSteps: 4, Context: 256})[0]
			for i, text := range texts {
				if !slices.Equal(ids[i], ref.Tokens[i]) {
					t.Errorf("%q: token ids\n%v, llama.cpp\n%v", text, ids[i], ref.Tokens[i])
				}
			}
			llamacpp.Compare(t, llamacpp.Greedy(t, m, prompt, 16), ref.Steps, 0.1)
		})
	}
}
