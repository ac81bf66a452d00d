//go:build amd64 && !purego

package kernels

import "unsafe"

// The quantized dot products of qdot_amd64.s, used when the CPU has AVX2,
// FMA and F16C (hasQuantAVX2); their results are bit for bit those of
// dotQ8_0, dotQ4_0, dotQ5_0, dotQ4K and dotQ6K (the x4 forms: of each of
// four rows).

//go:noescape
func dotQ8_0AVX(w *byte, x *q8Block, nb int) float32

//go:noescape
func dotQ8_0x4AVX(w *byte, stride int, x *q8Block, nb int, out *[4]float32)

//go:noescape
func dotQ4_0AVX(w *byte, x *q8Block, nb int) float32

//go:noescape
func dotQ4_0x4AVX(w *byte, stride int, x *q8Block, nb int, out *[4]float32)

//go:noescape
func dotQ5_0AVX(w *byte, x *q8Block, nb int) float32

//go:noescape
func dotQ5_0x4AVX(w *byte, stride int, x *q8Block, nb int, out *[4]float32)

//go:noescape
func dotQ4KAVX(w *byte, x *q8KBlock, nb int) float32

//go:noescape
func dotQ4Kx4AVX(w *byte, stride int, x *q8KBlock, nb int, out *[4]float32)

//go:noescape
func dotQ6KAVX(w *byte, x *q8KBlock, nb int) float32

//go:noescape
func dotQ6Kx4AVX(w *byte, stride int, x *q8KBlock, nb int, out *[4]float32)

//go:noescape
func dotQ4Kr4AVX(w *byte, x *q8KBlock, xstride int, nb int, out *[4]float32)

// hasQuantAVX2 reports whether the assembly quantized dot products can run:
// AVX2 with the OS saving YMM (hasAVX2FMA) and F16C for the block scales.
var hasQuantAVX2 = func() bool {
	_, _, c1, _ := cpuid(1, 0)
	return hasAVX2FMA && c1&(1<<29) != 0
}()

func init() {
	// The assembly reads x as packed 36-byte blocks, d first.
	if unsafe.Sizeof(q8Block{}) != 36 || unsafe.Offsetof(q8Block{}.qs) != 4 {
		panic("kernels: q8Block layout changed")
	}
	// And x as packed 324-byte Q8_K blocks: d, the values, the sums.
	if unsafe.Sizeof(q8KBlock{}) != 324 || unsafe.Offsetof(q8KBlock{}.qs) != 4 || unsafe.Offsetof(q8KBlock{}.bsums) != 260 {
		panic("kernels: q8KBlock layout changed")
	}
}

// legacyAsm are the assembly dot products of the Q8_0-activation types,
// indexed by weight type: one row, and four rows stride bytes apart.
var legacyAsm = [...]struct {
	one  func(w *byte, x *q8Block, nb int) float32
	four func(w *byte, stride int, x *q8Block, nb int, out *[4]float32)
}{
	Q8_0: {dotQ8_0AVX, dotQ8_0x4AVX},
	Q4_0: {dotQ4_0AVX, dotQ4_0x4AVX},
	Q5_0: {dotQ5_0AVX, dotQ5_0x4AVX},
}

// dotQ8Fast is dotQ8 (Q8_0, Q4_0 or Q5_0 weights times Q8_0
// activations), in assembly where the CPU allows.
func dotQ8Fast(t DType, w []byte, x []q8Block) float32 {
	if !hasQuantAVX2 || len(x) == 0 {
		return dotQ8(t, w, x)
	}
	_ = w[t.RowBytes(32*len(x))-1]
	return legacyAsm[t].one(&w[0], &x[0], len(x))
}

// dotQ8x4Fast sets out to the dot products of x with the four weight rows
// at w, stride bytes apart.
func dotQ8x4Fast(t DType, w []byte, stride int, x []q8Block, out *[4]float32) {
	if !hasQuantAVX2 || len(x) == 0 {
		dotQ8x4(t, w, stride, x, out)
		return
	}
	_ = w[3*stride+t.RowBytes(32*len(x))-1]
	legacyAsm[t].four(&w[0], stride, &x[0], len(x), out)
}

// dotKFast is dotK (Q4_K or Q6_K weights times Q8_K activations), in
// assembly where the CPU allows.
func dotKFast(t DType, w []byte, x []q8KBlock) float32 {
	if !hasQuantAVX2 || len(x) == 0 {
		return dotK(t, w, x)
	}
	_ = w[t.RowBytes(256*len(x))-1]
	if t == Q6_K {
		return dotQ6KAVX(&w[0], &x[0], len(x))
	}
	return dotQ4KAVX(&w[0], &x[0], len(x))
}

// dotKx4Fast sets out to the dot products of x with the four Q4_K or Q6_K
// weight rows at w, stride bytes apart.
func dotKx4Fast(t DType, w []byte, stride int, x []q8KBlock, out *[4]float32) {
	if !hasQuantAVX2 || len(x) == 0 {
		dotKx4(t, w, stride, x, out)
		return
	}
	_ = w[3*stride+t.RowBytes(256*len(x))-1]
	if t == Q6_K {
		dotQ6Kx4AVX(&w[0], stride, &x[0], len(x), out)
		return
	}
	dotQ4Kx4AVX(&w[0], stride, &x[0], len(x), out)
}

// dotQ4Kr4Fast sets out to the dot products of the Q4_K weight row w with
// the four activation rows of nb blocks each in x (packed).
func dotQ4Kr4Fast(w []byte, x []q8KBlock, nb int, out *[4]float32) {
	if !hasQuantAVX2 || nb == 0 {
		dotQ4Kr4(w, x, nb, out)
		return
	}
	_ = w[Q4_K.RowBytes(256*nb)-1]
	_ = x[4*nb-1]
	dotQ4Kr4AVX(&w[0], &x[0], 324*nb, nb, out)
}
