//go:build !amd64 || purego

package kernels

func matmulAsmForTest(m *MatMul) { panic("no assembly kernels") }

func dot1x1Go(w, x []float32) float32 { panic("no assembly kernels") }

func attendHeadAsmForTest(out, q []float32, t *Attention, kvOff, kvDim int, scale float32, att []float32) {
	panic("no assembly kernels")
}
