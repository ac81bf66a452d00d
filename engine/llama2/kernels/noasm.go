//go:build !amd64 || purego

package kernels

// asmMatmul returns nil: this build has no assembly kernels.
func asmMatmul() func(m *MatMul, lo, hi int) { return nil }

// asmAttend returns nil: this build has no assembly kernels.
func asmAttend() attendFunc { return nil }

// swigluFast is swiglu: this build has no assembly kernels.
func swigluFast(h, g []float32) { swiglu(h, g) }
