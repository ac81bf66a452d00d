package kernels

import (
	"encoding/binary"
	"math"
)

// Quantize encodes x (a multiple of t's block size) as t. The encoders are
// plain round-to-nearest ones, for writing test files; they are not
// llama.cpp's error-minimising quantizers, but any encoding they produce is
// a valid block that every reader decodes the same way.
func Quantize(t DType, x []float32) []byte {
	le := binary.LittleEndian
	out := make([]byte, t.RowBytes(len(x)))
	switch t {
	case F32:
		for i, v := range x {
			le.PutUint32(out[4*i:], math.Float32bits(v))
		}
	case F16:
		for i, v := range x {
			le.PutUint16(out[2*i:], FloatToHalf(v))
		}
	case BF16:
		for i, v := range x {
			le.PutUint16(out[2*i:], FloatToBFloat(v))
		}
	case Q8_0:
		for b := 0; b < len(x)/32; b++ {
			var blk [1]q8Block
			quantizeQ8_0(x[32*b:32*b+32], blk[:])
			o := out[34*b:]
			le.PutUint16(o, FloatToHalf(blk[0].d))
			for j, q := range blk[0].qs {
				o[2+j] = byte(q)
			}
		}
	case Q4_0:
		for b := 0; b < len(x)/32; b++ {
			xs := x[32*b : 32*b+32]
			var amax, mx float32
			for _, v := range xs {
				if a := abs32(v); a > amax {
					amax, mx = a, v
				}
			}
			d := mx / -8
			id := float32(0)
			if d != 0 {
				id = 1 / d
			}
			o := out[18*b:]
			le.PutUint16(o, FloatToHalf(d))
			q := func(v float32) byte { return byte(min(15, max(0, int(v*id+8.5)))) }
			for j := range 16 {
				o[2+j] = q(xs[j]) | q(xs[j+16])<<4
			}
		}
	case Q4_K:
		for b := 0; b < len(x)/256; b++ {
			quantizeQ4KBlock(x[256*b:256*b+256], out[144*b:144*b+144])
		}
	case Q6_K:
		for b := 0; b < len(x)/256; b++ {
			quantizeQ6KBlock(x[256*b:256*b+256], out[210*b:210*b+210])
		}
	case Q4_1, Q5_0, Q5_1:
		quantizeLegacy(t, x, out)
	case Q5_K:
		for b := 0; b < len(x)/256; b++ {
			quantizeQ5KBlock(x[256*b:256*b+256], out[176*b:176*b+176])
		}
	}
	return out
}

func quantizeQ4KBlock(x []float32, o []byte) {
	q := quantizeKScaleMin(x, o[:16], 15)
	qs := o[16:144]
	for j := range 4 {
		for l := range 32 {
			qs[32*j+l] = q[64*j+l] | q[64*j+32+l]<<4
		}
	}
}

// quantizeKScaleMin writes the f16 d and dmin and the packed 6-bit scales
// and mins of a Q4_K or Q5_K block (16 bytes) and returns its values,
// 0..levels: value = d·scale·q - dmin·min per 32 elements.
func quantizeKScaleMin(x []float32, o []byte, levels float32) (q [256]uint8) {
	var scale, mins [8]float32
	var maxScale, maxMin float32
	for j := range 8 {
		lo, hi := float32(0), float32(0)
		for _, v := range x[32*j : 32*j+32] {
			lo, hi = min(lo, v), max(hi, v)
		}
		scale[j], mins[j] = (hi-lo)/levels, -lo
		maxScale, maxMin = max(maxScale, scale[j]), max(maxMin, mins[j])
	}
	d, dmin := maxScale/63, maxMin/63
	d, dmin = HalfToFloat(FloatToHalf(d)), HalfToFloat(FloatToHalf(dmin))
	var sc, mn [8]uint8
	for j := range 8 {
		if d > 0 {
			sc[j] = uint8(min(63, math.Round(float64(scale[j]/d))))
		}
		if dmin > 0 {
			mn[j] = uint8(min(63, math.Round(float64(mins[j]/dmin))))
		}
	}
	binary.LittleEndian.PutUint16(o, FloatToHalf(d))
	binary.LittleEndian.PutUint16(o[2:], FloatToHalf(dmin))
	s := o[4:16]
	for j := range 4 {
		s[j] = sc[j] | (sc[j+4]>>4)<<6
		s[j+4] = mn[j] | (mn[j+4]>>4)<<6
		s[j+8] = sc[j+4]&15 | (mn[j+4]&15)<<4
	}
	for j := range 8 {
		ds, m := d*float32(sc[j]), dmin*float32(mn[j])
		for l := range 32 {
			if ds > 0 {
				q[32*j+l] = uint8(min(float64(levels), max(0, math.Round(float64((x[32*j+l]+m)/ds)))))
			}
		}
	}
	return q
}

func quantizeQ6KBlock(x []float32, o []byte) {
	var scale [16]float32
	var amax float32
	for g := range 16 {
		m := float32(0)
		for _, v := range x[16*g : 16*g+16] {
			m = max(m, abs32(v))
		}
		scale[g] = m / 31
		amax = max(amax, scale[g])
	}
	d := HalfToFloat(FloatToHalf(amax / 127))
	var q [256]int
	for g := range 16 {
		sc := int8(0)
		if d > 0 {
			sc = int8(min(127, math.Round(float64(scale[g]/d))))
		}
		o[192+g] = byte(sc)
		for l := range 16 {
			v := 0
			if sc != 0 {
				v = int(math.Round(float64(x[16*g+l] / (d * float32(sc)))))
			}
			q[16*g+l] = min(31, max(-32, v)) + 32
		}
	}
	binary.LittleEndian.PutUint16(o[208:], FloatToHalf(d))
	for n := range 2 {
		ql, qh, y := o[64*n:], o[128+32*n:], q[128*n:]
		for l := range 32 {
			q1, q2, q3, q4 := y[l], y[l+32], y[l+64], y[l+96]
			ql[l] = byte(q1&15 | (q3&15)<<4)
			ql[l+32] = byte(q2&15 | (q4&15)<<4)
			qh[l] = byte(q1>>4 | (q2>>4)<<2 | (q3>>4)<<4 | (q4>>4)<<6)
		}
	}
}
