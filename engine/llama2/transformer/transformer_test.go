package transformer_test

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/streamgate/streamgate/engine/llama2/internal/testmodel"
	"github.com/streamgate/streamgate/engine/llama2/kernels"
	"github.com/streamgate/streamgate/engine/llama2/transformer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// reference is a direct float64 transcription of run.c's forward pass over
// testmodel weights, one token at a time.
type reference struct {
	s    testmodel.Shape
	w    *testmodel.Weights
	k, v [][]float64 // [layer][pos*kvDim+i]
}

func newReference(s testmodel.Shape, w *testmodel.Weights) *reference {
	kv := s.KVHeads * (s.Dim / s.Heads)
	r := &reference{s: s, w: w}
	for range s.Layers {
		r.k = append(r.k, make([]float64, s.SeqLen*kv))
		r.v = append(r.v, make([]float64, s.SeqLen*kv))
	}
	return r
}

func matvec(w []float32, x []float64, d int) []float64 {
	n := len(x)
	out := make([]float64, d)
	for i := range d {
		for j := range n {
			out[i] += float64(w[i*n+j]) * x[j]
		}
	}
	return out
}

func rmsnorm(x []float64, w []float32) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+1e-5)
	out := make([]float64, len(x))
	for i := range x {
		out[i] = float64(w[i]) * inv * x[i]
	}
	return out
}

func (r *reference) forward(tok, pos int) []float32 {
	s, w := r.s, r.w
	dim, hs := s.Dim, s.Dim/s.Heads
	kvDim := s.KVHeads * hs
	x := make([]float64, dim)
	for i := range x {
		x[i] = float64(w.Emb[tok*dim+i])
	}
	for l := range s.Layers {
		xb := rmsnorm(x, w.RMSAtt[l*dim:])
		q := matvec(w.WQ[l*dim*dim:], xb, dim)
		k := matvec(w.WK[l*kvDim*dim:], xb, kvDim)
		v := matvec(w.WV[l*kvDim*dim:], xb, kvDim)
		for i := 0; i < dim; i += 2 {
			f := 1 / math.Pow(10000, float64(i%hs)/float64(hs))
			c, sn := math.Cos(float64(pos)*f), math.Sin(float64(pos)*f)
			q[i], q[i+1] = q[i]*c-q[i+1]*sn, q[i]*sn+q[i+1]*c
			if i < kvDim {
				k[i], k[i+1] = k[i]*c-k[i+1]*sn, k[i]*sn+k[i+1]*c
			}
		}
		copy(r.k[l][pos*kvDim:], k)
		copy(r.v[l][pos*kvDim:], v)
		att := make([]float64, dim)
		for h := range s.Heads {
			kvh := h / (s.Heads / s.KVHeads)
			sc := make([]float64, pos+1)
			m := math.Inf(-1)
			for t := range sc {
				for i := range hs {
					sc[t] += q[h*hs+i] * r.k[l][t*kvDim+kvh*hs+i]
				}
				sc[t] /= math.Sqrt(float64(hs))
				m = math.Max(m, sc[t])
			}
			var sum float64
			for t := range sc {
				sc[t] = math.Exp(sc[t] - m)
				sum += sc[t]
			}
			for t := range sc {
				for i := range hs {
					att[h*hs+i] += sc[t] / sum * r.v[l][t*kvDim+kvh*hs+i]
				}
			}
		}
		o := matvec(w.WO[l*dim*dim:], att, dim)
		for i := range x {
			x[i] += o[i]
		}
		xb = rmsnorm(x, w.RMSFFN[l*dim:])
		h1 := matvec(w.W1[l*s.Hidden*dim:], xb, s.Hidden)
		h3 := matvec(w.W3[l*s.Hidden*dim:], xb, s.Hidden)
		for i := range h1 {
			h1[i] = h1[i] / (1 + math.Exp(-h1[i])) * h3[i]
		}
		o = matvec(w.W2[l*dim*s.Hidden:], h1, dim)
		for i := range x {
			x[i] += o[i]
		}
	}
	cls := w.Cls
	if s.Shared {
		cls = w.Emb
	}
	logits := matvec(cls, rmsnorm(x, w.RMSFinal), s.Vocab)
	out := make([]float32, len(logits))
	for i, v := range logits {
		out[i] = float32(v)
	}
	return out
}

func closeTo(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > 1e-4*math.Max(1, math.Abs(float64(want[i]))) {
			t.Fatalf("%s: logit %d = %v, want %v", what, i, got[i], want[i])
		}
	}
}

