package llama2

import (
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/streamgate/streamgate/engine/gguf"
	"github.com/streamgate/streamgate/engine/gguf/ggufmodel"
	"github.com/streamgate/streamgate/engine/internal/llamacpp"
	"github.com/streamgate/streamgate/engine/llama2/tokenizer"
	"github.com/streamgate/streamgate/engine/llama2/tokenizer/hfref"
)

// tokenizerTexts are texts beyond the corpus that probe SentencePiece's
// dummy prefix and special tokens next to spaces, and the pre-tokenizers'
// punctuation and digit rules.
var tokenizerTexts = []string{
	"<s>Hello", "<s> Hello", "a</s>b", " </s> ", "<unk>", "▁literal ▁", "x<s>", "<s><s>",
	"<|im_start|> spaced <|im_end|>  two", "<|endoftext|>\n", "<|eot_id|> x",
	"1234567 12 3 4567890 ١٢٣٤٥ ۱۲۳", "a+b=c; d<e>f ^ g|h ~i $j", "¿Qué? «bien» — ok… 。、",
	"don't 'quote' \"double\"", "x  \n  y\t\tz", "€100 ¥5 £3",
	"<|user|>\nHi there <|end|>\n<|assistant|>\n", "a </s>  b", "<|endoftext|> x", "<|system|> \t\n sys<|end|>", "<|placeholder5|> <|placeholder6|>",
}

// phi3Vocab is Phi-3's vocabulary: Llama 2's (from llama2.c's
// tokenizer.bin, data) and its added control tokens, whose rstrip
// attribute llama.cpp sets by the model's name.
func phi3Vocab(data []byte) tokenizer.Vocab {
	v := hfref.Llama2cVocab(data)
	v.Tokens = slices.Clone(v.Tokens)
	for _, t := range []string{"<|endoftext|>", "<|assistant|>", "<|placeholder1|>", "<|placeholder2|>", "<|placeholder3|>",
		"<|placeholder4|>", "<|system|>", "<|end|>", "<|placeholder5|>", "<|placeholder6|>", "<|user|>"} {
		v.Tokens = append(v.Tokens, t)
		v.Scores = append(v.Scores, 0)
		v.Types = append(v.Types, tokenizer.TypeControl)
	}
	// Two tokens of types llama.cpp reads as undefined (0, and one it does
	// not know): they stand for nothing and are no special tokens.
	v.Types = slices.Clone(v.Types)
	v.Types[len(v.Types)-3], v.Types[len(v.Types)-2] = tokenizer.TypeUndefined, 9
	return v
}

// llama2cTokenizer returns the real 32k tokenizer.bin (Llama 2's
// vocabulary as llama2.c exports it).
func llama2cTokenizer(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(modelDir(t), "tokenizer.bin"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// hfVocab returns the GGUF vocabulary of the reference tokenizer name with
// pre-tokenizer pre.
func hfVocab(t *testing.T, name, pre string) tokenizer.Vocab {
	t.Helper()
	v, err := hfref.Load(t, name).Vocab(pre)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestGGUFTokenizerLlamaCpp checks the tokenizer the engine reads from a
// GGUF file against llama.cpp's on the same file: the token ids of the
// corpus (special-token text parsed, no BOS added) and each token's text
// on its own, for SentencePiece vocabularies (the real Llama 2 one that
// TinyLlama carries, and a 32k Mistral-style one) and byte-level BPE with
// the smollm, gpt-2 and default pre-tokenizers and with none named, and
// Phi-3's vocabulary, whose special tokens llama.cpp gives rstrip by name.
func TestGGUFTokenizerLlamaCpp(t *testing.T) {
	type setup struct {
		name   string
		vocab  tokenizer.Vocab
		gname  string // general.name
		pieces bool   // compare each token's text (llama.cpp's cleans spaces for gpt2 and default)
	}
	data := llama2cTokenizer(t)
	spm2, err := hfref.Load(t, "llama2").SPMVocab()
	if err != nil {
		t.Fatal(err)
	}
	bpe := func(name, pre string) tokenizer.Vocab { return hfVocab(t, name, pre) }
	setups := []setup{
		{name: "tinyllama-spm", vocab: hfref.Llama2cVocab(data), pieces: true},
		{name: "mistral-spm", vocab: spm2, pieces: true},
		{name: "qwen3-smollm", vocab: bpe("qwen3", "smollm"), pieces: true},
		{name: "llama3-gpt2", vocab: bpe("llama3", "gpt-2")},
		{name: "llama3-default", vocab: bpe("llama3", "default")},
		{name: "qwen3-no-pre", vocab: bpe("qwen3", "")},
		{name: "phi3-spm", vocab: phi3Vocab(data), gname: "Phi-3 mini 4k instruct", pieces: true},
	}
	texts := append(hfref.Corpus(), tokenizerTexts...)
	dir := t.TempDir()
	var jobs []llamacpp.Job
	toks := make([]tokenizer.Codec, len(setups))
	for i, s := range setups {
		path := filepath.Join(dir, s.name+".gguf")
		spec := ggufmodel.Spec{Arch: "llama", Type: gguf.Q8_0, Dim: 32, Hidden: 32, Layers: 1, Heads: 1, KVHeads: 1,
			Context: 64, Seed: 1, Vocab: &s.vocab, Tied: true, Name: s.gname}
		if err := ggufmodel.Write(path, spec); err != nil {
			t.Fatal(err)
		}
		m, tok, _, err := loadGGUF(path, 64)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		m.Close()
		toks[i] = tok
		jobs = append(jobs, llamacpp.Job{Model: path, Vocab: len(s.vocab.Tokens), Tokenize: texts, Pieces: s.pieces})
	}
	refs := llamacpp.Run(t, jobs...)
	ctx := context.Background()
	for i, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			tok, ref := toks[i], refs[i]
			bad := 0
			for j, text := range texts {
				got, err := tok.Tokenize(ctx, text, false, true)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, ref.Tokens[j]) {
					if bad++; bad <= 8 {
						t.Errorf("%q: token ids\n%v, llama.cpp\n%v", text, got, ref.Tokens[j])
					}
				}
			}
			if !s.pieces {
				return
			}
			bos := -1
			if s.vocab.Model == "llama" {
				bos = int(s.vocab.BOS) // llama.cpp drops the dummy prefix of a token alone
			}
			bad = 0
			for id, h := range ref.Pieces {
				want, err := hex.DecodeString(h)
				if err != nil {
					t.Fatal(err)
				}
				got := tok.Piece(bos, id)
				if utf8.ValidString(got) && got != string(want) || !utf8.ValidString(got) && !strings.ContainsRune(string(want), utf8.RuneError) {
					if bad++; bad <= 8 {
						t.Errorf("token %d %q: text %q, llama.cpp %q", id, s.vocab.Tokens[id], got, want)
					}
				}
			}
			if !t.Failed() {
				t.Logf("%d texts and %d token texts identical to llama.cpp's", len(texts), len(ref.Pieces))
			}
		})
	}
}
