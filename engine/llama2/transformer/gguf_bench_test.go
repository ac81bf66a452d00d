package transformer_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/streamgate/streamgate/engine/gguf"
	"github.com/streamgate/streamgate/engine/gguf/ggufmodel"
	"github.com/streamgate/streamgate/engine/internal/llamacpp"
	"github.com/streamgate/streamgate/engine/llama2/kernels"
	"github.com/streamgate/streamgate/engine/llama2/transformer"
)

// BenchmarkGGUFDecode measures decoding (one token per forward pass, one
// session, one thread) on random-weight GGUF files: the small test shape,
// and Qwen2.5-0.5B's shape (896 wide, 24 layers, 14 heads of 64 with 2 KV
// heads, FFN 4864, 151,936-token vocabulary, tied embeddings) in Q8_0, and
// llama.cpp's speed on the same file and threads beside it (metric
// llamacpp-tok/s, also one thread: on a box busier than its cores, ggml's
// spinning thread barriers make two threads many times slower; skipped
// without the llama.cpp reference). Files are
// written to $STREAMGATE_BENCH_GGUF_DIR when set (kept for reruns), else
// to a temporary directory:
//
//	go test -run '^$' -bench GGUFDecode -benchtime 16x ./engine/llama2/transformer/
func BenchmarkGGUFDecode(b *testing.B) {
	qwen05 := func(typ gguf.Type) ggufmodel.Spec {
		v := ggufmodel.SmallVocab("qwen2")
		for i := len(v.Tokens); i < 151936; i++ {
			v.Tokens = append(v.Tokens, fmt.Sprintf("<filler%d>", i))
			v.Types = append(v.Types, 1)
		}
		return ggufmodel.Spec{Arch: "qwen2", Type: typ, Dim: 896, Hidden: 4864, Layers: 24, Heads: 14, KVHeads: 2,
			Context: 1024, RopeBase: 1e6, Tied: true, Seed: 1, Vocab: &v}
	}
	// llama.cpp's Q4_K_M of Qwen2.5-0.5B: the 896-wide rows fall back to
	// Q5_0, so only ffn_down (4864 wide) is in K-quants, half of them Q6_K.
	q4km := qwen05(gguf.Q4_K)
	q4km.Types = map[string]gguf.Type{}
	for l := 0; l < 24; l += 2 {
		q4km.Types[fmt.Sprintf("blk.%d.ffn_down.weight", l)] = gguf.Q6_K
	}
	for _, c := range []struct {
		name string
		spec ggufmodel.Spec
	}{
		{"small-Q8_0", ggufmodel.Small("qwen2", gguf.Q8_0, 1)},
		{"small-Q4_K", ggufmodel.Small("qwen2", gguf.Q4_K, 1)},
		{"small-F32", ggufmodel.Small("qwen2", gguf.F32, 1)},
		{"qwen2.5-0.5b-Q8_0", qwen05(gguf.Q8_0)},
		{"qwen2.5-0.5b-F16", qwen05(gguf.F16)},
		{"qwen2.5-0.5b-Q4_K_M", q4km},
	} {
		b.Run(c.name, func(b *testing.B) {
			dir := os.Getenv("STREAMGATE_BENCH_GGUF_DIR")
			if dir == "" {
				dir = b.TempDir()
			}
			path := filepath.Join(dir, c.name+".gguf")
			if _, err := os.Stat(path); err != nil {
				if err := ggufmodel.Write(path, c.spec); err != nil {
					b.Fatal(err)
				}
			}
			f, err := gguf.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			m, err := transformer.FromGGUF(f, transformer.GGUFOptions{MaxContext: 1024})
			if err != nil {
				f.Close()
				b.Fatal(err)
			}
			defer m.Close()
			pool := kernels.NewPool(1)
			defer pool.Close()
			ws := m.NewWorkspace(kernels.NewCPU(pool), transformer.WorkspaceOptions{MaxRows: 1})
			s := m.NewSession()
			logits := make([]float32, m.Config().Vocab)
			b.ResetTimer()
			for i := range b.N {
				step := transformer.Step{Session: s, Pos: i % 1024, Token: 7 + i%200, Logits: logits}
				if err := ws.Forward([]transformer.Step{step}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
			if os.Getenv("STREAMGATE_REQUIRE") == "" && !llamacpp.Available() {
				return
			}
			res := llamacpp.RunThreads(b, 1, llamacpp.Job{Model: path, Vocab: m.Config().Vocab, Tokens: []int{7, 8, 9}, Bench: 32, Context: 1024})[0]
			b.ReportMetric(32/res.DecodeSeconds, "llamacpp-tok/s")
		})
	}
}