// TestForwardMatchesReference runs three sessions through batched passes
// (one reading its prompt four positions at a time while the others
// generate) and compares every logit with the reference.
func TestForwardMatchesReference(t *testing.T) {
	shapes := map[string]testmodel.Shape{
		"gqa-shared":   {Dim: 48, Hidden: 80, Layers: 2, Heads: 6, KVHeads: 2, Vocab: 70, SeqLen: 32, Shared: true},
		"gqa-separate": {Dim: 64, Hidden: 172, Layers: 3, Heads: 8, KVHeads: 4, Vocab: 90, SeqLen: 40},
		"mha-hs8":      {Dim: 32, Hidden: 50, Layers: 2, Heads: 4, KVHeads: 4, Vocab: 40, SeqLen: 20, Shared: true},
	}
	for name, s := range shapes {
		for _, version := range []int{0, 1} {
			t.Run(name+"/v"+string(rune('0'+version)), func(t *testing.T) {
				w := testmodel.RandomWeights(s, 7)
				path := filepath.Join(t.TempDir(), "m.bin")
				if err := testmodel.Write(path, s, w, version); err != nil {
					t.Fatal(err)
				}
				m, err := transformer.Load(path)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				if c := m.Config(); c.Dim != s.Dim || c.Vocab != s.Vocab || c.SharedClassifier != s.Shared || c.KVHeads != s.KVHeads {
					t.Fatalf("config %v does not match %+v", c, s)
				}
				pool := kernels.NewPool(2)
				defer pool.Close()
				k := kernels.NewCPU(pool)
				checkBatched(t, m, m.NewWorkspace(k, transformer.WorkspaceOptions{MaxRows: 8, MaxLogits: 3}), s, w)
				// Sequence parallelism: sessions split into groups.
				groups := []kernels.Kernels{kernels.NewCPU(kernels.NewPool(1)), kernels.NewCPU(kernels.NewPool(1))}
				checkBatched(t, m, m.NewWorkspace(k, transformer.WorkspaceOptions{MaxRows: 8, MaxLogits: 3, Groups: groups, Pool: pool}), s, w)
			})
		}
	}
}

func checkBatched(t *testing.T, m *transformer.Model, ws *transformer.Workspace, s testmodel.Shape, w *testmodel.Weights) {
	const n = 3
	refs := make([]*reference, n)
	sess := make([]*transformer.Session, n)
	logits := make([][]float32, n)
	for i := range n {
		refs[i] = newReference(s, w)
		sess[i] = m.NewSession()
		logits[i] = make([]float32, s.Vocab)
	}
	tok := func(i, pos int) int { return (7*i + 13*pos + 1) % s.Vocab }
	pos := make([]int, n)
	for step := 0; pos[0] < s.SeqLen; step++ {
		var steps []transformer.Step
		var who []int
		for i := range n {
			if i == 0 {
				// Session 0 reads four positions per pass; the last one wants logits.
				for j := 0; j < 4 && pos[0]+j < s.SeqLen; j++ {
					st := transformer.Step{Session: sess[0], Pos: pos[0] + j, Token: tok(0, pos[0]+j)}
					if j == 3 || pos[0]+j == s.SeqLen-1 {
						st.Logits = logits[0]
					}
					steps = append(steps, st)
					who = append(who, 0)
				}
				continue
			}
			if pos[i] < s.SeqLen {
				steps = append(steps, transformer.Step{Session: sess[i], Pos: pos[i], Token: tok(i, pos[i]), Logits: logits[i]})
				who = append(who, i)
			}
		}
		if err := ws.Forward(steps); err != nil {
			t.Fatal(err)
		}
		for k, st := range steps {
			i := who[k]
			want := refs[i].forward(st.Token, st.Pos)
			if st.Logits != nil {
				closeTo(t, "session "+string(rune('0'+i)), st.Logits, want)
			}
			pos[i]++
		}
	}
}

