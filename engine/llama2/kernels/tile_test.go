package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestTileKernels checks the tiles of Q8_0, Q4_0 and Q5_0 weights: the Go
// form against dotQ8 of the unpacked rows, and the assembly, where the
// CPU runs it, against the Go form, bit for bit, on random blocks and on
// the extremes (every weight byte 0x00, 0x80, 0xff or 0x7f: the smallest
// and largest values of each type; activations ±127), for 0 to 9 blocks,
// with eight activation rows or seven (the last paired with itself) and
// repeated weight rows.
func TestTileKernels(t *testing.T) {
	if tileAsm[Q8_0] == nil {
		t.Log("no tile kernels on this CPU or in this build: checking the Go form only")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, typ := range []DType{Q8_0, Q4_0, Q5_0} {
		bs := typ.RowBytes(32)
		for nb := range 10 {
			for extreme, fill := range []byte{0, 0x00, 0x80, 0xff, 0x7f} {
				for _, rows := range []int{8, 7} {
					xb := randQ8Blocks(rng, rows*nb, extreme != 0)
					packed := make([]q8x2, (rows+1)/2*nb)
					packQ8x2(xb, rows, nb, tileOffset(typ), packed)
					var xs [4][]q8x2
					for p := range xs {
						q := min(p, (rows+1)/2-1)
						xs[p] = packed[q*nb : (q+1)*nb]
					}
					raw := randQuantBlocks(rng, 3*nb, bs, extreme != 0, fill)
					var w [4][]byte
					for i := range w {
						r := min(i, 2)
						w[i] = raw[bs*nb*r : bs*nb*(r+1)]
					}
					var ref, got [32]float32
					dotQ8t4(typ, &w, &xs, nb, &ref)
					for r := range rows {
						for i := range w {
							want := dotQ8(typ, w[i], xb[r*nb:(r+1)*nb])
							if math.Float32bits(ref[4*r+i]) != math.Float32bits(want) {
								t.Fatalf("%v nb=%d fill=%d rows=%d: Go tile row %d weight row %d = %g, dotQ8 %g", typ, nb, extreme, rows, r, i, ref[4*r+i], want)
							}
						}
					}
					if tileAsm[typ] == nil {
						continue
					}
					tileAsm[typ](&w, &xs, nb, &got)
					for k := range got {
						if math.Float32bits(got[k]) != math.Float32bits(ref[k]) {
							t.Fatalf("%v nb=%d fill=%d rows=%d: out[%d] = %g, Go tile %g", typ, nb, extreme, rows, k, got[k], ref[k])
						}
					}
				}
			}
		}
	}
}

// TestMatMulTile checks products of several rows with Q8_0, Q4_0 and Q5_0
// weights, with and without the tile kernels (useTile off runs the
// one-row kernels, as a CPU without AVX-512 VNNI does): every output is
// the same bits as the row alone, for row counts around the tile's eight
// and ragged output ranges, on one worker and three, with jobs sharing
// their input rows (two of one type share the packed rows, one of another
// type packs its own). On a CPU with AMX, Q8_0 goes by the AMX kernel
// with or without useTile, in its own order; this test then checks that
// batching does not change its results, and TestMatMulAMX its order. The
// Q8_0 bits of a CPU without AMX are checked with useAMX off, since
// across such CPUs (and only there) Q8_0 results are the same bits.
func TestMatMulTile(t *testing.T) {
	defer func(on bool) { useAMX = on }(useAMX)
	for _, workers := range []int{1, 3} {
		pool := NewPool(workers)
		defer pool.Close()
		c := NewCPU(pool)
		for _, amx := range []bool{false, true} {
			if amx && !hasAMX {
				continue
			}
			useAMX = amx
			matMulTile(t, c, workers)
		}
	}
}

// matMulTile is TestMatMulTile on c, with useAMX as set.
func matMulTile(t *testing.T, c *CPU, workers int) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, typ := range []DType{Q8_0, Q4_0, Q5_0} {
		other := map[DType]DType{Q8_0: Q5_0, Q4_0: Q8_0, Q5_0: Q4_0}[typ]
		for _, n := range []int{32, 96, 1024} {
			for _, rows := range []int{4, 5, 8, 9, 17, 40} {
				batchedMatchesAlone(t, c, rng, []DType{typ, other, typ}, []int{37, 130, 8}, n, rows,
					fmt.Sprintf("workers=%d amx=%v", workers, useAMX))
			}
		}
	}
}

// batchedMatchesAlone runs one product of rows activation rows of width n
// with jobs of the given types and output sizes sharing their input, with
// the tile kernels on and off (useTile), and fails unless every output is
// the same bits as its row's product alone; what names the case.
func batchedMatchesAlone(t *testing.T, c *CPU, rng *rand.Rand, types []DType, ds []int, n, rows int, what string) {
	t.Helper()
	x := randVec(rng, rows*n)
	raws := make([][]byte, len(types))
	for j := range types {
		raws[j] = Quantize(types[j], randVec(rng, ds[j]*n))
	}
	var outs [2][][]float32
	for k, tile := range []bool{true, false} {
		useTile = tile
		jobs := make([]MatMul, len(types))
		for j := range jobs {
			outs[k] = append(outs[k], make([]float32, rows*ds[j]))
			jobs[j] = MatMul{Out: outs[k][j], X: x, Rows: rows, N: n, D: ds[j], Type: types[j], Raw: raws[j]}
		}
		c.MatMul(jobs...)
	}
	useTile = true
	for j, d := range ds {
		for r := range rows {
			alone := make([]float32, d)
			c.MatMul(MatMul{Out: alone, X: x[r*n : (r+1)*n], Rows: 1, N: n, D: d, Type: types[j], Raw: raws[j]})
			for i, want := range alone {
				for k, name := range []string{"tile", "no tile"} {
					if got := outs[k][j][r*d+i]; math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("%s n=%d rows=%d job %d (%v): row %d output %d %s %g, alone %g", what, n, rows, j, types[j], r, i, name, got, want)
					}
				}
			}
		}
	}
}
