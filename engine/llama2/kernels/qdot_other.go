//go:build !amd64 || purego

package kernels

// hasQuantAVX2 is false: this build has no assembly kernels.
const hasQuantAVX2 = false

func dotQ8_0Fast(w []byte, x []q8Block) float32 { return dotQ8_0(w, x) }

func dotQ4_0Fast(w []byte, x []q8Block) float32 { return dotQ4_0(w, x) }

var q4KSumAsmForBench, q6KSumAsmForBench = q4KSumGo, q6KSumGo
