//go:build !amd64 || purego

package kernels

// hasQuantAVX2 is false: this build has no assembly kernels.
const hasQuantAVX2 = false

func dotQ8Fast(t DType, w []byte, x []q8Block) float32 { return dotQ8(t, w, x) }

func dotQ8x4Fast(t DType, w []byte, stride int, x []q8Block, out *[4]float32) {
	dotQ8x4(t, w, stride, x, out)
}

func dotKFast(t DType, w []byte, x []q8KBlock) float32 { return dotK(t, w, x) }

func dotKx4Fast(t DType, w []byte, stride int, x []q8KBlock, out *[4]float32) {
	dotKx4(t, w, stride, x, out)
}

func dotQ4Kr4Fast(w []byte, x []q8KBlock, nb int, out *[4]float32) { dotQ4Kr4(w, x, nb, out) }

func quantizeQ8_0Fast(x []float32, out []q8Block) { quantizeQ8_0(x, out) }

// tileRun, tileQ4KRun and tileQ6KRun are never called in this build: it
// has no tile kernels (tileAsm, tileQ4K and tileQ6K stay nil).
func tileRun(DType, *[4][]byte, *[4][]q8x2, int, *[32]float32) {
	panic("kernels: no tile kernels in this build")
}

func tileQ4KRun(*[4][]byte, []q4KMeta, *[4][]q8Kx2, int, *[32]float32) {
	panic("kernels: no tile kernels in this build")
}

func tileQ6KRun(*[4][]byte, []q6KMeta, *[4][]q8Kx2, int, *[32]float32) {
	panic("kernels: no tile kernels in this build")
}
