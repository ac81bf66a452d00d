//go:build amd64 && !purego

package kernels

import "unsafe"

// The tiles of tile_amd64.s: dotQ8t4 in AVX-512 VNNI assembly.
//
//go:noescape
func dotQ8_0t4VNNI(w0, w1, w2, w3 *byte, x0, x1, x2, x3 *q8x2, nb int, out *[32]float32)

//go:noescape
func dotQ4_0t4VNNI(w0, w1, w2, w3 *byte, x0, x1, x2, x3 *q8x2, nb int, out *[32]float32)

//go:noescape
func dotQ5_0t4VNNI(w0, w1, w2, w3 *byte, x0, x1, x2, x3 *q8x2, nb int, out *[32]float32)

// hasVNNI reports whether the CPU has AVX-512 F, BW, VL and VNNI, and
// F16C, and the OS saves the ZMM registers.
var hasVNNI = func() bool {
	if !hasQuantAVX2 {
		return false
	}
	_, b7, c7, _ := cpuid(7, 0)
	const f, bw, vl, vnni = 1 << 16, 1 << 30, 1 << 31, 1 << 11
	// XCR0: SSE, AVX, opmask, ZMM upper halves, ZMM16-31.
	return b7&(f|bw|vl) == f|bw|vl && c7&vnni != 0 && xgetbv0()&0xe6 == 0xe6
}()

func init() {
	// The assembly reads x as packed 192-byte pairs: values, lane starts,
	// scales.
	if unsafe.Sizeof(q8x2{}) != 192 || unsafe.Offsetof(q8x2{}.corr) != 64 || unsafe.Offsetof(q8x2{}.d) != 128 {
		panic("kernels: q8x2 layout changed")
	}
	if hasVNNI {
		for _, t := range []DType{Q8_0, Q4_0, Q5_0} {
			tileAsm[t] = func(w *[4][]byte, x *[4][]q8x2, nb int, out *[32]float32) { tileRun(t, w, x, nb, out) }
		}
	}
}

// tileRun runs the assembly tile for weight type t, a direct call (not
// through tileAsm's func values) so that its arguments stay on the
// caller's stack.
func tileRun(t DType, w *[4][]byte, x *[4][]q8x2, nb int, out *[32]float32) {
	if nb == 0 {
		*out = [32]float32{}
		return
	}
	rb := t.RowBytes(32 * nb)
	for k := range 4 {
		_ = w[k][rb-1]
		_ = x[k][nb-1]
	}
	switch t {
	case Q8_0:
		dotQ8_0t4VNNI(&w[0][0], &w[1][0], &w[2][0], &w[3][0], &x[0][0], &x[1][0], &x[2][0], &x[3][0], nb, out)
	case Q4_0:
		dotQ4_0t4VNNI(&w[0][0], &w[1][0], &w[2][0], &w[3][0], &x[0][0], &x[1][0], &x[2][0], &x[3][0], nb, out)
	case Q5_0:
		dotQ5_0t4VNNI(&w[0][0], &w[1][0], &w[2][0], &w[3][0], &x[0][0], &x[1][0], &x[2][0], &x[3][0], nb, out)
	default:
		panic("kernels: no tile kernel for " + t.String())
	}
}

// dotQ4Kt4VNNI and dotQ6Kt4VNNI are dotQ4Kt4 and dotQ6Kt4 in AVX-512
// VNNI assembly (tilek_amd64.s), with the weight rows' scales unpacked in
// meta.
//
//go:noescape
func dotQ4Kt4VNNI(w0, w1, w2, w3 *byte, meta *q4KMeta, x0, x1, x2, x3 *q8Kx2, nb int, out *[32]float32)

//go:noescape
func dotQ6Kt4VNNI(w0, w1, w2, w3 *byte, meta *q6KMeta, x0, x1, x2, x3 *q8Kx2, nb int, out *[32]float32)

func init() {
	// The assembly reads x as packed 640-byte pairs (values, sums of 32,
	// scales, sums of 16) and meta as 224-byte Q4_K blocks (scales, mins,
	// d, dmin) or 400-byte Q6_K blocks (scales, -32·scales, d).
	if unsafe.Sizeof(q8Kx2{}) != 640 || unsafe.Offsetof(q8Kx2{}.gs) != 512 || unsafe.Offsetof(q8Kx2{}.d) != 544 || unsafe.Offsetof(q8Kx2{}.bs) != 576 ||
		unsafe.Sizeof(q4KMeta{}) != 224 || unsafe.Offsetof(q4KMeta{}.mn) != 128 || unsafe.Offsetof(q4KMeta{}.d) != 192 || unsafe.Offsetof(q4KMeta{}.dmin) != 208 ||
		unsafe.Sizeof(q6KMeta{}) != 400 || unsafe.Offsetof(q6KMeta{}.nsc) != 256 || unsafe.Offsetof(q6KMeta{}.d) != 384 {
		panic("kernels: q8Kx2, q4KMeta or q6KMeta layout changed")
	}
	if hasVNNI {
		tileQ4K, tileQ6K = tileQ4KRun, tileQ6KRun
	}
}

// tileQ4KRun and tileQ6KRun run the K-quant assembly tiles, direct calls
// as tileRun is.
func tileQ4KRun(w *[4][]byte, meta []q4KMeta, x *[4][]q8Kx2, nb int, out *[32]float32) {
	if tileKCheck(Q4_K, w, x, nb, out) {
		_ = meta[nb-1]
		dotQ4Kt4VNNI(&w[0][0], &w[1][0], &w[2][0], &w[3][0], &meta[0], &x[0][0], &x[1][0], &x[2][0], &x[3][0], nb, out)
	}
}

func tileQ6KRun(w *[4][]byte, meta []q6KMeta, x *[4][]q8Kx2, nb int, out *[32]float32) {
	if tileKCheck(Q6_K, w, x, nb, out) {
		_ = meta[nb-1]
		dotQ6Kt4VNNI(&w[0][0], &w[1][0], &w[2][0], &w[3][0], &meta[0], &x[0][0], &x[1][0], &x[2][0], &x[3][0], nb, out)
	}
}

// tileKCheck checks the rows' lengths for nb blocks of type t, and
// reports whether there is work: with no blocks it zeroes out.
func tileKCheck(t DType, w *[4][]byte, x *[4][]q8Kx2, nb int, out *[32]float32) bool {
	if nb == 0 {
		*out = [32]float32{}
		return false
	}
	rb := t.RowBytes(256 * nb)
	for k := range 4 {
		_ = w[k][rb-1]
		_ = x[k][nb-1]
	}
	return true
}
