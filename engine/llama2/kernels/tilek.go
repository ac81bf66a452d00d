package kernels

import "encoding/binary"

// Prompts with Q4_K weights go by tiles too where the CPU has AVX-512
// VNNI (tilek_amd64.s): four weight rows times four pairs of activation
// rows, one 256-value block at a time. A block's integer sums (Σ scale ·
// values·x over its eight groups, and Σ min · the group sums of x) are
// exact, and the float step after each block is dotQ4K's, so a row's
// results are the same bits alone, in a batch, or without the tile.

// q8Kx2 is block b of two Q8_K activation rows laid out for the Q4_K
// tile: group g's 32 values of the first row then of the second at qs[64g:],
// each row's eight group sums (bsums[2j]+bsums[2j+1]), and each row's
// scale four times.
type q8Kx2 struct {
	qs [512]int8
	gs [16]int16
	d  [8]float32
}

// q4KMeta is block b of four Q4_K weight rows unpacked for the tile:
// each 6-bit scale in both halves of a dword (for VPDPWSSD), the mins as
// words, and the f16 scales d and dmin as floats.
type q4KMeta struct {
	sc   [4][8]uint32
	mn   [4][8]int16
	d    [4]float32
	dmin [4]float32
}

// A tileKFunc sets out[4·r+i] to dotQ4K of weight row w[i] (nb blocks,
// unpacked in meta) with activation row r%2 of pair row x[r/2].
type tileKFunc func(w *[4][]byte, meta []q4KMeta, x *[4][]q8Kx2, nb int, out *[32]float32)

// tileQ4K is the Q4_K tile kernel where the CPU has it; tileKMaxBlocks
// bounds the blocks of a row it takes (the unpacked scales live on the
// stack), longer rows go by rowsK.
var tileQ4K tileKFunc

const tileKMaxBlocks = 64

// tileKKernel returns the Q4_K tile kernel for m, or nil where m does not
// go by tiles.
func tileKKernel(m *MatMul) tileKFunc {
	if !useTile || m.Type != Q4_K || m.Rows < tileMinRows || m.N/256 > tileKMaxBlocks {
		return nil
	}
	return tileQ4K
}

// packQ8Kx2 lays out the rows×nb Q8_K blocks of x as pair rows of nb
// q8Kx2 each in out; an odd last row is paired with itself.
func packQ8Kx2(x []q8KBlock, rows, nb int, out []q8Kx2) {
	for p := range (rows + 1) / 2 {
		pair := [2]int{2 * p, min(2*p+1, rows-1)}
		for b := range nb {
			o := &out[p*nb+b]
			for h, r := range pair {
				blk := &x[r*nb+b]
				for g := range 8 {
					copy(o.qs[64*g+32*h:64*g+32*h+32], blk.qs[32*g:32*g+32])
					o.gs[8*h+g] = int16(blk.bsums[2*g] + blk.bsums[2*g+1])
				}
				for k := range 4 {
					o.d[4*h+k] = blk.d
				}
			}
		}
	}
}

// fillQ4KMeta unpacks the scales of the nb blocks of the four weight rows
// w into meta.
func fillQ4KMeta(w *[4][]byte, nb int, meta []q4KMeta) {
	for b := range meta[:nb] {
		mt := &meta[b]
		for i := range w {
			blk := w[i][144*b : 144*b+144]
			sc, mn := scaleMinK4(blk[4:16])
			for g := range 8 {
				mt.sc[i][g] = uint32(sc[g]) * 0x10001
				mt.mn[i][g] = int16(mn[g])
			}
			mt.d[i] = halfTable[binary.LittleEndian.Uint16(blk)]
			mt.dmin[i] = halfTable[binary.LittleEndian.Uint16(blk[2:])]
		}
	}
}

// dotQ4Kt4 is the Go form of the Q4_K tile, from the raw rows (meta
// unused): dotQ4K's integer sums and float step, which makes it dotQ4K of
// the unpacked rows bit for bit.
func dotQ4Kt4(w *[4][]byte, _ []q4KMeta, x *[4][]q8Kx2, nb int, out *[32]float32) {
	for r := range 8 {
		h := r % 2
		for i := range 4 {
			sum := float32(0)
			for b := range nb {
				blk := w[i][144*b : 144*b+144]
				y := &x[r/2][b]
				sc, mn := scaleMinK4(blk[4:16])
				isum, msum := int32(0), int32(0)
				for g := range 8 {
					s := int32(0)
					for l, q := range blk[16+32*(g/2) : 48+32*(g/2)] {
						s += int32(q>>(4*(g%2))&15) * int32(y.qs[64*g+32*h+l])
					}
					isum += int32(sc[g]) * s
					msum += int32(mn[g]) * int32(y.gs[8*h+g])
				}
				d := halfTable[binary.LittleEndian.Uint16(blk)] * y.d[4*h]
				dmin := halfTable[binary.LittleEndian.Uint16(blk[2:])] * y.d[4*h]
				sum += float32(d*float32(isum)) - float32(dmin*float32(msum))
			}
			out[4*r+i] = sum
		}
	}
}

// rowsQ4KTile computes output rows [lo, hi) of m from its pair rows x, as
// rowsQ8Tile does, unpacking a tile's weight scales once per chunk of
// activations.
func rowsQ4KTile(m *MatMul, tile tileKFunc, x []q8Kx2, lo, hi int) {
	n, d := m.N, m.D
	nb, rb := n/256, m.Type.RowBytes(n)
	pairs := (m.Rows + 1) / 2
	chunk := max(4, (1<<20)/(576*max(nb, 1))) &^ 3
	var (
		out  [32]float32
		w    [4][]byte
		xs   [4][]q8Kx2
		meta [tileKMaxBlocks]q4KMeta
	)
	for c0 := 0; c0 < pairs; c0 += chunk {
		c1 := min(c0+chunk, pairs)
		for o := lo; o < hi; o += 4 {
			for k := range w {
				r := min(o+k, hi-1)
				w[k] = m.Raw[r*rb : (r+1)*rb]
			}
			fillQ4KMeta(&w, nb, meta[:nb])
			for p := c0; p < c1; p += 4 {
				for k := range xs {
					q := min(p+k, c1-1)
					xs[k] = x[q*nb : (q+1)*nb]
				}
				tile(&w, meta[:nb], &xs, nb, &out)
				for r := 2 * p; r < min(2*p+8, 2*c1, m.Rows); r++ {
					res, row := out[4*(r-2*p):4*(r-2*p)+4], m.Out[r*d+o:r*d+min(o+4, hi)]
					for k := range row {
						row[k] = res[k]
					}
				}
			}
		}
	}
}
