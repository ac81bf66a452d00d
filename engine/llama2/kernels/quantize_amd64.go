//go:build amd64 && !purego

package kernels

// quantQ8_0AVX sets out[b].qs to roundQ8's values of the 32 floats at
// x[32b:] and out[b].d to its step (not yet rounded to f16).
//
//go:noescape
func quantQ8_0AVX(x *float32, out *q8Block, nb int)

// quantizeQ8_0Fast is quantizeQ8_0, in assembly where the CPU allows.
func quantizeQ8_0Fast(x []float32, out []q8Block) {
	if !hasQuantAVX2 || len(out) == 0 {
		quantizeQ8_0(x, out)
		return
	}
	_ = x[32*len(out)-1]
	quantQ8_0AVX(&x[0], &out[0], len(out))
	for b := range out {
		out[b].d = halfTable[FloatToHalf(out[b].d)]
	}
}
