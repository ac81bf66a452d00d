package tokenizer_test

import (
	"context"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/streamgate/streamgate/engine/llama2/tokenizer"
)

// Benchmarks of loading the two real vocabularies and encoding prompts of
// English-like text (words of TinyStories drawn at random):
//
//	go test -run '^$' -bench . ./engine/llama2/tokenizer/

// storyText returns n bytes of words separated by spaces and punctuation.
func storyText(n int) string {
	words := strings.Fields("once upon a time there was a little girl named Lily she loved to play outside " +
		"in the park with her friend Tim one day they saw a big red ball under the tree and " +
		"ran to get it the sun was warm happy said mom because it is fun to share toys dog cat")
	r := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(words[r.IntN(len(words))])
		switch r.IntN(12) {
		case 0:
			b.WriteString(". ")
		case 1:
			b.WriteString(", ")
		default:
			b.WriteByte(' ')
		}
	}
	return b.String()[:n]
}

var vocabs = []struct {
	file  string
	vocab int
}{{"tok512.bin", 512}, {"tokenizer.bin", 32000}}

func BenchmarkLoad(b *testing.B) {
	for _, v := range vocabs {
		b.Run(v.file, func(b *testing.B) {
			data, err := os.ReadFile(sharedModels(b, v.file))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := tokenizer.Parse(data, v.vocab); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEncode(b *testing.B) {
	for _, v := range vocabs {
		for _, size := range []struct {
			name string
			n    int
		}{{"4KB", 4 << 10}, {"64KB", 64 << 10}, {"1MB", 1 << 20}} {
			b.Run(v.file+"/"+size.name, func(b *testing.B) {
				tk, err := tokenizer.Load(sharedModels(b, v.file), v.vocab)
				if err != nil {
					b.Fatal(err)
				}
				text := storyText(size.n)
				b.SetBytes(int64(len(text)))
				for b.Loop() {
					encode(b, tk, text)
				}
			})
		}
	}
}

// encode is Encode with BOS and a background context, failing t on error.
func encode(t testing.TB, tk *tokenizer.Tokenizer, text string) []int {
	t.Helper()
	return mustEncode(t, tk, text, true, false)
}

func mustEncode(t testing.TB, tk *tokenizer.Tokenizer, text string, bos, eos bool) []int {
	t.Helper()
	toks, err := tk.Encode(context.Background(), text, bos, eos)
	if err != nil {
		t.Fatal(err)
	}
	return toks
}
