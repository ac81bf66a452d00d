//go:build !goexperiment.simd || !amd64

package kernels

// simdMatmul and simdAttend return nil: this build has no vector kernels.
func simdMatmul() func(m *MatMul, lo, hi int) { return nil }

func simdAttend() func(out, q []float32, t *Attention, kvOff, kvDim int, scale float32, att []float32) {
	return nil
}
