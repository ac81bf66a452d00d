package kernels

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkMatMul measures one product shape per kernel set, single
// worker: go test -bench MatMul ./engine/llama2/kernels ("asm" is the
// assembly, "simd" the archsimd kernels of a GOEXPERIMENT=simd build).
func BenchmarkMatMul(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, s := range []struct {
		name       string
		rows, n, d int
	}{{"64x64", 1, 64, 64}, {"172x64", 1, 64, 172}, {"768x288", 1, 288, 768}, {"768x288x8", 8, 288, 768}, {"172x64x8", 8, 64, 172}, {"64x64x4", 4, 64, 64}, {"64x172x4", 4, 172, 64}} {
		m := MatMul{X: randVec(r, s.rows*s.n), W: randVec(r, s.d*s.n), Out: make([]float32, s.rows*s.d), Rows: s.rows, N: s.n, D: s.d}
		b.Run(s.name+"/scalar", func(b *testing.B) {
			for b.Loop() {
				matmulRowsScalar(&m, 0, m.D)
			}
			b.ReportMetric(float64(b.N)*float64(s.rows*s.n*s.d)/b.Elapsed().Seconds()/1e9, "GMAC/s")
		})
		if f := asmMatmul(); f != nil {
			b.Run(s.name+"/asm", func(b *testing.B) {
				for b.Loop() {
					f(&m, 0, m.D)
				}
				b.ReportMetric(float64(b.N)*float64(s.rows*s.n*s.d)/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
		}
		if f := simdMatmul(); f != nil {
			b.Run(s.name+"/simd", func(b *testing.B) {
				for b.Loop() {
					f(&m, 0, m.D)
				}
				b.ReportMetric(float64(b.N)*float64(s.rows*s.n*s.d)/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
		}
	}
}

// BenchmarkAttendHead measures one head at 128 positions.
func BenchmarkAttendHead(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, g := range []Heads{{8, 4, 8}, {6, 6, 48}} {
		kvDim, n := g.KVHeads*g.HeadSize, 128
		t := Attention{Out: make([]float32, g.Heads*g.HeadSize), Q: randVec(r, g.Heads*g.HeadSize), Keys: randVec(r, n*kvDim), Values: randVec(r, n*kvDim), Len: n}
		att := make([]float32, n)
		hs := g.HeadSize
		b.Run("scalar/hs"+string(rune('0'+hs/8)), func(b *testing.B) {
			for b.Loop() {
				attendHead(t.Out[:hs], t.Q[:hs], &t, 0, kvDim, 0.3, att)
			}
		})
		if f := asmAttend(); f != nil {
			b.Run("asm/hs"+string(rune('0'+hs/8)), func(b *testing.B) {
				for b.Loop() {
					f(t.Out[:hs], t.Q[:hs], &t, 0, kvDim, 0.3, att)
				}
			})
		}
		if f := simdAttend(); f != nil {
			b.Run("simd/hs"+string(rune('0'+hs/8)), func(b *testing.B) {
				for b.Loop() {
					f(t.Out[:hs], t.Q[:hs], &t, 0, kvDim, 0.3, att)
				}
			})
		}
	}
}
