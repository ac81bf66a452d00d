package transformer_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/streamgate/streamgate/engine/gguf"
	"github.com/streamgate/streamgate/engine/gguf/ggufmodel"
	"github.com/streamgate/streamgate/engine/llama2/kernels"
	"github.com/streamgate/streamgate/engine/llama2/transformer"
)

// TestBatchedDecodeMatchesSequential decodes eight sessions together, one
// row each per pass (the weights read once for all of them), and checks
// that every session gets exactly the logits and greedy tokens it gets
// decoded alone, one pass per token: batching changes no sum. Sessions
// start from prompts of different lengths, so their positions differ
// within a pass. Every weight type with its own batched kernel path is
// covered (Q4_1, Q5_K and BF16 share F16's row-by-row path), on one and two threads.
func TestBatchedDecodeMatchesSequential(t *testing.T) {
	const sessions, steps = 8, 6
	for _, typ := range []gguf.Type{gguf.Q8_0, gguf.Q5_0, gguf.Q4_K, gguf.Q6_K, gguf.F16, gguf.F32} {
		t.Run(typ.String(), func(t *testing.T) {
			m, err := fromSpec(t, ggufmodel.Small("qwen2", typ, 3), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			vocab := m.Config().Vocab
			prompts := make([][]int, sessions)
			for i := range prompts {
				for p := range 1 + 2*i {
					prompts[i] = append(prompts[i], (5+31*i+7*p)%vocab)
				}
			}
			for _, threads := range []int{1, 2} {
				pool := kernels.NewPool(threads)
				k := kernels.NewCPU(pool)
				alone := make([][][]float32, sessions)
				for i, p := range prompts {
					alone[i] = decode(t, m, m.NewWorkspace(k, transformer.WorkspaceOptions{MaxRows: len(p)}), [][]int{p}, steps)[0]
				}
				together := decode(t, m, m.NewWorkspace(k, transformer.WorkspaceOptions{MaxRows: 2 * sessions * sessions}), prompts, steps)
				pool.Close()
				for i := range sessions {
					for s := range steps {
						if !slices.Equal(together[i][s], alone[i][s]) {
							t.Fatalf("threads=%d session %d step %d: batched logits differ from the session decoded alone (first difference: %s)",
								threads, i, s, firstDiff(together[i][s], alone[i][s]))
						}
					}
				}
			}
		})
	}
}

// decode feeds every prompt (each in one pass, all sessions in the same
// pass), then steps-1 greedy tokens per session, one pass per token with
// one row per session, and returns each session's logits at every step.
func decode(t *testing.T, m *transformer.Model, ws *transformer.Workspace, prompts [][]int, steps int) [][][]float32 {
	t.Helper()
	vocab := m.Config().Vocab
	out := make([][][]float32, len(prompts))
	sess := make([]*transformer.Session, len(prompts))
	next := make([]int, len(prompts))
	var batch []transformer.Step
	for i, p := range prompts {
		sess[i] = m.NewSession()
		out[i] = [][]float32{make([]float32, vocab)}
		for pos, tok := range p {
			st := transformer.Step{Session: sess[i], Pos: pos, Token: tok}
			if pos == len(p)-1 {
				st.Logits = out[i][0]
			}
			batch = append(batch, st)
		}
	}
	for s := range steps {
		if err := ws.Forward(batch); err != nil {
			t.Fatal(err)
		}
		if s == steps-1 {
			break
		}
		batch = batch[:0]
		for i, p := range prompts {
			next[i] = slices.Index(out[i][s], slices.Max(out[i][s])) // greedy
			l := make([]float32, vocab)
			out[i] = append(out[i], l)
			batch = append(batch, transformer.Step{Session: sess[i], Pos: len(p) + s, Token: next[i], Logits: l})
		}
	}
	return out
}

func firstDiff(a, b []float32) string {
	for i := range a {
		if a[i] != b[i] {
			return fmt.Sprintf("logit %d: %g vs %g", i, a[i], b[i])
		}
	}
	return "none"
}

// TestDecodeAllocatesNothing: once a workspace has run a pass, passes of
// the same shape (eight sessions decoding, one row each) allocate nothing,
// on one thread and on a pool with a helper.
func TestDecodeAllocatesNothing(t *testing.T) {
	for _, typ := range []gguf.Type{gguf.Q8_0, gguf.Q4_K, gguf.Q6_K, gguf.F32} {
		m, err := fromSpec(t, ggufmodel.Small("qwen2", typ, 3), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, workers := range []int{1, 2} {
			pool := kernels.NewPool(workers)
			ws := m.NewWorkspace(kernels.NewCPU(pool), transformer.WorkspaceOptions{MaxRows: 8})
			steps := make([]transformer.Step, 8)
			for i := range steps {
				steps[i] = transformer.Step{Session: m.NewSession(), Token: 5 + i, Logits: make([]float32, m.Config().Vocab)}
			}
			pos := 0
			allocs := testing.AllocsPerRun(5, func() {
				for i := range steps {
					steps[i].Pos = pos
				}
				pos++
				if err := ws.Forward(steps); err != nil {
					t.Fatal(err)
				}
			})
			pool.Close()
			if allocs != 0 {
				t.Errorf("%v, %d workers: a decode pass of 8 sessions allocates %v times", typ, workers, allocs)
			}
		}
		m.Close()
	}
}
