package kernels

import "encoding/binary"

// Prompts (a MatMul of several activation rows) with Q8_0, Q4_0 or Q5_0
// weights go by
// tiles of four weight rows times four pairs of activation rows where the
// CPU has AVX-512 VNNI (tile_amd64.s): each weight block is loaded once for
// eight activation rows and each activation block once for four weight
// rows. Every product is summed in dotQ8's order, so a row's results are
// the same bits alone, in a batch, or on a CPU without the tile kernel.

// q8x2 is block b of two Q8_0 activation rows laid out for a tile
// kernel: the two rows' values one after the other, each int32 lane's
// start value -off·(the sum of its four values), which cancels the off
// the kernel adds to the weights to make them unsigned (tileOffset), and
// each row's scale in the eight lanes of its half.
type q8x2 struct {
	qs   [64]int8
	corr [16]int32
	d    [16]float32
}

// A tileFunc sets out[4·r+i] to the dot product of weight row w[i] (nb
// blocks) with activation row r%2 of pair row x[r/2] (nb q8x2 each).
type tileFunc func(w *[4][]byte, x *[4][]q8x2, nb int, out *[32]float32)

// tileAsm are the tile kernels by weight type, where the CPU has them;
// useTile switches them off in tests.
var (
	tileAsm [Q5_0 + 1]tileFunc
	useTile = true
)

// tileMinRows is the fewest activation rows worth packing for a tile.
const tileMinRows = 4

// tileOffset is what the tile kernels add to weight type t's values to
// make them unsigned.
func tileOffset(t DType) int32 {
	switch t {
	case Q8_0:
		return 128
	case Q4_0:
		return 8
	case Q5_0:
		return 16
	}
	return 0
}

// tileKernel returns the tile kernel for m, or nil where m does not go by
// tiles.
func tileKernel(m *MatMul) tileFunc {
	if !useTile || m.Rows < tileMinRows || int(m.Type) >= len(tileAsm) {
		return nil
	}
	return tileAsm[m.Type]
}

// tileKey tells the tiled packings apart: 0 where m does not go by tiles.
func tileKey(m *MatMul) int32 {
	if tileK(m) {
		return 1
	}
	if amxQ8(m) {
		return 2
	}
	if tileKernel(m) == nil {
		return 0
	}
	return tileOffset(m.Type)
}

// packQ8x2 lays out the rows×nb activation blocks of x as pair rows of nb
// q8x2 each in out, for weights off above their values; an odd last row is
// paired with itself.
func packQ8x2(x []q8Block, rows, nb int, off int32, out []q8x2) {
	for p := range (rows + 1) / 2 {
		pair := [2]int{2 * p, min(2*p+1, rows-1)}
		for b := range nb {
			o := &out[p*nb+b]
			for h, r := range pair {
				blk := &x[r*nb+b]
				copy(o.qs[32*h:32*h+32], blk.qs[:])
				for k := range 8 {
					q := blk.qs[4*k : 4*k+4]
					o.corr[8*h+k] = -off * (int32(q[0]) + int32(q[1]) + int32(q[2]) + int32(q[3]))
					o.d[8*h+k] = blk.d
				}
			}
		}
	}
}

// unsignedQ8 sets u to the 32 values of the Q8_0, Q4_0 or Q5_0 block blk
// plus tileOffset(t).
func unsignedQ8(t DType, blk []byte, u *[32]int32) {
	switch t {
	case Q8_0:
		for j := range u {
			u[j] = int32(blk[2+j] ^ 0x80)
		}
	case Q4_0:
		for j, q := range blk[2:18] {
			u[j], u[j+16] = int32(q&15), int32(q>>4)
		}
	case Q5_0:
		qh := binary.LittleEndian.Uint32(blk[2:])
		for j, q := range blk[6:22] {
			u[j] = int32(q&15) | int32(qh>>j&1)<<4
			u[j+16] = int32(q>>4) | int32(qh>>(j+16)&1)<<4
		}
	}
}

// dotQ8t4 is the Go form of the tile kernels for weight type t, in their
// order: each lane starts at its corr, adds the unsigned weight times x
// for its four values, and is scaled and summed as laneSums and hsum8 do,
// which makes it dotQ8 of the unpacked rows bit for bit.
func dotQ8t4(t DType, w *[4][]byte, x *[4][]q8x2, nb int, out *[32]float32) {
	bs := t.RowBytes(32)
	var u [32]int32
	for r := range 8 {
		h := r % 2
		for i := range 4 {
			var acc [8]float32
			for b := range nb {
				blk := w[i][bs*b : bs*(b+1)]
				unsignedQ8(t, blk, &u)
				y := &x[r/2][b]
				dw := halfTable[binary.LittleEndian.Uint16(blk)]
				for k := range acc {
					s := y.corr[8*h+k]
					for j := 4 * k; j < 4*k+4; j++ {
						s += u[j] * int32(y.qs[32*h+j])
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
	n := m.N
	nb, rb := n/32, m.Type.RowBytes(n)
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
				tileRun(m.Type, &w, &xs, nb, &out)
				storeTile(m, &out, 2*p, min(2*c1, m.Rows), o, hi)
			}
		}
	}
}

// storeTile writes a tile's results out[4·j+i] to m.Out's row r0+j,
// column o+i, for the rows before r1 and the columns before hi; a whole
// tile goes as arrays of four, without a bounds check per result.
func storeTile(m *MatMul, out *[32]float32, r0, r1, o, hi int) {
	d := m.D
	if o+4 <= hi && r0+8 <= r1 {
		for j := range 8 {
			*(*[4]float32)(m.Out[(r0+j)*d+o:]) = *(*[4]float32)(out[4*j:])
		}
		return
	}
	for r := r0; r < min(r0+8, r1); r++ {
		res, row := out[4*(r-r0):4*(r-r0)+4], m.Out[r*d+o:r*d+min(o+4, hi)]
		for k := range row {
			row[k] = res[k]
		}
	}
}
