package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
)

// DType is the element type of a weight matrix. F32 matrices are []float32
// (MatMul.W); the others are raw little-endian blocks in ggml's layouts
// (MatMul.Raw), read where they lie (a memory-mapped file) and never
// expanded.
type DType uint8

// The weight types.
const (
	F32  DType = iota
	F16        // IEEE half
	BF16       // bfloat16
	Q8_0       // blocks of 32: f16 scale, 32 int8
	Q4_0       // blocks of 32: f16 scale, 16 bytes of 4-bit values (offset 8)
	Q4_K       // super-blocks of 256: f16 d and dmin, 12 bytes of 6-bit scales and mins, 128 bytes of 4-bit values
	Q6_K       // super-blocks of 256: 128 bytes low 4 bits, 64 bytes high 2 bits, 16 int8 scales, f16 d
	Q4_1       // blocks of 32: f16 scale and offset, 16 bytes of 4-bit values (quant5.go)
	Q5_0       // blocks of 32: f16 scale, 4 bytes of fifth bits, 16 bytes of low 4 bits (offset 16)
	Q5_1       // blocks of 32: f16 scale and offset, 4 bytes of fifth bits, 16 bytes of low 4 bits
	Q5_K       // super-blocks of 256: as Q4_K plus 32 bytes of fifth bits
)

var dtypes = [...]struct {
	name         string
	block, bytes int
}{
	F32: {"F32", 1, 4}, F16: {"F16", 1, 2}, BF16: {"BF16", 1, 2},
	Q8_0: {"Q8_0", 32, 34}, Q4_0: {"Q4_0", 32, 18},
	Q4_K: {"Q4_K", 256, 144}, Q6_K: {"Q6_K", 256, 210},
	Q4_1: {"Q4_1", 32, 20}, Q5_0: {"Q5_0", 32, 22}, Q5_1: {"Q5_1", 32, 24}, Q5_K: {"Q5_K", 256, 176},
}

func (t DType) String() string {
	if int(t) < len(dtypes) {
		return dtypes[t].name
	}
	return fmt.Sprintf("DType(%d)", uint8(t))
}

// BlockSize is the number of elements per block.
func (t DType) BlockSize() int { return dtypes[t].block }

// RowBytes is the size of n elements (n a multiple of BlockSize).
func (t DType) RowBytes(n int) int { return n / dtypes[t].block * dtypes[t].bytes }

// Dequantize decodes len(out) elements of type t from raw (which starts at
// a block boundary) into out.
func Dequantize(t DType, raw []byte, out []float32) {
	le := binary.LittleEndian
	switch t {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
	case F16:
		for i := range out {
			out[i] = halfTable[le.Uint16(raw[2*i:])]
		}
	case BF16:
		for i := range out {
			out[i] = BFloatToFloat(le.Uint16(raw[2*i:]))
		}
	case Q8_0:
		for b := 0; b < len(out)/32; b++ {
			blk := raw[34*b:]
			d := halfTable[le.Uint16(blk)]
			for j := range 32 {
				out[32*b+j] = d * float32(int8(blk[2+j]))
			}
		}
	case Q4_0:
		for b := 0; b < len(out)/32; b++ {
			blk := raw[18*b:]
			d := halfTable[le.Uint16(blk)]
			for j := range 16 {
				out[32*b+j] = d * float32(int(blk[2+j]&15)-8)
				out[32*b+j+16] = d * float32(int(blk[2+j]>>4)-8)
			}
		}
	case Q4_K:
		for b := 0; b < len(out)/256; b++ {
			blk := raw[144*b:]
			d, dmin := halfTable[le.Uint16(blk)], halfTable[le.Uint16(blk[2:])]
			sc, mn := scaleMinK4(blk[4:16])
			qs := blk[16:144]
			y := out[256*b:]
			for j := range 4 {
				d1, m1 := d*float32(sc[2*j]), dmin*float32(mn[2*j])
				d2, m2 := d*float32(sc[2*j+1]), dmin*float32(mn[2*j+1])
				for l := range 32 {
					y[64*j+l] = d1*float32(qs[32*j+l]&15) - m1
					y[64*j+32+l] = d2*float32(qs[32*j+l]>>4) - m2
				}
			}
		}
	case Q6_K:
		for b := 0; b < len(out)/256; b++ {
			blk := raw[210*b:]
			d := halfTable[le.Uint16(blk[208:])]
			y := out[256*b:]
			q := q6Values(blk)
			for i := range 256 {
				y[i] = d * float32(int8(blk[192+i/16])) * float32(q[i])
			}
		}
	case Q4_1, Q5_0, Q5_1:
		dequantizeLegacy(t, raw, out)
	case Q5_K:
		dequantizeQ5K(raw, out)
	}
}

