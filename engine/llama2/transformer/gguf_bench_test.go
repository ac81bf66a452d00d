//go:build unix

package transformer_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamgate/streamgate/engine/gguf"
	"github.com/streamgate/streamgate/engine/gguf/ggufmodel"
	"github.com/streamgate/streamgate/engine/internal/llamacpp"
	"github.com/streamgate/streamgate/engine/llama2/kernels"
	"github.com/streamgate/streamgate/engine/llama2/transformer"
)

// BenchmarkGGUF measures, on random-weight GGUF files, decoding (one token
// per forward pass, one session), prompt processing (512 tokens, and 64 as
// a chat's time to first token, in one pass, logits for the last), and
// decoding 8 sessions at once (decode8: one row each per pass, tok/s
// counting them all), each on 1 and 2 threads, with llama.cpp's
// speed on the same file and threads beside it (metrics llamacpp-tok/s and
// llamacpp-RSS-MB, node's resident set; skipped without the llama.cpp
// reference). Shapes: the small test shape; Qwen2.5-0.5B's (896 wide, 24
// layers, 14 heads of 64 with 2 KV heads, FFN 4864, 151,936-token
// vocabulary, tied embeddings); Llama-3.2-1B's (2048 wide, 16 layers, 32
// heads of 64 with 8 KV heads, FFN 8192, 128,256 tokens, tied). Decode
// also reports RSS-MB (this process's resident set after the run: the
// mapped file pages read, the KV cache and the Go heap), and
// weights-MB/tok, the bytes of weights one token reads. On a box busier
// than its cores, ggml's spinning thread barriers make llama.cpp's
// two-thread numbers swing widely; cpu-ms/tok and llamacpp-cpu-ms/tok,
// each process's CPU time per token, are steadier there. Files are written to
// $STREAMGATE_BENCH_GGUF_DIR when set (kept for reruns), else to a
// temporary directory:
//
//	go test -run '^$' -bench 'GGUF/qwen2.5-0.5b-Q8_0/decode' -benchtime 16x ./engine/llama2/transformer/
//	go test -run '^$' -bench 'GGUF/qwen2.5-0.5b-Q8_0/prompt512' -benchtime 2x ./engine/llama2/transformer/
//	go test -run '^$' -bench 'GGUF/qwen2.5-0.5b-Q8_0/decode8' -benchtime 16x ./engine/llama2/transformer/
func BenchmarkGGUF(b *testing.B) {
	qwen05 := func(typ gguf.Type) ggufmodel.Spec {
		v := ggufmodel.SmallVocab("qwen2")
		for i := len(v.Tokens); i < 151936; i++ {
			v.Tokens = append(v.Tokens, fmt.Sprintf("<filler%d>", i))
			v.Types = append(v.Types, 1)
		}
		return ggufmodel.Spec{Arch: "qwen2", Type: typ, Dim: 896, Hidden: 4864, Layers: 24, Heads: 14, KVHeads: 2,
			Context: 1024, RopeBase: 1e6, Tied: true, Seed: 1, Vocab: &v}
	}
	llama1b := func(typ gguf.Type) ggufmodel.Spec {
		v := ggufmodel.SmallVocab("llama")
		for i := len(v.Tokens); i < 128256; i++ {
			v.Tokens = append(v.Tokens, fmt.Sprintf("<filler%d>", i))
			v.Scores = append(v.Scores, 0)
			v.Types = append(v.Types, 1)
		}
		return ggufmodel.Spec{Arch: "llama", Type: typ, Dim: 2048, Hidden: 8192, Layers: 16, Heads: 32, KVHeads: 8,
			Context: 1024, RopeBase: 500000, RopeFreqs: true, Tied: true, Seed: 1, Vocab: &v}
	}
	// llama.cpp's Q4_K_M, simplified: Q4_K, with ffn_down and attn_v of
	// every other layer and the embeddings in Q6_K. Qwen2.5-0.5B's 896-wide
	// rows fall back (Q4_K to Q5_0, Q6_K to Q8_0), so there only ffn_down
	// (4864 wide) is in K-quants.
	q4km := func(s ggufmodel.Spec) ggufmodel.Spec {
		s.Types = map[string]gguf.Type{"token_embd.weight": gguf.Q6_K}
		for l := 0; l < s.Layers; l += 2 {
			s.Types[fmt.Sprintf("blk.%d.ffn_down.weight", l)] = gguf.Q6_K
			s.Types[fmt.Sprintf("blk.%d.attn_v.weight", l)] = gguf.Q6_K
		}
		return s
	}
	prompt := make([]int, 512)
	for i := range prompt {
		prompt[i] = 7 + i%200
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
		{"qwen2.5-0.5b-Q4_K_M", q4km(qwen05(gguf.Q4_K))},
		{"llama3.2-1b-Q8_0", llama1b(gguf.Q8_0)},
		{"llama3.2-1b-Q4_K_M", q4km(llama1b(gguf.Q4_K))},
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
			for _, threads := range []int{1, 2} {
				b.Run(fmt.Sprintf("decode/threads=%d", threads), func(b *testing.B) {
					benchGGUF(b, path, threads, nil)
				})
				b.Run(fmt.Sprintf("prompt512/threads=%d", threads), func(b *testing.B) {
					benchGGUF(b, path, threads, prompt)
				})
				b.Run(fmt.Sprintf("prompt64/threads=%d", threads), func(b *testing.B) {
					benchGGUF(b, path, threads, prompt[:64])
				})
				b.Run(fmt.Sprintf("decode%d/threads=%d", streams, threads), func(b *testing.B) {
					benchGGUFStreams(b, path, threads)
				})
			}
		})
	}
}

// streams is how many sessions the concurrent-decode benchmark batches.
const streams = 8

