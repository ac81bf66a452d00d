// Package kernels holds the arithmetic of a transformer forward pass behind
// the Kernels interface: batched matrix-vector products, RMSNorm, RoPE,
// softmax, SwiGLU and attention.
//
// Start with NewPool and NewCPU. CPU runs plain Go kernels (four
// accumulators, bounds-check-free loops) and splits large matrix products
// by output rows, and attention by (row, head), across a Pool of persistent
// workers; small work stays on the calling goroutine. Built with
// GOEXPERIMENT=simd on amd64, on a CPU with AVX2 and FMA, the matrix
// products and 8-float-head attention use vector code (simd_amd64.go);
// every dot product keeps a fixed accumulation order, so a row's result
// never depends on how rows are batched or split.
package kernels
