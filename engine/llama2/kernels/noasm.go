//go:build !amd64 || purego

package kernels

// asmMatmul returns nil: this build has no assembly kernels.
func asmMatmul() func(m *MatMul, lo, hi int) { return nil }

// asmAttend returns nil: this build has no assembly kernels.
func asmAttend() func(out, q []float32, t *Attention, kvOff, kvDim int, scale float32, att []float32) {
	return nil
}