func TestForwardRejectsBadSteps(t *testing.T) {
	s := testmodel.Shape{Dim: 16, Hidden: 8, Layers: 1, Heads: 2, KVHeads: 1, Vocab: 10, SeqLen: 4, Shared: true}
	path := filepath.Join(t.TempDir(), "m.bin")
	if err := testmodel.Random(path, s, 1); err != nil {
		t.Fatal(err)
	}
	m, err := transformer.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	pool := kernels.NewPool(1)
	defer pool.Close()
	ws := m.NewWorkspace(kernels.NewCPU(pool), transformer.WorkspaceOptions{MaxRows: 2, MaxLogits: 1})
	sess := m.NewSession()
	lg := make([]float32, 10)
	for name, steps := range map[string][]transformer.Step{
		"outside the context":    {{Session: sess, Pos: 4, Token: 1}},
		"outside the vocabulary": {{Session: sess, Pos: 0, Token: 10}},
		"no session":             {{Pos: 0, Token: 1}},
		"exceed the workspace":   {{Session: sess}, {Session: sess}, {Session: sess}},
		"want logits":            {{Session: sess, Logits: lg}, {Session: sess, Pos: 1, Logits: lg}},
		"logits hold":            {{Session: sess, Logits: lg[:3]}},
	} {
		if err := ws.Forward(steps); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func TestLoadMapsLargeFiles(t *testing.T) {
	// 64 × 16384 embedding floats make the file larger than the 4 MiB
	// threshold from which Load maps it.
	s := testmodel.Shape{Dim: 64, Hidden: 32, Layers: 1, Heads: 4, KVHeads: 2, Vocab: 16384, SeqLen: 8, Shared: true}
	w := testmodel.RandomWeights(s, 3)
	path := filepath.Join(t.TempDir(), "big.bin")
	if err := testmodel.Write(path, s, w, 0); err != nil {
		t.Fatal(err)
	}
	m, err := transformer.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	pool := kernels.NewPool(2)
	defer pool.Close()
	ws := m.NewWorkspace(kernels.NewCPU(pool), transformer.WorkspaceOptions{MaxRows: 1})
	got := make([]float32, s.Vocab)
	if err := ws.Forward([]transformer.Step{{Session: m.NewSession(), Token: 5, Logits: got}}); err != nil {
		t.Fatal(err)
	}
	closeTo(t, "mapped", got, newReference(s, w).forward(5, 0))
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestFileSizeFormula(t *testing.T) {
	for _, tc := range []struct {
		c    transformer.Config
		want int64
	}{
		{transformer.Config{Dim: 64, HiddenDim: 172, Layers: 5, Heads: 8, KVHeads: 4, Vocab: 512, SeqLen: 512, SharedClassifier: true}, 1056540},
		{transformer.Config{Dim: 288, HiddenDim: 768, Layers: 6, Heads: 6, KVHeads: 6, Vocab: 32000, SeqLen: 256, SharedClassifier: true}, 60816028},
	} {
		if got := tc.c.FileSize(); got != tc.want {
			t.Errorf("%v: FileSize = %d, want %d", tc.c, got, tc.want)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	s := testmodel.Shape{Dim: 16, Hidden: 8, Layers: 1, Heads: 2, KVHeads: 1, Vocab: 10, SeqLen: 4}
	good := filepath.Join(dir, "good.bin")
	if err := testmodel.Random(good, s, 1); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	le := func(vs ...uint32) []byte {
		var b []byte
		for _, v := range vs {
			b = append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
		}
		return b
	}
	tok := append(le(7), []byte("\x00\x00\x00\x00\x05\x00\x00\x00<unk>")...)
	cases := []struct {
		name, path string
		is         error
		msg        string
	}{
		{"truncated", write("trunc.bin", data[:len(data)-4]), transformer.ErrFormat, "truncated"},
		{"trailing", write("trail.bin", append(data[:len(data):len(data)], 0, 0)), transformer.ErrFormat, "2 unexpected trailing bytes"},
		{"empty", write("empty.bin", nil), transformer.ErrFormat, "too short for the 28-byte header"},
		{"tokenizer", write("tok.bin", append(tok, make([]byte, 40)...)), transformer.ErrFormat, "out of range"},
		{"png", write("x.png", append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 100)...)), transformer.ErrFormat, "out of range"},
		{"odd heads", write("heads.bin", le(16, 8, 1, 3, 1, 10, 4)), transformer.ErrFormat, "not a multiple of n_heads"},
		{"gqa", write("gqa.bin", le(16, 8, 1, 4, 3, 10, 4)), transformer.ErrFormat, "not a multiple of n_kv_heads"},
		{"v2", write("v2.bin", append(le(0x616b3432, 2), make([]byte, 248)...)), transformer.ErrUnsupported, "export version 2"},
		{"v1 short", write("v1.bin", le(0x616b3432, 1, 16)), transformer.ErrFormat, "too short for the 256-byte version 1 header"},
	}
	for _, tc := range cases {
		_, err := transformer.Load(tc.path)
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("%s: err = %v, want %v containing %q and the path", tc.name, err, tc.is, tc.msg)
		}
	}
	if _, err := transformer.Load(filepath.Join(dir, "missing.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v", err)
	}
	if _, err := transformer.Load(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: err = %v", err)
	}
}
