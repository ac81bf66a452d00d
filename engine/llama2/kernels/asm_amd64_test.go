//go:build amd64 && !purego

package kernels

// matmulAsmForTest runs the assembly matrix kernel over all of m (rows 0
// and 1 as a 4×2 pair, row 2 with the 8×1 tile).
func matmulAsmForTest(m *MatMul) { matmulRowsAVX(m, 0, m.D) }

func dot1x1Go(w, x []float32) float32 { return dot1x1(&w[0], &x[0], len(w)) }

// attendHeadAsmForTest is the one-head assembly attention kernel.
var attendHeadAsmForTest = attendHeadAVX
