package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestTileQ8Kernel checks the Q8_0 tile: the Go form against dotQ8_0 of
// the unpacked rows, and the assembly, where the CPU runs it, against the
// Go form, bit for bit, on random blocks and on the extremes (weights
// -128 or 127, activations ±127), for 0 to 9 blocks, with eight activation
// rows or seven (the last paired with itself) and repeated weight rows.
func TestTileQ8Kernel(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for nb := range 10 {
		for _, extreme := range []byte{0, 1, 2} {
			for _, rows := range []int{8, 7} {
				xb := randQ8Blocks(rng, rows*nb, extreme != 0)
				packed := make([]q8x2, (rows+1)/2*nb)
				packQ8x2(xb, rows, nb, packed)
				var xs [4][]q8x2
				for p := range xs {
					q := min(p, (rows+1)/2-1)
					xs[p] = packed[q*nb : (q+1)*nb]
				}
				raw := randQuantBlocks(rng, 3*nb, 34, extreme != 0, []byte{0, 0x80, 0x7f}[extreme])
				var w [4][]byte
				for i := range w {
					r := min(i, 2)
					w[i] = raw[34*nb*r : 34*nb*(r+1)]
				}
				var ref, got [32]float32
				dotQ8_0t4(&w, &xs, nb, &ref)
				for r := range rows {
					for i := range w {
						want := dotQ8_0(w[i], xb[r*nb:(r+1)*nb])
						if math.Float32bits(ref[4*r+i]) != math.Float32bits(want) {
							t.Fatalf("nb=%d extreme=%d rows=%d: Go tile row %d weight row %d = %g, dotQ8_0 %g", nb, extreme, rows, r, i, ref[4*r+i], want)
						}
					}
				}
				if tileQ8_0 == nil {
					continue
				}
				tileQ8_0(&w, &xs, nb, &got)
				for k := range got {
					if math.Float32bits(got[k]) != math.Float32bits(ref[k]) {
						t.Fatalf("nb=%d extreme=%d rows=%d: out[%d] = %g, Go tile %g", nb, extreme, rows, k, got[k], ref[k])
					}
				}
			}
		}
	}
	if tileQ8_0 == nil {
		t.Log("no tile kernel on this CPU or in this build: checked the Go form only")
	}
}

// TestMatMulQ8Tile checks Q8_0 products of several rows, with and without
// the tile kernel (useTile off runs the one-row kernels): every output is
// the same bits as the row alone, for row counts around the tile's eight
// and ragged output ranges, on one worker and three, with the jobs sharing
// their input rows.
func TestMatMulQ8Tile(t *testing.T) {
	if tileQ8_0 == nil {
		t.Log("no tile kernel on this CPU or in this build: the products run the one-row kernels")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, workers := range []int{1, 3} {
		pool := NewPool(workers)
		defer pool.Close()
		c := NewCPU(pool)
		for _, n := range []int{32, 96, 1024} {
			for _, rows := range []int{4, 5, 8, 9, 17, 40} {
				const d1, d2 = 37, 130
				x := randVec(rng, rows*n)
				w1, w2 := Quantize(Q8_0, randVec(rng, d1*n)), Quantize(Q8_0, randVec(rng, d2*n))
				var outs [2][2][]float32
				for k, tile := range []bool{true, false} {
					useTile = tile
					outs[k] = [2][]float32{make([]float32, rows*d1), make([]float32, rows*d2)}
					c.MatMul(MatMul{Out: outs[k][0], X: x, Rows: rows, N: n, D: d1, Type: Q8_0, Raw: w1},
						MatMul{Out: outs[k][1], X: x, Rows: rows, N: n, D: d2, Type: Q8_0, Raw: w2})
				}
				useTile = true
				for j, raw := range [][]byte{w1, w2} {
					d := len(outs[0][j]) / rows
					for r := range rows {
						alone := make([]float32, d)
						c.MatMul(MatMul{Out: alone, X: x[r*n : (r+1)*n], Rows: 1, N: n, D: d, Type: Q8_0, Raw: raw})
						for i, want := range alone {
							for k, name := range []string{"tile", "no tile"} {
								if got := outs[k][j][r*d+i]; math.Float32bits(got) != math.Float32bits(want) {
									t.Fatalf("workers=%d n=%d rows=%d job %d: row %d output %d %s %g, alone %g", workers, n, rows, j, r, i, name, got, want)
								}
							}
						}
					}
				}
			}
		}
	}
}
