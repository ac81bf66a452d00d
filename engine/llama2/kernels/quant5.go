package kernels

import (
	"encoding/binary"
	"math"
)

// The legacy types with an offset (Q4_1, Q5_1), the 5-bit ones (Q5_0,
// Q5_1) and Q5_K, in ggml's block layouts. llama.cpp's Q4_K_M and Q5_K_M
// files fall back to Q5_0 and Q5_1 for rows whose width is not a multiple
// of 256 (Qwen2.5-0.5B's 896, for one).
//
//	Q4_1: f16 d, f16 m, 16 bytes of 4-bit values; x = d·q + m
//	Q5_0: f16 d, 4 bytes of fifth bits, 16 bytes of low 4 bits; x = d·(q - 16)
//	Q5_1: f16 d, f16 m, 4 bytes of fifth bits, 16 bytes of low 4 bits; x = d·q + m
//	Q5_K: f16 d and dmin, 12 bytes of 6-bit scales and mins (as Q4_K),
//	      32 bytes of fifth bits, 128 bytes of low 4 bits

// q8_1Block is an activation block for Q4_1 and Q5_1 weights: Q8_0's
// block plus s, d times the sum of the values (both rounded to f16).
type q8_1Block struct {
	d, s float32
	qs   [32]int8
}

func quantizeQ8_1(x []float32, out []q8_1Block) {
	for b := range out {
		d := roundQ8(x[32*b:32*b+32], &out[b].qs)
		sum := int32(0)
		for _, q := range out[b].qs {
			sum += int32(q)
		}
		out[b].d = halfTable[FloatToHalf(d)]
		out[b].s = halfTable[FloatToHalf(d*float32(sum))]
	}
}

// legacy5 returns the 32 values of a 16-byte nibble array (value j in the
// low nibble of byte j, value j+16 in its high nibble) with their fifth
// bits from qh (bit j for value j; 0 for Q4_1).
func legacy5(qs []byte, qh uint32) (q [32]int32) {
	for j := range 16 {
		q[j] = int32(qs[j]&15) | int32(qh>>j&1)<<4
		q[j+16] = int32(qs[j]>>4) | int32(qh>>(j+16)&1)<<4
	}
	return q
}

// legacyBlock decodes one Q4_1, Q5_0 or Q5_1 block: its scale, its offset
// (m, or -16·d folded into the values for Q5_0) and its unsigned values.
func legacyBlock(t DType, blk []byte) (d, m float32, q [32]int32, bias int32) {
	le := binary.LittleEndian
	d = halfTable[le.Uint16(blk)]
	switch t {
	case Q4_1:
		return d, halfTable[le.Uint16(blk[2:])], legacy5(blk[4:20], 0), 0
	case Q5_0:
		return d, 0, legacy5(blk[6:22], le.Uint32(blk[2:])), 16
	default: // Q5_1
		return d, halfTable[le.Uint16(blk[2:])], legacy5(blk[8:24], le.Uint32(blk[4:])), 0
	}
}

func dequantizeLegacy(t DType, raw []byte, out []float32) {
	size := dtypes[t].bytes
	for b := 0; b < len(out)/32; b++ {
		d, m, q, bias := legacyBlock(t, raw[size*b:])
		for j, v := range q {
			out[32*b+j] = d*float32(v-bias) + m
		}
	}
}

// dotQ5_0 is Q5_0 weights times Q8_0 activations, in dotQ8_0's order.
func dotQ5_0(w []byte, x []q8Block) float32 {
	var acc [8]float32
	var l [32]int32
	for b := range x {
		blk := w[22*b : 22*b+22]
		qh, qs, y := binary.LittleEndian.Uint32(blk[2:]), blk[6:22], &x[b].qs
		for j, q := range qs {
			lo := int32(q&15) | int32(qh>>j&1)<<4
			hi := int32(q>>4) | int32(qh>>(j+16)&1)<<4
			l[j] = (lo - 16) * int32(y[j])
			l[j+16] = (hi - 16) * int32(y[j+16])
		}
		laneSums(&acc, &l, halfTable[binary.LittleEndian.Uint16(blk)]*x[b].d)
	}
	return hsum8(&acc)
}

// dotQ8_1 is Q4_1 or Q5_1 weights times Q8_1 activations: the scaled
// integer sums, plus each block's offset times its activations' sum.
func dotQ8_1(t DType, w []byte, x []q8_1Block) float32 {
	size := dtypes[t].bytes
	sum, offsets := float32(0), float32(0)
	for b := range x {
		d, m, q, _ := legacyBlock(t, w[size*b:])
		s := int32(0)
		for j, v := range q {
			s += v * int32(x[b].qs[j])
		}
		sum += float32(s) * (d * x[b].d)
		offsets += m * x[b].s
	}
	return sum + offsets
}

