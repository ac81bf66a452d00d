package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The reference kernels: the plainest possible code, in float64.

func refMatMul(m MatMul) []float32 {
	out := make([]float32, m.Rows*m.D)
	for r := range m.Rows {
		for i := range m.D {
			var s float64
			for j := range m.N {
				s += float64(m.W[i*m.N+j]) * float64(m.X[r*m.N+j])
			}
			out[r*m.D+i] = float32(s)
		}
	}
	return out
}

func refSoftmax(x []float64) {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, v)
	}
	var sum float64
	for i, v := range x {
		x[i] = math.Exp(v - m)
		sum += x[i]
	}
	for i := range x {
		x[i] /= sum
	}
}

func refAttention(s Heads, t Attention) []float32 {
	hs, kvDim := s.HeadSize, s.KVHeads*s.HeadSize
	out := make([]float32, s.Heads*hs)
	for h := range s.Heads {
		kvh := h / (s.Heads / s.KVHeads)
		att := make([]float64, t.Len)
		for p := range t.Len {
			var d float64
			for i := range hs {
				d += float64(t.Q[h*hs+i]) * float64(t.Keys[p*kvDim+kvh*hs+i])
			}
			att[p] = d / math.Sqrt(float64(hs))
		}
		refSoftmax(att)
		for i := range hs {
			var v float64
			for p := range t.Len {
				v += att[p] * float64(t.Values[p*kvDim+kvh*hs+i])
			}
			out[h*hs+i] = float32(v)
		}
	}
	return out
}

func randVec(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = 2*r.Float32() - 1
	}
	return v
}

func near(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: len %d, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i] - want[i])); d > tol*math.Max(1, math.Abs(float64(want[i]))) || math.IsNaN(float64(got[i])) {
			t.Fatalf("%s[%d] = %v, want %v (diff %g)", what, i, got[i], want[i], d)
		}
	}
}

// kernelSets returns the CPU kernels to test: scalar and, where built,
// SIMD, each on one and on three workers.
func kernelSets(t *testing.T) map[string]*CPU {
	sets := map[string]*CPU{}
	for _, w := range []int{1, 3} {
		p := NewPool(w)
		t.Cleanup(p.Close)
		name := map[int]string{1: "1worker", 3: "3workers"}[w]
		sets["scalar/"+name] = NewScalarCPU(p)
		if c := NewCPU(p); c.SIMD() {
			sets["simd/"+name] = c
		}
	}
	return sets
}

func TestMatMulMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	shapes := []struct{ rows, n, d int }{
		{1, 64, 64}, {1, 7, 5}, {3, 13, 17}, {4, 64, 172}, {5, 172, 64}, {8, 288, 768}, {9, 33, 31}, {16, 64, 512}, {2, 1, 1},
	}
	for name, k := range kernelSets(t) {
		for _, s := range shapes {
			a := MatMul{X: randVec(r, s.rows*s.n), W: randVec(r, s.d*s.n), Out: make([]float32, s.rows*s.d), Rows: s.rows, N: s.n, D: s.d}
			b := MatMul{X: a.X, W: randVec(r, 3*s.n), Out: make([]float32, s.rows*3), Rows: s.rows, N: s.n, D: 3}
			k.MatMul(a, b)
			near(t, name+" matmul a", a.Out, refMatMul(a), 1e-4)
			near(t, name+" matmul b", b.Out, refMatMul(b), 1e-4)
		}
	}
}

func TestAttentionMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	geoms := []Heads{{8, 4, 8}, {6, 6, 48}, {4, 1, 16}, {2, 2, 6}, {6, 2, 8}, {8, 2, 16}, {4, 2, 6}}
	for name, k := range kernelSets(t) {
		for _, g := range geoms {
			kvDim := g.KVHeads * g.HeadSize
			var tasks []Attention
			for _, n := range []int{1, 2, 7, 8, 9, 16, 100, 300} {
				tasks = append(tasks, Attention{
					Out: make([]float32, g.Heads*g.HeadSize), Q: randVec(r, g.Heads*g.HeadSize),
					Keys: randVec(r, n*kvDim), Values: randVec(r, n*kvDim), Len: n,
				})
			}
			k.Attention(g, tasks...)
			for _, task := range tasks {
				near(t, name+" attention", task.Out, refAttention(g, task), 1e-4)
			}
		}
	}
}

func TestElementwiseMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	k := NewScalarCPU(NewPool(1))

	x, w := randVec(r, 67), randVec(r, 67)
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := 1 / math.Sqrt(ss/67+1e-5)
	want := make([]float32, 67)
	for i := range x {
		want[i] = float32(float64(w[i]) * inv * float64(x[i]))
	}
	got := make([]float32, 67)
	k.RMSNorm(got, x, w, 1e-5)
	near(t, "rmsnorm", got, want, 1e-5)

	sm := randVec(r, 300)
	for i := range sm {
		sm[i] *= 20
	}
	ref := make([]float64, len(sm))
	for i, v := range sm {
		ref[i] = float64(v)
	}
	refSoftmax(ref)
	k.Softmax(sm)
	for i := range sm {
		if d := math.Abs(float64(sm[i]) - ref[i]); d > 1e-6 {
			t.Fatalf("softmax[%d] = %v, want %v", i, sm[i], ref[i])
		}
	}

	h, g := randVec(r, 50), randVec(r, 50)
	wantH := make([]float32, 50)
	for i := range h {
		v := float64(h[i]) * 4
		h[i] = float32(v)
		wantH[i] = float32(v / (1 + math.Exp(-v)) * float64(g[i]))
	}
	k.SwiGLU(h, g)
	near(t, "swiglu", h, wantH, 1e-5)

	// RoPE over two heads of size 4: pairs (0,1), (2,3) per head.
	v := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	cos, sin := []float32{0.6, 1}, []float32{0.8, 0}
	k.RoPE(v, cos, sin, false)
	near(t, "rope", v, []float32{1*0.6 - 2*0.8, 1*0.8 + 2*0.6, 3, 4, 5*0.6 - 6*0.8, 5*0.8 + 6*0.6, 7, 8}, 1e-6)
}

func TestExpf(t *testing.T) {
	for x := float32(-100); x < 100; x += 0.01 {
		got, want := float64(expf(x)), math.Exp(float64(x))
		if want > math.MaxFloat32 {
			if got < 1e38 {
				t.Fatalf("expf(%v) = %v, want a huge value", x, got)
			}
			continue
		}
		if x <= expCutoff {
			if got != 0 {
				t.Fatalf("expf(%v) = %v, want ~0", x, got)
			}
			continue
		}
		if rel := math.Abs(got-want) / want; rel > 5e-7 {
			t.Fatalf("expf(%v) = %v, want %v (rel %g)", x, got, want, rel)
		}
	}
	if expf(float32(math.NaN())) != 0 || expf(float32(math.Inf(-1))) != 0 {
		t.Fatal("expf(NaN or -Inf) != 0")
	}
}

func TestPoolRunsEveryChunkOnce(t *testing.T) {
	p := NewPool(3)
	defer p.Close()
	for round := range 200 {
		n := 1 + round%9
		hits := make([]int32, n)
		busy := make([]bool, p.Workers())
		p.Run(n, func(chunk, worker int) {
			if busy[worker] {
				t.Errorf("worker %d used twice at once", worker)
			}
			busy[worker] = true
			hits[chunk]++
			busy[worker] = false
		})
		for c, h := range hits {
			if h != 1 {
				t.Fatalf("round %d: chunk %d ran %d times", round, c, h)
			}
		}
	}
	p.Close()
	ran := 0
	p.Run(3, func(int, int) { ran++ })
	if ran != 3 {
		t.Fatalf("Run after Close ran %d chunks, want 3", ran)
	}
}

// TestBatchingDoesNotChangeResults checks that a row's product is bit for
// bit the same alone or in any batch, so a seeded request's text does not
// depend on what else is running.
func TestBatchingDoesNotChangeResults(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for name, k := range kernelSets(t) {
		for _, n := range []int{64, 67, 288} {
			const rows, d = 7, 40
			m := MatMul{X: randVec(r, rows*n), W: randVec(r, d*n), Out: make([]float32, rows*d), Rows: rows, N: n, D: d}
			k.MatMul(m)
			for row := range rows {
				one := MatMul{X: m.X[row*n : (row+1)*n], W: m.W, Out: make([]float32, d), Rows: 1, N: n, D: d}
				k.MatMul(one)
				for i := range d {
					if one.Out[i] != m.Out[row*d+i] {
						t.Fatalf("%s n=%d: row %d output %d alone %v, batched %v", name, n, row, i, one.Out[i], m.Out[row*d+i])
					}
				}
			}
		}
	}
}

