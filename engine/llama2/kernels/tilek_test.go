package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestTileK checks the Q4_K and Q6_K tiles: the Go forms against dotQ4K
// and dotQ6K of the unpacked rows, and the assembly, where the CPU runs
// it, against the Go forms, bit for bit, on random blocks and on the
// extremes (every byte but the f16 scales clear or set: Q4_K nibbles,
// scales and mins 0 or their largest, Q6_K values -32 or 31 with scales 0
// or -1; activations -128 or 127; f16 scales at the ends of their range),
// for 0 to 9 blocks and tileKMaxBlocks, with eight activation rows or
// seven (the last paired with itself) and repeated weight rows.
func TestTileK(t *testing.T) {
	if tileQ4K == nil || tileQ6K == nil {
		t.Log("no K-quant tile kernels on this CPU or in this build: checking the Go forms only")
	}
	rng := rand.New(rand.NewPCG(17, 18))
	for _, typ := range []DType{Q4_K, Q6_K} {
		bs := typ.RowBytes(256)
		for _, nb := range []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, tileKMaxBlocks} {
			for extreme, fill := range []byte{0, 0x00, 0xff} {
				for _, rows := range []int{8, 7} {
					xb := randQ8KBlocks(rng, rows*nb, extreme != 0)
					packed := make([]q8Kx2, (rows+1)/2*nb)
					packQ8Kx2(xb, rows, nb, packed)
					var xs [4][]q8Kx2
					for p := range xs {
						q := min(p, (rows+1)/2-1)
						xs[p] = packed[q*nb : (q+1)*nb]
					}
					raw := randKBlocks(rng, typ, 3*nb, extreme != 0, fill)
					var w [4][]byte
					for i := range w {
						r := min(i, 2)
						w[i] = raw[bs*nb*r : bs*nb*(r+1)]
					}
					var ref, got [32]float32
					if typ == Q4_K {
						dotQ4Kt4(&w, nil, &xs, nb, &ref)
					} else {
						dotQ6Kt4(&w, nil, &xs, nb, &ref)
					}
					for r := range rows {
						for i := range w {
							want := dotK(typ, w[i], xb[r*nb:(r+1)*nb])
							if math.Float32bits(ref[4*r+i]) != math.Float32bits(want) {
								t.Fatalf("%v nb=%d fill=%d rows=%d: Go tile row %d weight row %d = %g, dotK %g", typ, nb, extreme, rows, r, i, ref[4*r+i], want)
							}
						}
					}
					switch {
					case typ == Q4_K && tileQ4K != nil:
						meta := make([]q4KMeta, nb)
						fillQ4KMeta(&w, nb, meta)
						tileQ4K(&w, meta, &xs, nb, &got)
					case typ == Q6_K && tileQ6K != nil:
						meta := make([]q6KMeta, nb)
						fillQ6KMeta(&w, nb, meta)
						tileQ6K(&w, meta, &xs, nb, &got)
					default:
						continue
					}
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

// TestMatMulTileK checks products of several rows with Q4_K and Q6_K
// weights, with and without the tile kernels (useTile off runs rowsK, as a
// CPU without AVX-512 VNNI does): every output is the same bits as the row
// alone, for row counts around the tile's eight, ragged output ranges and
// a row too long for the tiles, on one worker and three, with three jobs
// (Q4_K, Q6_K, Q4_K) sharing their packed input rows.
func TestMatMulTileK(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	for _, workers := range []int{1, 3} {
		pool := NewPool(workers)
		defer pool.Close()
		c := NewCPU(pool)
		for _, n := range []int{256, 768, 256 * (tileKMaxBlocks + 1)} {
			for _, rows := range []int{4, 5, 9, 17} {
				batchedMatchesAlone(t, c, rng, []DType{Q4_K, Q6_K, Q4_K}, []int{37, 9, 8}, n, rows, fmt.Sprintf("workers=%d", workers))
			}
		}
	}
}
