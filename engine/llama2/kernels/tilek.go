package kernels

import "encoding/binary"

// Prompts with Q4_K or Q6_K weights go by tiles too where the CPU has
// AVX-512 VNNI (tilek_amd64.s): four weight rows times four pairs of
// activation rows, one 256-value block at a time. A block's integer sums
// (Q4_K: Σ scale · values·x over its eight groups, and Σ min · the group
// sums of x; Q6_K: Σ scale · values·x over its sixteen groups) are exact,
// and the float step after each block is dotQ4K's or dotQ6K's, so a row's
// results are the same bits alone, in a batch, or without the tile.

// q8Kx2 is block b of two Q8_K activation rows laid out for the K-quant
// tiles: values 32c to 32c+31 of the first row then of the second at
// qs[64c:], each row's eight sums of 32 (bsums[2j]+bsums[2j+1]), each
// row's scale four times, and each row's sixteen sums of 16 (bsums).
type q8Kx2 struct {
	qs [512]int8
	gs [16]int16
	d  [8]float32
	bs [32]int16
}

// q6KMeta is block b of four Q6_K weight rows unpacked for the tile: each
// int8 scale as a word in both halves of a dword, -32 times each scale as
// a word (the tile multiplies the values plus 32), and the f16 scale d as
// a float.
type q6KMeta struct {
	sc  [4][16]uint32
	nsc [4][16]int16
	d   [4]float32
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

// A tileKFunc sets out[4·r+i] to dotQ4K or dotQ6K of weight row w[i] (nb
// blocks, unpacked in meta) with activation row r%2 of pair row x[r/2].
type tileKFunc[M any] func(w *[4][]byte, meta []M, x *[4][]q8Kx2, nb int, out *[32]float32)

// tileQ4K and tileQ6K are the K-quant tile kernels where the CPU has them;
// tileKMaxBlocks bounds the blocks of a row they take (the unpacked scales
// live on the stack), longer rows go by rowsK.
var (
	tileQ4K tileKFunc[q4KMeta]
	tileQ6K tileKFunc[q6KMeta]
)

const tileKMaxBlocks = 64

// tileK reports whether m goes by a K-quant tile.
func tileK(m *MatMul) bool {
	has := m.Type == Q4_K && tileQ4K != nil || m.Type == Q6_K && tileQ6K != nil
	return has && useTile && m.Rows >= tileMinRows && m.N/256 <= tileKMaxBlocks
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
				for g, v := range blk.bsums {
					o.bs[16*h+g] = int16(v)
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

// fillQ6KMeta unpacks the scales of the nb blocks of the four weight rows
// w into meta.
func fillQ6KMeta(w *[4][]byte, nb int, meta []q6KMeta) {
	for b := range meta[:nb] {
		mt := &meta[b]
		for i := range w {
			blk := w[i][210*b : 210*b+210]
			for g, v := range blk[192:208] {
				mt.sc[i][g] = uint32(uint16(int8(v))) * 0x10001
				mt.nsc[i][g] = -32 * int16(int8(v))
			}
			mt.d[i] = halfTable[binary.LittleEndian.Uint16(blk[208:])]
		}
	}
}

// dotQ6Kt4 is the Go form of the Q6_K tile, from the raw rows (meta
// unused): dotQ6K's exact integer sum (the assembly's differs in order
// only, exact too) and float step, which makes it dotQ6K of the unpacked
// rows bit for bit.
func dotQ6Kt4(w *[4][]byte, _ []q6KMeta, x *[4][]q8Kx2, nb int, out *[32]float32) {
	var q8 [256]int8
	for r := range 8 {
		h := r % 2
		for i := range 4 {
			sum := float32(0)
			for b := range nb {
				blk := w[i][210*b : 210*b+210]
				y := &x[r/2][b]
				for c := range 8 {
					copy(q8[32*c:32*c+32], y.qs[64*c+32*h:64*c+32*h+32])
				}
				sum += float32(halfTable[binary.LittleEndian.Uint16(blk[208:])] * y.d[4*h] * float32(q6KSum(blk, &q8)))
			}
			out[4*r+i] = sum
		}
	}
}

// rowsKTile computes output rows [lo, hi) of m (Q4_K or Q6_K) from its
// pair rows x, as rowsQ8Tile does, unpacking a tile's weight scales once
// per chunk of activations. The kernels are called directly, not through
// tileQ4K and tileQ6K, so that nothing here escapes to the heap.
func rowsKTile(m *MatMul, x []q8Kx2, lo, hi int) {
	n := m.N
	nb, rb := n/256, m.Type.RowBytes(n)
	pairs := (m.Rows + 1) / 2
	chunk := max(4, (1<<20)/(640*max(nb, 1))) &^ 3
	var (
		out   [32]float32
		w     [4][]byte
		xs    [4][]q8Kx2
		meta4 [tileKMaxBlocks]q4KMeta
		meta6 [tileKMaxBlocks]q6KMeta
	)
	for c0 := 0; c0 < pairs; c0 += chunk {
		c1 := min(c0+chunk, pairs)
		for o := lo; o < hi; o += 4 {
			for k := range w {
				r := min(o+k, hi-1)
				w[k] = m.Raw[r*rb : (r+1)*rb]
			}
			if m.Type == Q4_K {
				fillQ4KMeta(&w, nb, meta4[:nb])
			} else {
				fillQ6KMeta(&w, nb, meta6[:nb])
			}
			for p := c0; p < c1; p += 4 {
				for k := range xs {
					q := min(p+k, c1-1)
					xs[k] = x[q*nb : (q+1)*nb]
				}
				if m.Type == Q4_K {
					tileQ4KRun(&w, meta4[:nb], &xs, nb, &out)
				} else {
					tileQ6KRun(&w, meta6[:nb], &xs, nb, &out)
				}
				storeTile(m, &out, 2*p, min(2*c1, m.Rows), o, hi)
			}
		}
	}
}
