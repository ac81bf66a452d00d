package llama2

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/streamgate/streamgate/engine/backend"
	"github.com/streamgate/streamgate/engine/llama2/internal/testmodel"
)

// Benchmarks of whole requests through Execute (streaming, greedy, 256
// tokens from an empty prompt, ignore_eos so every request has the same
// length), reporting generated tokens per second:
//
//	go test -run '^$' -bench . -benchtime 3x ./engine/llama2/
//
// stories260K is the real model (skipped when absent); 15M-shape is a
// random-weight checkpoint of stories15M's shape (dim 288, hidden 768, 6
// layers, 6 heads, vocab 32000, context 256) written to a temporary
// directory on first use, with a synthetic 32000-piece tokenizer.

var benchDir struct {
	once sync.Once
	dir  string
	err  error
}

// cleanupBenchDir removes the 15M-shape files; TestMain calls it.
func cleanupBenchDir() {
	if benchDir.dir != "" {
		os.RemoveAll(benchDir.dir)
	}
}

func bench15M(b *testing.B) *Backend {
	benchDir.once.Do(func() {
		dir, err := os.MkdirTemp("", "llama2-bench-")
		if err != nil {
			benchDir.err = err
			return
		}
		benchDir.dir = dir
		benchDir.err = testmodel.Random(filepath.Join(dir, "m.bin"), testmodel.Stories15M, 15)
		if benchDir.err == nil {
			benchDir.err = testmodel.WriteTokenizer(filepath.Join(dir, "t.bin"), testmodel.Pieces(32000), nil)
		}
	})
	if benchDir.err != nil {
		b.Fatal(benchDir.err)
	}
	return openBackend(b, benchDir.dir, "m.bin", "t.bin", nil)
}

var benchModels = []struct {
	name string
	open func(b *testing.B) *Backend
}{
	{"stories260K", func(b *testing.B) *Backend { return realBackend(b, nil) }},
	{"15M-shape", bench15M},
}

const benchTokens = 256

// generate runs one benchmark request and returns its output tokens.
func generate(b *testing.B, be *Backend, seed int) int {
	c := call{stream: true, params: fmt.Sprintf(`{"temperature":0,"max_tokens":%d,"ignore_eos":true,"seed":%d}`, benchTokens, seed)}
	resp, err := be.Execute(context.Background(), c.request(), discard{})
	if err != nil {
		b.Fatal(err)
	}
	return int(decodeFinal(b, resp).outTokens)
}

// discard is a Responder that drops what it is sent.
type discard struct{}

func (discard) Send(context.Context, *backend.Response) error { return nil }
func (discard) Release()                                      {}

func BenchmarkSingleStream(b *testing.B) {
	for _, m := range benchModels {
		b.Run(m.name, func(b *testing.B) {
			be := m.open(b)
			generate(b, be, 0) // warm up: KV cache, workspace, page faults
			tokens := 0
			for b.Loop() {
				tokens += generate(b, be, tokens)
			}
			b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}

func BenchmarkConcurrent(b *testing.B) {
	for _, m := range benchModels {
		b.Run(m.name, func(b *testing.B) {
			be := m.open(b)
			generate(b, be, 0)
			for _, n := range []int{1, 4, 8, 16} {
				b.Run(fmt.Sprint(n), func(b *testing.B) {
					var tokens atomic.Int64
					for b.Loop() {
						var wg sync.WaitGroup
						for i := range n {
							wg.Go(func() { tokens.Add(int64(generate(b, be, i))) })
						}
						wg.Wait()
					}
					b.ReportMetric(float64(tokens.Load())/b.Elapsed().Seconds(), "tok/s")
				})
			}
		})
	}
}
