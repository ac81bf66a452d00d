package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSwiGLUFast checks that swigluFast is swiglu bit for bit: activations
// of every scale, the edges of expf's fast range and its special cases
// (huge, tiny, infinite, NaN) mixed into blocks, lengths that leave tails.
func TestSwiGLUFast(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 34))
	special := []float32{-70, 70, 69.99999, -88, -88.00001, 88, 100, -100,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 0, float32(math.Copysign(0, -1)), 1e-40}
	for _, n := range []int{0, 1, 7, 8, 9, 31, 64, 1000, 4864} {
		for trial := range 20 {
			h := make([]float32, n)
			g := make([]float32, n)
			for i := range h {
				scale := float32(math.Pow(10, float64(rng.IntN(5)-2)))
				h[i] = float32(rng.NormFloat64()) * scale
				g[i] = float32(rng.NormFloat64())
				if trial%4 == 3 && rng.IntN(40) == 0 {
					h[i] = special[rng.IntN(len(special))]
				}
			}
			want := append([]float32(nil), h...)
			swiglu(want, g)
			got := append([]float32(nil), h...)
			swigluFast(got, g)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(want[i] != want[i] && got[i] != got[i]) {
					t.Fatalf("n=%d trial %d: element %d (h=%v g=%v) = %v (%#x), want %v (%#x)",
						n, trial, i, h[i], g[i], got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				}
			}
		}
	}
}

// BenchmarkSwiGLU is one row of Qwen2.5-0.5B's feed-forward (4864 wide),
// in Go and in swigluFast.
func BenchmarkSwiGLU(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	h, g := make([]float32, 4864), make([]float32, 4864)
	for i := range h {
		h[i], g[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
	}
	buf := make([]float32, len(h))
	for _, c := range []struct {
		name string
		fn   func(h, g []float32)
	}{{"go", swiglu}, {"fast", swigluFast}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(8 * len(h)))
			for b.Loop() {
				copy(buf, h)
				c.fn(buf, g)
			}
		})
	}
}
