//go:build !goexperiment.simd || !amd64

package kernels

// simdMatmul and simdAttend return nil: this build has no vector kernels.
func simdMatmul() func(m *MatMul, lo, hi int) { return nil }

func simdAttend() attendFunc { return nil }
