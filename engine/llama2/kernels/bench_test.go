package kernels

import (
	"fmt"
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

// BenchmarkAttention measures the attention of one query row over n
// positions, single worker, for stories260K's heads (8 query heads sharing
// 4 KV heads of 8 floats) and stories15M's (6 heads of 48): "perhead" runs
// the one-head kernel for every query head, reading the KV head's rows
// once per query head; "grouped" is the kernel CPU.Attention uses, which
// reads them once per group of query heads sharing them.
//
//	go test -run '^$' -bench Attention ./engine/llama2/kernels
func BenchmarkAttention(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, g := range []Heads{{8, 4, 8}, {6, 6, 48}} {
		for _, n := range []int{128, 512} {
			kvDim, hs, group := g.KVHeads*g.HeadSize, g.HeadSize, g.Heads/g.KVHeads
			t := Attention{Out: make([]float32, g.Heads*hs), Q: randVec(r, g.Heads*hs), Keys: randVec(r, n*kvDim), Values: randVec(r, n*kvDim), Len: n}
			att := make([]float32, group*n)
			name := fmt.Sprintf("heads%d-kv%d-hs%d/pos%d", g.Heads, g.KVHeads, hs, n)
			perHead := func(one func(out, q []float32, t *Attention, kvOff, kvDim int, scale float32, att []float32)) {
				for h := range g.Heads {
					one(t.Out[h*hs:(h+1)*hs], t.Q[h*hs:(h+1)*hs], &t, (h/group)*hs, kvDim, 0.3, att)
				}
			}
			grouped := func(f attendFunc) {
				for kvh := range g.KVHeads {
					lo, hi := kvh*group*hs, (kvh+1)*group*hs
					f(t.Out[lo:hi], t.Q[lo:hi], group, &t, kvh*hs, kvDim, 0.3, att)
				}
			}
			b.Run(name+"/scalar-perhead", func(b *testing.B) {
				for b.Loop() {
					perHead(attendHead)
				}
			})
			b.Run(name+"/scalar-grouped", func(b *testing.B) {
				for b.Loop() {
					grouped(attendGroup)
				}
			})
			if f := asmAttend(); f != nil {
				b.Run(name+"/asm-perhead", func(b *testing.B) {
					for b.Loop() {
						perHead(attendHeadAsmForTest)
					}
				})
				b.Run(name+"/asm-grouped", func(b *testing.B) {
					for b.Loop() {
						grouped(f)
					}
				})
			}
		}
	}
}

// BenchmarkPromptQ8 measures a 64-row product with Q8_0 weights (896 ×
// 4864, Qwen2.5-0.5B's gate projection), single worker, by the AMX kernel
// where the CPU has AMX-INT8 ("amx"), by tiles where it has AVX-512 VNNI
// ("tile") and by the one-row kernels ("rows"):
//
//	go test -run '^$' -bench PromptQ8 ./engine/llama2/kernels
func BenchmarkPromptQ8(b *testing.B) {
	benchPrompt(b, Q8_0, 896, 4864, tileAsm[Q8_0] != nil)
}

// BenchmarkDecodeQ8 is BenchmarkPromptQ8 for one activation row and for
// eight (a decode step of one stream and of eight), where the VNNI tile
// does not run: "amx" against the one-row kernels ("rows").
func BenchmarkDecodeQ8(b *testing.B) {
	for _, rows := range []int{1, 8} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) { benchQ8(b, rows, 896, 4864) })
	}
}

// BenchmarkPromptQ4K is BenchmarkPromptQ8 for Q4_K weights (2048 × 8192,
// Llama-3.2-1B's gate projection); "rows" is rowsK's one weight row
// against four activation rows.
func BenchmarkPromptQ4K(b *testing.B) {
	benchPrompt(b, Q4_K, 2048, 8192, tileQ4K != nil)
}

// BenchmarkPromptQ6K is BenchmarkPromptQ4K for Q6_K weights (8192 × 2048,
// Llama-3.2-1B's down projection); "rows" is rowsK's four weight rows
// against one activation row.
func BenchmarkPromptQ6K(b *testing.B) {
	benchPrompt(b, Q6_K, 8192, 2048, tileQ6K != nil)
}

// benchPrompt measures a 64-row product of n × d weights of type t with
// and without the tile kernel (which the CPU has where hasTile).
func benchPrompt(b *testing.B, t DType, n, d int, hasTile bool) {
	if t == Q8_0 {
		benchQ8(b, 64, n, d)
		return
	}
	m := benchMatMul(t, 64, n, d)
	for _, tile := range []bool{true, false} {
		b.Run(map[bool]string{true: "tile", false: "rows"}[tile], func(b *testing.B) {
			if tile && !hasTile {
				b.Skip("no tile kernel on this CPU or in this build")
			}
			useTile = tile
			defer func() { useTile = true }()
			runMatMul(b, m)
		})
	}
}

// benchQ8 measures a rows-row product with n × d Q8_0 weights by the AMX
// kernel, the VNNI tile (from four rows) and the one-row kernels.
func benchQ8(b *testing.B, rows, n, d int) {
	m := benchMatMul(Q8_0, rows, n, d)
	for _, k := range []struct {
		name      string
		amx, tile bool
		has       bool
	}{
		{"amx", true, false, hasAMX},
		{"tile", false, true, tileAsm[Q8_0] != nil && rows >= tileMinRows},
		{"rows", false, false, true},
	} {
		b.Run(k.name, func(b *testing.B) {
			if !k.has {
				b.Skip("no such kernel on this CPU, in this build or for this many rows")
			}
			defer func(amx, tile bool) { useAMX, useTile = amx, tile }(useAMX, useTile)
			useAMX, useTile = k.amx, k.tile
			runMatMul(b, m)
		})
	}
}

// benchMatMul returns a rows-row product with random n × d weights of
// type t.
func benchMatMul(t DType, rows, n, d int) MatMul {
	r := rand.New(rand.NewPCG(1, 1))
	return MatMul{X: randVec(r, rows*n), Out: make([]float32, rows*d), Rows: rows, N: n, D: d, Type: t, Raw: Quantize(t, randVec(r, d*n))}
}

// runMatMul measures m on one worker, in GMAC/s.
func runMatMul(b *testing.B, m MatMul) {
	pool := NewPool(1)
	defer pool.Close()
	c := NewCPU(pool)
	for b.Loop() {
		c.MatMul(m)
	}
	b.ReportMetric(float64(b.N)*float64(m.Rows*m.N*m.D)/b.Elapsed().Seconds()/1e9, "GMAC/s")
}