// scaleMinK4 unpacks Q4_K's eight 6-bit scales and mins.
func scaleMinK4(s []byte) (sc, mn [8]uint8) {
	for j := range 4 {
		sc[j] = s[j] & 63
		mn[j] = s[j+4] & 63
		sc[j+4] = s[j+8]&15 | (s[j]>>6)<<4
		mn[j+4] = s[j+8]>>4 | (s[j+4]>>6)<<4
	}
	return sc, mn
}

// q6Values unpacks a Q6_K block's 256 values, -32..31, in element order.
func q6Values(blk []byte) (q [256]int8) {
	for n := range 2 {
		ql, qh := blk[64*n:], blk[128+32*n:]
		y := q[128*n:]
		for l := range 32 {
			y[l] = int8(ql[l]&15|(qh[l]&3)<<4) - 32
			y[l+32] = int8(ql[l+32]&15|(qh[l]>>2&3)<<4) - 32
			y[l+64] = int8(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
			y[l+96] = int8(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
		}
	}
	return q
}

// Activations quantized for the integer dot products, as ggml quantizes
// them: Q8_0 rows for Q8_0 and Q4_0 weights, Q8_K rows for the K-quants,
// and F16/BF16-rounded floats for F16/BF16 weights.
type q8Block struct {
	d  float32
	qs [32]int8
}

type q8KBlock struct {
	d     float32
	qs    [256]int8
	bsums [16]int32
}

func quantizeQ8_0(x []float32, out []q8Block) {
	for b := range out {
		out[b].d = halfTable[FloatToHalf(roundQ8(x[32*b:32*b+32], &out[b].qs))]
	}
}

// roundQ8 rounds 32 values to int8 steps of their largest magnitude / 127
// and returns that step (not rounded to f16).
func roundQ8(xs []float32, qs *[32]int8) float32 {
	amax := float32(0)
	for _, v := range xs {
		amax = max(amax, abs32(v))
	}
	id := float32(0)
	if amax != 0 {
		id = 127 / amax
	}
	for j, v := range xs {
		qs[j] = roundInt8(float32(v * id))
	}
	return amax / 127
}

// roundInt8 is int8(math.RoundToEven(float64(v))) for |v| < 2^22, faster:
// adding 1.5·2^23 leaves v rounded to an integer (ties to even) in the low
// bits of the float32 sum.
func roundInt8(v float32) int8 {
	const magic = 0x1.8p23
	return int8(int32(math.Float32bits(v+magic)) - 0x4b400000)
}

func quantizeQ8K(x []float32, out []q8KBlock) {
	for b := range out {
		xs := x[256*b : 256*b+256]
		var amax, mx float32
		for _, v := range xs {
			if a := abs32(v); a > amax {
				amax, mx = a, v
			}
		}
		o := &out[b]
		if amax == 0 {
			*o = q8KBlock{}
			continue
		}
		iscale := -127 / mx
		for j, v := range xs {
			o.qs[j] = roundInt8(min(127, float32(iscale*v)))
		}
		for j := range 16 {
			s := int32(0)
			for _, q := range o.qs[16*j : 16*j+16] {
				s += int32(q)
			}
			o.bsums[j] = s
		}
		o.d = 1 / iscale
	}
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// The Q8_0, Q4_0 and Q5_0 dot products share one float order, that of the
// assembly (qdot_amd64.s), so both give the same bits: each block's 32
// integer products are summed exactly in eight lanes of four consecutive
// values; each lane, as a float, is multiplied by the block's scale
// (d_w·d_x) and added to its own float accumulator; the eight accumulators
// are summed last (hsum8).

// laneSums adds one block's scaled lane sums to acc: l holds its 32
// integer products w_j·x_j.
func laneSums(acc *[8]float32, l *[32]int32, scale float32) {
	for k := range acc {
		s := l[4*k] + l[4*k+1] + l[4*k+2] + l[4*k+3]
		acc[k] += float32(float32(s) * scale)
	}
}

// hsum8 sums the eight accumulators in the assembly's order.
func hsum8(a *[8]float32) float32 {
	return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

func dotQ8_0(w []byte, x []q8Block) float32 {
	var acc [8]float32
	var l [32]int32
	for b := range x {
		blk := w[34*b : 34*b+34]
		for j, q := range blk[2:] {
			l[j] = int32(int8(q)) * int32(x[b].qs[j])
		}
		laneSums(&acc, &l, halfTable[binary.LittleEndian.Uint16(blk)]*x[b].d)
	}
	return hsum8(&acc)
}

func dotQ4_0(w []byte, x []q8Block) float32 {
	var acc [8]float32
	var l [32]int32
	for b := range x {
		blk := w[18*b : 18*b+18]
		for j, q := range blk[2:] {
			l[j] = (int32(q&15) - 8) * int32(x[b].qs[j])
			l[j+16] = (int32(q>>4) - 8) * int32(x[b].qs[j+16])
		}
		laneSums(&acc, &l, halfTable[binary.LittleEndian.Uint16(blk)]*x[b].d)
	}
	return hsum8(&acc)
}

// dotQ8 is dotQ8_0, dotQ4_0 or dotQ5_0 by the weight type t.
func dotQ8(t DType, w []byte, x []q8Block) float32 {
	switch t {
	case Q4_0:
		return dotQ4_0(w, x)
	case Q5_0:
		return dotQ5_0(w, x)
	}
	return dotQ8_0(w, x)
}

// dotQ8x4 is dotQ8 of x with the four weight rows at w, stride bytes
// apart.
func dotQ8x4(t DType, w []byte, stride int, x []q8Block, out *[4]float32) {
	rb := t.RowBytes(32 * len(x))
	for k := range out {
		out[k] = dotQ8(t, w[k*stride:k*stride+rb], x)
	}
}

func dotQ4K(w []byte, x []q8KBlock) float32 {
	sum := float32(0)
	for b := range x {
		blk := w[144*b : 144*b+144]
		y := &x[b]
		sc, mn := scaleMinK4(blk[4:16])
		qs := blk[16:144]
		isum, msum := q4KSum(qs, &y.qs, &sc), int32(0)
		for j := range 8 {
			msum += int32(mn[j]) * (y.bsums[2*j] + y.bsums[2*j+1])
		}
		d := halfTable[binary.LittleEndian.Uint16(blk)] * y.d
		dmin := halfTable[binary.LittleEndian.Uint16(blk[2:])] * y.d
		// Each product rounded on its own (no fused multiply-add), as the
		// assembly (qdot_amd64.s) rounds it.
		sum += float32(d*float32(isum)) - float32(dmin*float32(msum))
	}
	return sum
}

// q4KSum returns Σ sc[g]·(group g's values · q8's) over the eight groups
// of 32 values of a Q4_K block's 128 bytes qs (exact).
func q4KSum(qs []byte, q8 *[256]int8, sc *[8]uint8) int32 {
	isum := int32(0)
	for j := range 4 {
		lo, hi := int32(0), int32(0)
		for l, q := range qs[32*j : 32*j+32] {
			lo += int32(q&15) * int32(q8[64*j+l])
			hi += int32(q>>4) * int32(q8[64*j+32+l])
		}
		isum += int32(sc[2*j])*lo + int32(sc[2*j+1])*hi
	}
	return isum
}

func dotQ6K(w []byte, x []q8KBlock) float32 {
	sum := float32(0)
	for b := range x {
		blk := w[210*b : 210*b+210]
		y := &x[b]
		isum := q6KSum(blk, &y.qs)
		sum += float32(halfTable[binary.LittleEndian.Uint16(blk[208:])] * y.d * float32(isum))
	}
	return sum
}

// dotK is dotQ4K or dotQ6K by the weight type t. The block terms are
// added to the row's sum block by block in order, in the Go code and in
// the assembly alike (qdot_amd64.s), so both give the same bits.
func dotK(t DType, w []byte, x []q8KBlock) float32 {
	if t == Q6_K {
		return dotQ6K(w, x)
	}
	return dotQ4K(w, x)
}

// dotQ4Kr4 is dotQ4K of the weight row w with the four activation rows
// of nb blocks each in x.
func dotQ4Kr4(w []byte, x []q8KBlock, nb int, out *[4]float32) {
	for k := range out {
		out[k] = dotQ4K(w, x[k*nb:(k+1)*nb])
	}
}

// dotKx4 is dotK of x with the four weight rows at w, stride bytes apart.
func dotKx4(t DType, w []byte, stride int, x []q8KBlock, out *[4]float32) {
	rb := t.RowBytes(256 * len(x))
	for k := range out {
		out[k] = dotK(t, w[k*stride:k*stride+rb], x)
	}
}

// q6KSum returns Σ scale[g]·(group g's values · q8's) over the sixteen
// groups of 16 values of a Q6_K block (exact).
func q6KSum(blk []byte, q8 *[256]int8) int32 {
	var s [16]int32
	for n := range 2 {
		ql, qh, q8 := blk[64*n:64*n+64], blk[128+32*n:128+32*n+32], q8[128*n:128*n+128]
		g := s[8*n : 8*n+8]
		for l := range 32 {
			is := l / 16
			g[is] += int32(int8(ql[l]&15|(qh[l]&3)<<4)-32) * int32(q8[l])
			g[is+2] += int32(int8(ql[l+32]&15|(qh[l]>>2&3)<<4)-32) * int32(q8[l+32])
			g[is+4] += int32(int8(ql[l]>>4|(qh[l]>>4&3)<<4)-32) * int32(q8[l+64])
			g[is+6] += int32(int8(ql[l+32]>>4|(qh[l]>>6&3)<<4)-32) * int32(q8[l+96])
		}
	}
	isum := int32(0)
	for g, v := range s {
		isum += int32(int8(blk[192+g])) * v
	}
	return isum
}

func dotF16(w []byte, x []float32) float32 {
	var s [4]float32
	n := len(x) &^ 3
	for i := 0; i < n; i += 4 {
		s[0] += halfTable[binary.LittleEndian.Uint16(w[2*i:])] * x[i]
		s[1] += halfTable[binary.LittleEndian.Uint16(w[2*i+2:])] * x[i+1]
		s[2] += halfTable[binary.LittleEndian.Uint16(w[2*i+4:])] * x[i+2]
		s[3] += halfTable[binary.LittleEndian.Uint16(w[2*i+6:])] * x[i+3]
	}
	for i := n; i < len(x); i++ {
		s[0] += halfTable[binary.LittleEndian.Uint16(w[2*i:])] * x[i]
	}
	return (s[0] + s[1]) + (s[2] + s[3])
}

func dotBF16(w []byte, x []float32) float32 {
	var s [4]float32
	n := len(x) &^ 3
	for i := 0; i < n; i += 4 {
		s[0] += BFloatToFloat(binary.LittleEndian.Uint16(w[2*i:])) * x[i]
		s[1] += BFloatToFloat(binary.LittleEndian.Uint16(w[2*i+2:])) * x[i+1]
		s[2] += BFloatToFloat(binary.LittleEndian.Uint16(w[2*i+4:])) * x[i+2]
		s[3] += BFloatToFloat(binary.LittleEndian.Uint16(w[2*i+6:])) * x[i+3]
	}
	for i := n; i < len(x); i++ {
		s[0] += BFloatToFloat(binary.LittleEndian.Uint16(w[2*i:])) * x[i]
	}
	return (s[0] + s[1]) + (s[2] + s[3])
}
