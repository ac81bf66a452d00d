package kernels

import "encoding/binary"

// Prompts (a MatMul of several activation rows) with Q8_0 weights go by
// tiles of four weight rows times four pairs of activation rows where the
// CPU has AVX-512 VNNI (tile_amd64.s): each weight block is loaded once for
// eight activation rows and each activation block once for four weight
// rows. Every product is summed in dotQ8_0's order, so a row's results are
// the same bits alone, in a batch, or on a CPU without the tile kernel.

// q8x2 is block b of two Q8_0 activation rows laid out for the tile
// kernel: the two rows' values one after the other, each int32 lane's
// start value -128·(the sum of its four values), which cancels the 128
// the kernel adds to the weights to make them unsigned, and each row's
// scale in the eight lanes of its half.
type q8x2 struct {
	qs   [64]int8
	corr [16]int32
	d    [16]float32
}

// tileQ8_0 sets out[4·r+i] to the dot product of weight row w[i] (nb
// Q8_0 blocks) with activation row r%2 of pair row x[r/2] (nb q8x2
// each). It is nil where the CPU has no tile kernel; useTile switches it
// off in tests.
var (
	tileQ8_0 func(w *[4][]byte, x *[4][]q8x2, nb int, out *[32]float32)
	useTile  = true
)

// tileMinRows is the fewest activation rows worth packing for the tile.
const tileMinRows = 4

// canTile reports whether m goes by tiles.
func canTile(m *MatMul) bool {
	return tileQ8_0 != nil && useTile && m.Type == Q8_0 && m.Rows >= tileMinRows
}

// packQ8x2 lays out the rows×nb activation blocks of x as pair rows of nb
// q8x2 each in out; an odd last row is paired with itself.
func packQ8x2(x []q8Block, rows, nb int, out []q8x2) {
	for p := range (rows + 1) / 2 {
		pair := [2]int{2 * p, min(2*p+1, rows-1)}
		for b := range nb {
			o := &out[p*nb+b]
			for h, r := range pair {
				blk := &x[r*nb+b]
				copy(o.qs[32*h:32*h+32], blk.qs[:])
				for k := range 8 {
					q := blk.qs[4*k : 4*k+4]
					o.corr[8*h+k] = -128 * (int32(q[0]) + int32(q[1]) + int32(q[2]) + int32(q[3]))
					o.d[8*h+k] = blk.d
				}
			}
		}
	}
}

// dotQ8_0t4 is the Go form of the tile kernel, in its order: each lane
// starts at its corr, adds (w+128)·x for its four values, and is scaled
// and summed as laneSums and hsum8 do, which makes it dotQ8_0 of the
// unpacked rows bit for bit.
func dotQ8_0t4(w *[4][]byte, x *[4][]q8x2, nb int, out *[32]float32) {
	for r := range 8 {
		h := r % 2
		for i := range 4 {
			var acc [8]float32
			for b := range nb {
				blk := w[i][34*b : 34*b+34]
				y := &x[r/2][b]
				dw := halfTable[binary.LittleEndian.Uint16(blk)]
				for k := range acc {
					s := y.corr[8*h+k]
					for j := 4 * k; j < 4*k+4; j++ {
						s += int32(blk[2+j]^0x80) * int32(y.qs[32*h+j])
					}
					acc[k] += float32(float32(s) * (dw * y.d[8*h+k]))
				}
			}
			out[4*r+i] = hsum8(&acc)
		}
	}
}

// rowsQ8Tile computes output rows [lo, hi) of m from its pair rows x.
// The activations go in chunks of about 1 MiB, which stay in L2 while
// every weight row meets them; a chunk's ragged end and a range's last
// weight rows repeat a row and drop its results.
func rowsQ8Tile(m *MatMul, x []q8x2, lo, hi int) {
	n, d := m.N, m.D
	nb, rb := n/32, Q8_0.RowBytes(n)
	pairs := (m.Rows + 1) / 2
	chunk := max(4, (1<<20)/(192*max(nb, 1))) &^ 3
	var (
		out [32]float32
		w   [4][]byte
		xs  [4][]q8x2
	)
	for c0 := 0; c0 < pairs; c0 += chunk {
		c1 := min(c0+chunk, pairs)
		for o := lo; o < hi; o += 4 {
			for k := range w {
				r := min(o+k, hi-1)
				w[k] = m.Raw[r*rb : (r+1)*rb]
			}
			for p := c0; p < c1; p += 4 {
				for k := range xs {
					q := min(p+k, c1-1)
					xs[k] = x[q*nb : (q+1)*nb]
				}
				tileQ8_0(&w, &xs, nb, &out)
				for r := 2 * p; r < min(2*p+8, 2*c1, m.Rows); r++ {
					copy(m.Out[r*d+o:r*d+min(o+4, hi)], out[4*(r-2*p):])
				}
			}
		}
	}
}
