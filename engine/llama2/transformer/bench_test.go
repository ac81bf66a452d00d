package transformer_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/streamgate/streamgate/engine/llama2/internal/testmodel"
	"github.com/streamgate/streamgate/engine/llama2/kernels"
	"github.com/streamgate/streamgate/engine/llama2/transformer"
)

// BenchmarkForward measures bare forward passes (no scheduler, sampler or
// text) over 256 positions on random weights of the stories260K and
// stories15M shapes, for 1 and 8 sessions per pass, on one worker, on two
// splitting each matrix product ("rows"), and on two splitting the sessions
// ("sessions"):
//
//	go test -run '^$' -bench Forward ./engine/llama2/transformer/
func BenchmarkForward(b *testing.B) {
	shapes := []struct {
		name string
		s    testmodel.Shape
	}{
		{"260K", testmodel.Shape{Dim: 64, Hidden: 172, Layers: 5, Heads: 8, KVHeads: 4, Vocab: 512, SeqLen: 512, Shared: true}},
		{"15M", testmodel.Stories15M},
	}
	for _, sh := range shapes {
		path := filepath.Join(b.TempDir(), "m.bin")
		if err := testmodel.Random(path, sh.s, 1); err != nil {
			b.Fatal(err)
		}
		m, err := transformer.Load(path)
		if err != nil {
			b.Fatal(err)
		}
		for _, mode := range []string{"1worker", "rows", "sessions"} {
			for _, batch := range []int{1, 8} {
				b.Run(fmt.Sprintf("%s/%s/batch=%d", sh.name, mode, batch), func(b *testing.B) {
					workers := 2
					if mode == "1worker" {
						workers = 1
					}
					pool := kernels.NewPool(workers)
					defer pool.Close()
					opts := transformer.WorkspaceOptions{MaxRows: batch}
					if mode == "sessions" {
						opts.Groups, opts.Pool = []kernels.Kernels{kernels.NewCPU(kernels.NewPool(1)), kernels.NewCPU(kernels.NewPool(1))}, pool
					}
					ws := m.NewWorkspace(kernels.NewCPU(pool), opts)
					steps := make([]transformer.Step, batch)
					for i := range steps {
						steps[i] = transformer.Step{Session: m.NewSession(), Token: 1 + i, Logits: make([]float32, sh.s.Vocab)}
					}
					tokens := 0
					for b.Loop() {
						for pos := range 256 {
							for i := range steps {
								steps[i].Pos = pos
							}
							if err := ws.Forward(steps); err != nil {
								b.Fatal(err)
							}
							tokens += batch
						}
					}
					b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tok/s")
				})
			}
		}
		m.Close()
	}
}