// q5KValues unpacks a Q5_K block's 256 values, 0..31, in element order.
func q5KValues(blk []byte) (q [256]int32) {
	qh, qs := blk[16:48], blk[48:176]
	for j := range 4 {
		for l := range 32 {
			q[64*j+l] = int32(qs[32*j+l]&15) | int32(qh[l]>>(2*j)&1)<<4
			q[64*j+32+l] = int32(qs[32*j+l]>>4) | int32(qh[l]>>(2*j+1)&1)<<4
		}
	}
	return q
}

func dequantizeQ5K(raw []byte, out []float32) {
	le := binary.LittleEndian
	for b := 0; b < len(out)/256; b++ {
		blk := raw[176*b:]
		d, dmin := halfTable[le.Uint16(blk)], halfTable[le.Uint16(blk[2:])]
		sc, mn := scaleMinK4(blk[4:16])
		q := q5KValues(blk)
		for i, v := range q {
			out[256*b+i] = d*float32(sc[i/32])*float32(v) - dmin*float32(mn[i/32])
		}
	}
}

// dotQ5K is Q5_K weights times Q8_K activations, computed as dotQ4K is.
func dotQ5K(w []byte, x []q8KBlock) float32 {
	le := binary.LittleEndian
	sum := float32(0)
	for b := range x {
		blk := w[176*b : 176*b+176]
		y := &x[b]
		sc, mn := scaleMinK4(blk[4:16])
		q := q5KValues(blk)
		isum, msum := int32(0), int32(0)
		for g := range 8 {
			s := int32(0)
			for l := 32 * g; l < 32*g+32; l++ {
				s += q[l] * int32(y.qs[l])
			}
			isum += int32(sc[g]) * s
			msum += int32(mn[g]) * (y.bsums[2*g] + y.bsums[2*g+1])
		}
		d := halfTable[le.Uint16(blk)] * y.d
		dmin := halfTable[le.Uint16(blk[2:])] * y.d
		sum += d*float32(isum) - dmin*float32(msum)
	}
	return sum
}

// quantizeLegacy encodes x as Q4_1, Q5_0 or Q5_1 by rounding to nearest
// (Quantize's encoders are for test files).
func quantizeLegacy(t DType, x []float32, out []byte) {
	le := binary.LittleEndian
	size := dtypes[t].bytes
	for b := 0; b < len(x)/32; b++ {
		xs, o := x[32*b:32*b+32], out[size*b:size*b+size]
		var d, m float32
		levels := float32(31)
		if t == Q4_1 {
			levels = 15
		}
		if t == Q5_0 { // symmetric, as Q4_0: the largest magnitude maps to -16
			var amax, mx float32
			for _, v := range xs {
				if a := abs32(v); a > amax {
					amax, mx = a, v
				}
			}
			d, m = mx/-16, -16*(mx/-16)
		} else {
			lo, hi := xs[0], xs[0]
			for _, v := range xs {
				lo, hi = min(lo, v), max(hi, v)
			}
			d, m = (hi-lo)/levels, lo
		}
		d = HalfToFloat(FloatToHalf(d))
		var q [32]uint32
		for j, v := range xs {
			if d != 0 {
				q[j] = uint32(min(levels, max(0, float32(math.Round(float64((v-m)/d))))))
			}
		}
		le.PutUint16(o, FloatToHalf(d))
		var qh uint32
		for j := range 32 {
			qh |= q[j] >> 4 << j
		}
		qs := o[size-16:]
		for j := range 16 {
			qs[j] = byte(q[j]&15 | (q[j+16]&15)<<4)
		}
		switch t {
		case Q4_1:
			le.PutUint16(o[2:], FloatToHalf(m))
		case Q5_0:
			le.PutUint32(o[2:], qh)
		case Q5_1:
			le.PutUint16(o[2:], FloatToHalf(m))
			le.PutUint32(o[4:], qh)
		}
	}
}

func quantizeQ5KBlock(x []float32, o []byte) {
	q := quantizeKScaleMin(x, o[:16], 31)
	qh, qs := o[16:48], o[48:176]
	for j := range 4 {
		for l := range 32 {
			lo, hi := q[64*j+l], q[64*j+32+l]
			qs[32*j+l] = lo&15 | (hi&15)<<4
			qh[l] |= lo>>4<<(2*j) | hi>>4<<(2*j+1)
		}
	}
}
