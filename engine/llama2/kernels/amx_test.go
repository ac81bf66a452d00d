package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// sameBits reports whether a and b are the same float32 bits, or both NaN.
func sameBits(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || a != a && b != b
}

// extremeScales sets every block's scale, weights' and activations', to
// one of the awkward values: zero, F16 and float32 subnormals, the
// smallest and largest F16 normals, both signs.
func extremeScales(rng *rand.Rand, w []byte, x []q8Block) {
	halves := []uint16{0, 0x8000, 0x0001, 0x83ff, 0x0400, 0x7bff, 0xfbff, 0x3c00}
	for b := 0; b < len(w); b += 34 {
		binary.LittleEndian.PutUint16(w[b:], halves[rng.IntN(len(halves))])
	}
	ds := []float32{0, 1e-40, -1e-40, 1e-30, 1e20, -3.5, 1}
	for i := range x {
		x[i].d = ds[rng.IntN(len(ds))]
	}
}

// TestAMXKernel checks the AMX kernel, where the CPU runs it, and its Go
// form against dotQ8_0AMX bit for bit (and the one-row kernel where there
// is one activation row): 1 to 16 weight rows (packed or
// further apart) times 1 to 16 activation rows, 1 to 200 blocks, random
// values and the extremes (weights -128 or 127 throughout, activations
// ±127, awkward scales).
func TestAMXKernel(t *testing.T) {
	if !hasAMX {
		t.Log("no AMX on this CPU or in this build: checking the Go form only")
	}
	rng := rand.New(rand.NewPCG(29, 1))
	for _, nb := range []int{1, 2, 3, 7, 28, 64, 200} {
		for extreme, fill := range []byte{0, 0x80, 0x7f} {
			for _, m := range []int{1, 2, 5, 15, 16} {
				for _, n := range []int{1, 3, 8, 15, 16} {
					rb := 34*nb + 34*(m%3)
					w := randQuantBlocks(rng, m*rb/34, 34, extreme != 0, fill)
					x := randQ8Blocks(rng, n*nb, extreme != 0)
					if extreme != 0 {
						extremeScales(rng, w, x)
					}
					packed := make([]amxBlock, nb)
					packAMX(x, n, nb, packed)
					var (
						cfg     amxConfig
						got, gf [16][16]float32
					)
					cfg.set(m, n)
					amxTile(&cfg, w, rb, m, packed, n, nb, &got)
					amxTileGo(w, rb, m, packed, n, nb, &gf)
					var one [16]float32
					if n == 1 {
						amxTile1(&cfg, w, rb, m, x, &one)
					}
					for r := range m {
						for c := range n {
							want := dotQ8_0AMX(w[r*rb:r*rb+34*nb], x[c*nb:(c+1)*nb])
							if !sameBits(gf[r][c], want) {
								t.Fatalf("nb=%d fill=%d %d×%d: Go form [%d][%d] = %g, want %g", nb, extreme, m, n, r, c, gf[r][c], want)
							}
							if !sameBits(got[r][c], want) {
								t.Fatalf("nb=%d fill=%d %d×%d: kernel [%d][%d] = %g, want %g", nb, extreme, m, n, r, c, got[r][c], want)
							}
							if n == 1 && !sameBits(one[r], want) {
								t.Fatalf("nb=%d fill=%d %d×1: one-row kernel [%d] = %g, want %g", nb, extreme, m, r, one[r], want)
							}
						}
					}
				}
			}
		}
	}
}

// TestMatMulAMX checks Q8_0 products through CPU.MatMul with the AMX
// kernel on (its Go form on a CPU without AMX): every output is
// dotQ8_0AMX's bits and the same as the activation row alone, for 1 to 40
// activation rows, output counts that are and are not multiples of 16,
// on one worker and three, with a job of another type sharing the input
// rows.
func TestMatMulAMX(t *testing.T) {
	defer func(on bool) { useAMX = on }(useAMX)
	useAMX = true
	rng := rand.New(rand.NewPCG(29, 2))
	for _, workers := range []int{1, 3} {
		pool := NewPool(workers)
		defer pool.Close()
		c := NewCPU(pool)
		for _, n := range []int{32, 96, 1024} {
			for _, rows := range []int{1, 2, 15, 16, 17, 40} {
				types := []DType{Q8_0, Q5_0, Q8_0}
				ds := []int{37, 130, 16}
				x := randVec(rng, rows*n)
				q := make([]q8Block, rows*n/32)
				quantizeQ8_0(x, q)
				jobs := make([]MatMul, len(types))
				for j := range jobs {
					jobs[j] = MatMul{Out: make([]float32, rows*ds[j]), X: x, Rows: rows, N: n, D: ds[j], Type: types[j], Raw: Quantize(types[j], randVec(rng, ds[j]*n))}
				}
				c.MatMul(jobs...)
				for j, m := range jobs {
					rb := m.Type.RowBytes(n)
					for r := range rows {
						alone := make([]float32, m.D)
						c.MatMul(MatMul{Out: alone, X: x[r*n : (r+1)*n], Rows: 1, N: n, D: m.D, Type: m.Type, Raw: m.Raw})
						for o, got := range m.Out[r*m.D : (r+1)*m.D] {
							if !sameBits(got, alone[o]) {
								t.Fatalf("workers=%d n=%d rows=%d job %d: row %d output %d is %g, alone %g", workers, n, rows, j, r, o, got, alone[o])
							}
							if m.Type != Q8_0 {
								continue
							}
							if want := dotQ8_0AMX(m.Raw[o*rb:(o+1)*rb], q[r*n/32:(r+1)*n/32]); !sameBits(got, want) {
								t.Fatalf("workers=%d n=%d rows=%d job %d: row %d output %d is %g, want %g", workers, n, rows, j, r, o, got, want)
							}
						}
					}
				}
			}
		}
	}
}
