package kernels

import "encoding/binary"

// On CPUs with AMX-INT8 (amx_amd64.go), every product of Q8_0 weights
// with Q8_0 activations, one activation row or many, goes by AMX tiles of
// up to 16 weight rows × 16 activation rows (amx_amd64.s), in an order of
// its own: for each output, the exact integer sum s of each 32-value block
// (TDPBSSD), then, block by block, acc = acc + float32(s)·(dw·dx) with
// each of the three operations rounded to float32 (no fused multiply-add).
// A decode and a prompt use the same kernel and order, so batching still
// never changes a result on one machine; the results differ from dotQ8_0's
// (a CPU without AMX), so Q8_0 outputs are not the same bits across CPUs.

// useAMX reports whether Q8_0 products go by the AMX kernel: where the CPU
// has it (hasAMX), and in tests, which may switch it on with the Go form
// of the kernel on any CPU.
var useAMX = hasAMX

// amxQ8 reports whether m goes by the AMX kernel.
func amxQ8(m *MatMul) bool { return useAMX && m.Type == Q8_0 }

// amxBlock is block b of up to 16 Q8_0 activation rows laid out as the
// B operand of TDPBSSD: qs[k/4][4·c+k%4] is value k of row c, and d[c] is
// row c's scale (zero past the last row).
type amxBlock struct {
	qs [8][64]int8
	d  [16]float32
}

// amxConfig is the tile configuration of an AMX kernel call (LDTILECFG's
// 64-byte palette-1 layout) for m weight rows and n activation rows, in
// two sets of four tiles that take alternate blocks: tmm0 and tmm4 the
// m×n int32 sums, tmm1 and tmm5 the m×32 weight values, tmm2 and tmm6 the
// 8×4n activations, tmm3 and tmm7 the m weight blocks' first four bytes
// (their scales).
type amxConfig [64]byte

func (c *amxConfig) set(m, n int) {
	*c = amxConfig{0: 1}
	for i, colsb := range [8]int{4 * n, 32, 4 * n, 4, 4 * n, 32, 4 * n, 4} {
		binary.LittleEndian.PutUint16(c[16+2*i:], uint16(colsb))
	}
	for i, rows := range [8]int{m, m, 8, m, m, m, 8, m} {
		c[48+i] = byte(rows)
	}
}

// packAMX lays out the rows×nb activation blocks of x as groups of 16
// rows, nb amxBlocks each, in out.
func packAMX(x []q8Block, rows, nb int, out []amxBlock) {
	for g := range (rows + 15) / 16 {
		n := min(16, rows-16*g)
		for b := range nb {
			o := &out[g*nb+b]
			o.d = [16]float32{}
			for c := range n {
				blk := &x[(16*g+c)*nb+b]
				o.d[c] = blk.d
				for k := range o.qs {
					*(*[4]int8)(o.qs[k][4*c:]) = *(*[4]int8)(blk.qs[4*k:])
				}
			}
		}
	}
}

// amxTileGo is the Go form of the AMX kernel, in its order: out[r][c] is
// Q8_0 weight row r (rb bytes apart from the row before, r < m) times
// activation row c (c < n) of the nb blocks x.
func amxTileGo(w []byte, rb, m int, x []amxBlock, n, nb int, out *[16][16]float32) {
	for r := range m {
		for c := range n {
			acc := float32(0)
			for b := range nb {
				blk := w[r*rb+34*b : r*rb+34*b+34]
				y := &x[b]
				s := int32(0)
				for k, q := range blk[2:] {
					s += int32(int8(q)) * int32(y.qs[k/4][4*c+k%4])
				}
				acc = amxStep(acc, s, halfTable[binary.LittleEndian.Uint16(blk)], y.d[c])
			}
			out[r][c] = acc
		}
	}
}

// dotQ8_0AMX is Q8_0 weight row w times the activation row x in the AMX
// kernel's order, straight from the blocks: amxQ8_0x1's Go form, and the
// reference for both kernels.
func dotQ8_0AMX(w []byte, x []q8Block) float32 {
	acc := float32(0)
	for b := range x {
		blk := w[34*b : 34*b+34]
		s := int32(0)
		for j, q := range blk[2:] {
			s += int32(int8(q)) * int32(x[b].qs[j])
		}
		acc = amxStep(acc, s, halfTable[binary.LittleEndian.Uint16(blk)], x[b].d)
	}
	return acc
}

// amxTile1Go is amxTile1's Go form: out[r] is weight row r (rb bytes
// apart, r < m) times the one activation row x.
func amxTile1Go(w []byte, rb, m int, x []q8Block, out *[16]float32) {
	for r := range m {
		out[r] = dotQ8_0AMX(w[r*rb:r*rb+34*len(x)], x)
	}
}

// amxStep is one block of the AMX order: acc + float32(s)·(dw·dx), each
// operation rounded to float32 (the conversions keep Go from fusing them).
func amxStep(acc float32, s int32, dw, dx float32) float32 {
	t := float32(dw * dx)
	return acc + float32(float32(s)*t)
}

// rowsQ8AMX computes output rows [lo, hi) of m (Q8_0 weights) from its
// activations a: 16 weight rows at a time against each group of 16
// activation rows packed by packAMX, or against the one activation row's
// blocks as they are. The groups go in chunks of about 1 MiB, which stay
// in L2 while every weight row meets them.
func rowsQ8AMX(m *MatMul, a *activations, lo, hi int) {
	n, d := m.N, m.D
	nb, rb := n/32, m.Type.RowBytes(n)
	if nb == 0 {
		for r := range m.Rows {
			clear(m.Out[r*d+lo : r*d+hi])
		}
		return
	}
	var (
		cfg    amxConfig
		cm, cn int
	)
	if m.Rows == 1 {
		var out [16]float32
		for o := lo; o < hi; o += 16 {
			mr := min(16, hi-o)
			if mr != cm {
				cfg.set(mr, 1)
				cm = mr
			}
			amxTile1(&cfg, m.Raw[o*rb:(o+mr)*rb], rb, mr, a.q8[:nb], &out)
			copy(m.Out[o:o+mr], out[:mr])
		}
		return
	}
	x := a.xa
	groups := (m.Rows + 15) / 16
	chunk := max(1, (1<<20)/(576*nb))
	var out [16][16]float32
	for g0 := 0; g0 < groups; g0 += chunk {
		g1 := min(g0+chunk, groups)
		for o := lo; o < hi; o += 16 {
			mr := min(16, hi-o)
			w := m.Raw[o*rb : (o+mr)*rb]
			for g := g0; g < g1; g++ {
				nc := min(16, m.Rows-16*g)
				if mr != cm || nc != cn {
					cfg.set(mr, nc)
					cm, cn = mr, nc
				}
				amxTile(&cfg, w, rb, mr, x[g*nb:(g+1)*nb], nc, nb, &out)
				for c := range nc {
					row := m.Out[(16*g+c)*d+o:][:mr]
					for r := range row {
						row[r] = out[r][c]
					}
				}
			}
		}
	}
}