// benchGGUFStreams runs b.N decode passes of streams sessions at once on
// the file at path (one row per session, so each pass reads the weights
// once for all of them), and llama.cpp's batched decode of as many
// sequences of one context. tok/s counts every session's token.
func benchGGUFStreams(b *testing.B, path string, threads int) {
	m, _ := openGGUF(b, path)
	defer m.Close()
	pool := kernels.NewPool(threads)
	defer pool.Close()
	ws := m.NewWorkspace(kernels.NewCPU(pool), transformer.WorkspaceOptions{MaxRows: streams})
	steps := make([]transformer.Step, streams)
	for i := range steps {
		steps[i] = transformer.Step{Session: m.NewSession(), Logits: make([]float32, m.Config().Vocab)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := range b.N {
		for j := range steps {
			steps[j].Pos, steps[j].Token = i%1024, 7+(i+j)%200
		}
		if err := ws.Forward(steps); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	tokens := float64(b.N * streams)
	b.ReportMetric(tokens/b.Elapsed().Seconds(), "tok/s")
	b.ReportMetric((cpuTime()-cpu0).Seconds()*1e3/tokens, "cpu-ms/tok")
	b.ReportMetric(float64(rss())/1e6, "RSS-MB")
	if os.Getenv("STREAMGATE_REQUIRE") == "" && !llamacpp.Available() {
		return
	}
	res, ok := llamacppBench[b.Name()]
	if !ok {
		res = llamacpp.RunThreads(b, threads, llamacpp.Job{Model: path, Vocab: m.Config().Vocab, Tokens: []int{7, 8, 9},
			Bench: 32, Parallel: streams, Context: 1024})[0]
		llamacppBench[b.Name()] = res
	}
	b.ReportMetric(streams*32/res.DecodeSeconds, "llamacpp-tok/s")
	b.ReportMetric(res.DecodeCPUSeconds*1e3/(streams*32), "llamacpp-cpu-ms/tok")
}

// openGGUF loads the file at path as the benchmarks run it; the model
// owns the file (Model.Close closes it).
func openGGUF(b *testing.B, path string) (*transformer.Model, *gguf.File) {
	f, err := gguf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	m, err := transformer.FromGGUF(f, transformer.GGUFOptions{MaxContext: 1024, HugePages: true})
	if err != nil {
		f.Close()
		b.Fatal(err)
	}
	return m, f
}

// llamacppBench caches llama.cpp's result per benchmark, which Go runs
// more than once (b.N = 1 first).
var llamacppBench = map[string]llamacpp.Result{}

// benchGGUF runs b.N decode steps (prompt nil) or b.N passes over prompt
// on the file at path with the given threads, and llama.cpp's the same.
func benchGGUF(b *testing.B, path string, threads int, prompt []int) {
	m, f := openGGUF(b, path)
	defer m.Close()
	pool := kernels.NewPool(threads)
	defer pool.Close()
	ws := m.NewWorkspace(kernels.NewCPU(pool), transformer.WorkspaceOptions{MaxRows: max(len(prompt), 1), MaxLogits: 1})
	s := m.NewSession()
	logits := make([]float32, m.Config().Vocab)
	steps := make([]transformer.Step, len(prompt))
	for i, tok := range prompt {
		steps[i] = transformer.Step{Session: s, Pos: i, Token: tok}
	}
	if len(prompt) > 0 {
		steps[len(steps)-1].Logits = logits
	}
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := range b.N {
		if len(prompt) == 0 {
			steps = append(steps[:0], transformer.Step{Session: s, Pos: i % 1024, Token: 7 + i%200, Logits: logits})
		}
		if err := ws.Forward(steps); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	tokens := float64(b.N * max(len(prompt), 1))
	b.ReportMetric(tokens/b.Elapsed().Seconds(), "tok/s")
	b.ReportMetric((cpuTime()-cpu0).Seconds()*1e3/tokens, "cpu-ms/tok")
	if len(prompt) == 0 {
		var bytes int64
		_, _, untied := f.Tensor("output.weight")
		for _, t := range f.Tensors {
			if !(untied && t.Name == "token_embd.weight") {
				bytes += int64(t.Bytes())
			}
		}
		b.ReportMetric(float64(bytes)/1e6, "weights-MB/tok")
		b.ReportMetric(float64(rss())/1e6, "RSS-MB")
	}
	if os.Getenv("STREAMGATE_REQUIRE") == "" && !llamacpp.Available() {
		return
	}
	res, ok := llamacppBench[b.Name()]
	if !ok {
		job := llamacpp.Job{Model: path, Vocab: m.Config().Vocab, Tokens: []int{7, 8, 9}, Bench: 32, Context: 1024}
		if len(prompt) > 0 {
			job.Tokens, job.Bench = prompt, 1
		}
		res = llamacpp.RunThreads(b, threads, job)[0]
		llamacppBench[b.Name()] = res
	}
	if len(prompt) > 0 {
		b.ReportMetric(float64(len(prompt))/res.PromptSeconds, "llamacpp-tok/s")
		b.ReportMetric(res.PromptCPUSeconds*1e3/float64(len(prompt)), "llamacpp-cpu-ms/tok")
		return
	}
	b.ReportMetric(32/res.DecodeSeconds, "llamacpp-tok/s")
	b.ReportMetric(res.DecodeCPUSeconds*1e3/32, "llamacpp-cpu-ms/tok")
	b.ReportMetric(float64(res.RSS)/1e6, "llamacpp-RSS-MB")
}

// cpuTime returns this process's CPU time, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rss returns this process's resident set size in bytes (0 where
// /proc/self/status cannot be read).
func rss() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if kb, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 10, 64)
			return n << 10
		}
	}
	return 0
}
