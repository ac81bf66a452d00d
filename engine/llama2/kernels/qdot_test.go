package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// randQ8Blocks returns nb random activation blocks; extreme sets every
// value to ±127, the largest VPMADDUBSW pair sums.
func randQ8Blocks(rng *rand.Rand, nb int, extreme bool) []q8Block {
	x := make([]float32, 32*nb)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()))
	}
	out := make([]q8Block, nb)
	quantizeQ8_0(x, out)
	if extreme {
		for b := range out {
			for j := range out[b].qs {
				out[b].qs[j] = int8(127 - 254*rng.IntN(2))
			}
		}
	}
	return out
}

// randQuantBlocks returns nb random blocks of size bytes: an f16 scale
// and random bytes (every int8 from -128, every nibble), or, with extreme,
// every value byte fill.
func randQuantBlocks(rng *rand.Rand, nb, size int, extreme bool, fill byte) []byte {
	w := make([]byte, nb*size)
	for b := range nb {
		blk := w[b*size : (b+1)*size]
		binary.LittleEndian.PutUint16(blk, FloatToHalf(float32(rng.NormFloat64()*0.01)))
		for j := 2; j < size; j++ {
			blk[j] = byte(rng.IntN(256))
			if extreme {
				blk[j] = fill
			}
		}
	}
	return w
}

// TestQuantDotAsm checks the assembly Q8_0, Q4_0 and Q5_0 dot products,
// one row and four rows at a time, against the Go ones bit for bit (their
// integer lane sums are exact and the float accumulation is in the same
// order), on random blocks and on the extremes (weights -128, nibble 0
// with clear fifth bits, or the largest values; activations ±127), for 0
// to 40 blocks, with the four rows packed or further apart.
func TestQuantDotAsm(t *testing.T) {
	if !hasQuantAVX2 {
		t.Skip("no AVX2/F16C assembly in this build or on this CPU")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for nb := range 41 {
		for _, extreme := range []byte{0, 1, 2} {
			x := randQ8Blocks(rng, nb, extreme != 0)
			for _, c := range []struct {
				t    DType
				fill [2]byte
			}{{Q8_0, [2]byte{0x80, 0x7f}}, {Q4_0, [2]byte{0x00, 0xff}}, {Q5_0, [2]byte{0x00, 0xff}}} {
				size := dtypes[c.t].bytes
				rb := size * nb
				for _, pad := range []int{0, 5} {
					stride := rb + pad
					w := make([]byte, 4*stride)
					for k := range 4 {
						copy(w[k*stride:], randQuantBlocks(rng, nb, size, extreme != 0, c.fill[extreme%2]))
					}
					var got [4]float32
					dotQ8x4Fast(c.t, w, stride, x, &got)
					for k := range 4 {
						row := w[k*stride : k*stride+rb]
						want := dotQ8(c.t, row, x)
						if math.Float32bits(got[k]) != math.Float32bits(want) {
							t.Errorf("%v x4 nb=%d extreme=%d pad=%d row %d: asm %g, Go %g", c.t, nb, extreme, pad, k, got[k], want)
						}
						if one := dotQ8Fast(c.t, row, x); math.Float32bits(one) != math.Float32bits(want) {
							t.Errorf("%v nb=%d extreme=%d row %d: asm %g, Go %g", c.t, nb, extreme, k, one, want)
						}
					}
				}
			}
		}
	}
}

// TestQuantDotValues checks the Go dot products of the Q8_0-activation
// types against the sum of the dequantized weights times the activations,
// in float64: the lane order must not change what is summed.
func TestQuantDotValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const nb = 9
	x := randQ8Blocks(rng, nb, false)
	for _, typ := range []DType{Q8_0, Q4_0, Q5_0} {
		w := randQuantBlocks(rng, nb, dtypes[typ].bytes, false, 0)
		deq := make([]float32, 32*nb)
		Dequantize(typ, w, deq)
		want, mag := 0.0, 0.0
		for b := range x {
			for j, q := range x[b].qs {
				p := float64(deq[32*b+j]) * float64(x[b].d) * float64(q)
				want += p
				mag += math.Abs(p)
			}
		}
		if got := float64(dotQ8(typ, w, x)); math.Abs(got-want) > 1e-5*mag {
			t.Errorf("%v: %g, dequantized %g", typ, got, want)
		}
	}
}

