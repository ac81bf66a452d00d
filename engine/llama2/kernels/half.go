package kernels

import "math"

// HalfToFloat converts IEEE binary16 bits to a float32.
func HalfToFloat(h uint16) float32 { return halfTable[h] }

var halfTable = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = halfToFloat(uint16(i))
	}
	return &t
}()

func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: man·2^-24.
	f := float32(man) * (1.0 / (1 << 24))
	if sign != 0 {
		f = -f
	}
	return f
}

// FloatToHalf converts a float32 to IEEE binary16 bits, rounding to the
// nearest value (ties to even), as the F16C instructions do.
func FloatToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xff) - 127
	man := b & 0x7fffff
	switch {
	case exp == 128: // Inf or NaN
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp > 15:
		return sign | 0x7c00
	case exp >= -14:
		// Normal: keep 10 bits of mantissa, round to nearest even.
		v := uint32(exp+15)<<10 | man>>13
		rest := man & 0x1fff
		if rest > 0x1000 || (rest == 0x1000 && v&1 == 1) {
			v++ // may carry into the exponent, up to Inf: correct
		}
		return sign | uint16(v)
	case exp >= -25:
		// Subnormal: shift the full mantissa (with its implicit 1).
		m := man | 0x800000
		shift := uint(-exp - 14 + 13)
		v := m >> shift
		rest := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rest > half || (rest == half && v&1 == 1) {
			v++
		}
		return sign | uint16(v)
	}
	return sign
}

// BFloatToFloat converts bfloat16 bits to a float32.
func BFloatToFloat(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// FloatToBFloat converts a float32 to bfloat16 bits, rounding to nearest
// even (NaN stays a quiet NaN).
func FloatToBFloat(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 64
	}
	return uint16((u + (0x7fff + (u >> 16 & 1))) >> 16)
}