// TestAsmMatMulTails runs the assembly matrix kernel, where built, over
// every column count up to 40 (all n&7 tails, and n < 8 with no full
// vector), output row counts that use every tile kind, and batch sizes
// 1..5, against the float64 reference; output rows outside [lo, hi) must
// stay untouched.
func TestAsmMatMulTails(t *testing.T) {
	f := asmMatmul()
	if f == nil {
		t.Skip("no assembly kernels in this build or on this CPU")
	}
	r := rand.New(rand.NewPCG(7, 7))
	for n := 0; n <= 40; n++ {
		for _, d := range []int{1, 3, 4, 7, 8, 12, 13, 21} {
			for rows := 1; rows <= 5; rows++ {
				m := MatMul{X: randVec(r, rows*n), W: randVec(r, d*n), Out: make([]float32, rows*d), Rows: rows, N: n, D: d}
				for i := range m.Out {
					m.Out[i] = 42
				}
				lo, hi := d/5, d-d/7
				f(&m, lo, hi)
				want := refMatMul(m)
				for b := range rows {
					for i := range d {
						got := m.Out[b*d+i]
						if i < lo || i >= hi {
							if got != 42 {
								t.Fatalf("n=%d d=%d rows=%d: row %d output %d outside [%d,%d) written", n, d, rows, b, i, lo, hi)
							}
							continue
						}
						w := want[b*d+i]
						if diff := math.Abs(float64(got - w)); diff > 1e-4*math.Max(1, math.Abs(float64(w))) || math.IsNaN(float64(got)) {
							t.Fatalf("n=%d d=%d rows=%d: out[%d][%d] = %v, want %v", n, d, rows, b, i, got, w)
						}
					}
				}
			}
		}
	}
}

// FuzzAsmDot checks the assembly dot-product tiles against each other and
// the reference on arbitrary lengths and values: all tiles must agree bit
// for bit (batching invariance) and stay within 1e-4 of float64.
func FuzzAsmDot(f *testing.F) {
	if asmMatmul() == nil {
		f.Skip("no assembly kernels in this build or on this CPU")
	}
	f.Add(uint8(17), uint64(1))
	f.Add(uint8(64), uint64(2))
	f.Add(uint8(3), uint64(3))
	f.Fuzz(func(t *testing.T, n8 uint8, seed uint64) {
		n := int(n8)
		r := rand.New(rand.NewPCG(seed, seed))
		const d, rows = 8, 3
		m := MatMul{X: randVec(r, rows*n), W: randVec(r, d*n), Out: make([]float32, rows*d), Rows: rows, N: n, D: d}
		matmulAsmForTest(&m)
		want := refMatMul(m)
		for b := range rows {
			for i := range d {
				got := m.Out[b*d+i]
				var one float32
				if n > 0 {
					one = dot1x1Go(m.W[i*n:(i+1)*n], m.X[b*n:(b+1)*n])
				}
				if got != one {
					t.Fatalf("n=%d: tile result %v, single dot %v", n, got, one)
				}
				if diff := math.Abs(float64(got - want[b*d+i])); diff > 1e-4*math.Max(1, math.Abs(float64(want[b*d+i]))) {
					t.Fatalf("n=%d: out[%d][%d] = %v, want %v", n, b, i, got, want[b*d+i])
				}
			}
		}
	})
}

// TestGroupedAttentionMatchesPerHead checks that reading each KV row once
// for a group of query heads changes no bit of any head's output: the
// grouped kernels against their one-head kernels run head by head, over
// group sizes 1 to 4 (odd ones leave a head outside the assembly's pairs),
// head sizes with and without vector code, and lengths around the 8-wide
// blocks.
func TestGroupedAttentionMatchesPerHead(t *testing.T) {
	type kernel struct {
		name    string
		grouped attendFunc
		one     func(out, q []float32, t *Attention, kvOff, kvDim int, scale float32, att []float32)
	}
	ks := []kernel{{"scalar", attendGroup, attendHead}}
	if f := asmAttend(); f != nil {
		ks = append(ks, kernel{"asm", f, attendHeadAsmForTest})
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, k := range ks {
		for _, g := range []Heads{{8, 4, 8}, {6, 2, 8}, {8, 2, 8}, {4, 4, 8}, {8, 2, 16}, {6, 2, 16}, {4, 2, 6}, {6, 6, 48}} {
			group, hs, kvDim := g.Heads/g.KVHeads, g.HeadSize, g.KVHeads*g.HeadSize
			for _, n := range []int{1, 7, 8, 9, 16, 23, 130} {
				task := Attention{Q: randVec(r, g.Heads*hs), Keys: randVec(r, n*kvDim), Values: randVec(r, n*kvDim), Len: n}
				want, got := make([]float32, g.Heads*hs), make([]float32, g.Heads*hs)
				att := make([]float32, group*n)
				for h := range g.Heads {
					k.one(want[h*hs:(h+1)*hs], task.Q[h*hs:(h+1)*hs], &task, (h/group)*hs, kvDim, 0.35, att)
				}
				for kvh := range g.KVHeads {
					lo, hi := kvh*group*hs, (kvh+1)*group*hs
					k.grouped(got[lo:hi], task.Q[lo:hi], group, &task, kvh*hs, kvDim, 0.35, att)
				}
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("%s %+v n=%d: output %d grouped %v, per head %v", k.name, g, n, i, got[i], want[i])
					}
				}
			}
		}
	}
}