// BenchmarkQuantDot measures one weight row of 4864 columns (Qwen2.5-0.5B's
// FFN width) times one Q8_0 activation row, Go and assembly, and a Q4_K row
// or Q6_K row of 4864 columns times a Q8_K row (19 blocks).
func BenchmarkQuantDot(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	const nb = 4864 / 32
	x := randQ8Blocks(rng, nb, false)
	for _, c := range []struct {
		name string
		size int
		t    DType
	}{{"Q8_0", 34, Q8_0}, {"Q4_0", 18, Q4_0}, {"Q5_0", 22, Q5_0}} {
		w := randQuantBlocks(rng, 4*nb, c.size, false, 0)
		rb := c.size * nb
		b.Run(c.name+"/go", func(b *testing.B) {
			for b.Loop() {
				dotQ8(c.t, w[:rb], x)
			}
			b.ReportMetric(float64(b.N)*32*nb/b.Elapsed().Seconds()/1e9, "GMAC/s")
		})
		if hasQuantAVX2 {
			b.Run(c.name+"/asm", func(b *testing.B) {
				for b.Loop() {
					dotQ8Fast(c.t, w[:rb], x)
				}
				b.ReportMetric(float64(b.N)*32*nb/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
			b.Run(c.name+"/asm-x4", func(b *testing.B) {
				var out [4]float32
				for b.Loop() {
					dotQ8x4Fast(c.t, w, rb, x, &out)
				}
				b.ReportMetric(float64(b.N)*4*32*nb/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
		}
	}
	xk := randQ8KBlocks(rng, 4864/256, false)
	for _, t := range []DType{Q4_K, Q6_K} {
		w := randKBlocks(rng, t, 4*4864/256, false, 0)
		rb := t.RowBytes(4864)
		b.Run(t.String()+"/go", func(b *testing.B) {
			for b.Loop() {
				dotK(t, w[:rb], xk)
			}
			b.ReportMetric(float64(b.N)*4864/b.Elapsed().Seconds()/1e9, "GMAC/s")
		})
		if hasQuantAVX2 {
			b.Run(t.String()+"/asm", func(b *testing.B) {
				for b.Loop() {
					dotKFast(t, w[:rb], xk)
				}
				b.ReportMetric(float64(b.N)*4864/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
			b.Run(t.String()+"/asm-x4", func(b *testing.B) {
				var out [4]float32
				for b.Loop() {
					dotKx4Fast(t, w, rb, xk, &out)
				}
				b.ReportMetric(float64(b.N)*4*4864/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
		}
	}
}

// randQ8KBlocks returns nb random Q8_K activation blocks; extreme sets
// every value to -128 or 127, the int8 ends, with the sums of 16 to match.
func randQ8KBlocks(rng *rand.Rand, nb int, extreme bool) []q8KBlock {
	x := make([]float32, 256*nb)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()))
	}
	out := make([]q8KBlock, nb)
	quantizeQ8K(x, out)
	if extreme {
		for b := range out {
			for j := range out[b].qs {
				out[b].qs[j] = int8(-128 + 255*rng.IntN(2))
			}
			for j := range out[b].bsums {
				s := int32(0)
				for _, q := range out[b].qs[16*j : 16*j+16] {
					s += int32(q)
				}
				out[b].bsums[j] = s
			}
		}
	}
	return out
}

// randKBlocks returns nb random Q4_K or Q6_K blocks (every byte random
// but the f16 scales), or, with extreme, every byte but the f16 scales
// fill; the f16 scales are random normal, or 65504 and 6e-8 with extreme.
func randKBlocks(rng *rand.Rand, t DType, nb int, extreme bool, fill byte) []byte {
	size := dtypes[t].bytes
	w := make([]byte, nb*size)
	for b := range nb {
		blk := w[b*size : (b+1)*size]
		for j := range blk {
			blk[j] = byte(rng.IntN(256))
			if extreme {
				blk[j] = fill
			}
		}
		for _, at := range map[DType][]int{Q4_K: {0, 2}, Q6_K: {208}}[t] {
			h := FloatToHalf(float32(rng.NormFloat64() * 0.01))
			if extreme {
				h = []uint16{0x7bff, 0x0001, 0xfbff}[rng.IntN(3)]
			}
			binary.LittleEndian.PutUint16(blk[at:], h)
		}
	}
	return w
}

// TestKQuantDotAsm checks the whole-row assembly Q4_K and Q6_K dot
// products, one row and four rows at a time (and for Q4_K one weight row
// against four activation rows), against the Go ones bit for
// bit (exact integer block sums, then the same float operations in the
// same order), on random blocks and on the extremes (all bits clear or
// set: nibbles and 6-bit scales and mins at 0 or their largest, Q6_K
// values -32 or 31 with scales 0 or -1; activations -128 or 127; f16
// scales at the ends of their range), for 0 to 40 blocks, with the four
// rows packed or further apart.
func TestKQuantDotAsm(t *testing.T) {
	if !hasQuantAVX2 {
		t.Skip("no AVX2/F16C assembly in this build or on this CPU")
	}
	rng := rand.New(rand.NewPCG(13, 14))
	for nb := range 41 {
		for _, extreme := range []byte{0, 1, 2} {
			x := randQ8KBlocks(rng, nb, extreme != 0)
			for _, typ := range []DType{Q4_K, Q6_K} {
				rb := typ.RowBytes(256 * nb)
				for _, pad := range []int{0, 7} {
					stride := rb + pad
					w := make([]byte, 4*stride)
					for k := range 4 {
						copy(w[k*stride:], randKBlocks(rng, typ, nb, extreme != 0, []byte{0x00, 0xff}[extreme%2]))
					}
					if typ == Q4_K {
						// One weight row against four activation rows.
						x4 := randQ8KBlocks(rng, 4*nb, extreme != 0)
						var got [4]float32
						dotQ4Kr4Fast(w[:rb], x4, nb, &got)
						for k := range 4 {
							want := dotQ4K(w[:rb], x4[k*nb:(k+1)*nb])
							if math.Float32bits(got[k]) != math.Float32bits(want) {
								t.Errorf("Q4_K r4 nb=%d extreme=%d pad=%d activation row %d: asm %g, Go %g", nb, extreme, pad, k, got[k], want)
							}
						}
					}
					var got [4]float32
					dotKx4Fast(typ, w, stride, x, &got)
					for k := range 4 {
						row := w[k*stride : k*stride+rb]
						want := dotK(typ, row, x)
						if math.Float32bits(got[k]) != math.Float32bits(want) {
							t.Errorf("%v x4 nb=%d extreme=%d pad=%d row %d: asm %g, Go %g", typ, nb, extreme, pad, k, got[k], want)
						}
						if one := dotKFast(typ, row, x); math.Float32bits(one) != math.Float32bits(want) {
							t.Errorf("%v nb=%d extreme=%d row %d: asm %g, Go %g", typ, nb, extreme, k, one, want)
						}
					}
				}
			}
		}
	}
}

// TestKQuantMatMulRows checks Q4_K and Q6_K matrix products of 1 to 9
// activation rows (four at a time and the rest, in tiles of weight rows,
// split across workers) against the one-row Go dot products bit for bit.
func TestKQuantMatMulRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	pool := NewPool(2)
	defer pool.Close()
	cpu := NewCPU(pool)
	const n = 512
	for _, typ := range []DType{Q4_K, Q6_K} {
		for _, d := range []int{5, 130} {
			w := randKBlocks(rng, typ, d*n/256, false, 0)
			for rows := 1; rows <= 9; rows++ {
				m := MatMul{X: make([]float32, rows*n), Out: make([]float32, rows*d), Rows: rows, N: n, D: d, Type: typ, Raw: w}
				for i := range m.X {
					m.X[i] = float32(rng.NormFloat64())
				}
				cpu.MatMul(m)
				x := make([]q8KBlock, rows*n/256)
				quantizeQ8K(m.X, x)
				rb := typ.RowBytes(n)
				for r := range rows {
					for o := range d {
						want := dotK(typ, w[o*rb:(o+1)*rb], x[r*n/256:(r+1)*n/256])
						if got := m.Out[r*d+o]; math.Float32bits(got) != math.Float32bits(want) {
							t.Fatalf("%v d=%d rows=%d: row %d output %d is %g, want %g", typ, d, rows, r, o, got, want)
						}
					}
				}
			}
		}
	}
}
