// Package kernels holds the arithmetic of a transformer forward pass behind
// the Kernels interface: batched matrix-vector products, RMSNorm, RoPE,
// softmax, SwiGLU and attention.
//
// Start with NewPool and NewCPU. CPU runs plain Go kernels (four
// accumulators, bounds-check-free loops) and splits large matrix products
// by output rows, and attention by (row, KV head), across a Pool of
// persistent workers; small work stays on the calling goroutine. With
// grouped-query attention, the query heads that share a KV head are one
// work item that reads each cached key and value row once for all of them
// (attendFunc in cpu.go), with each head's result bit for bit what a
// head-by-head pass gives. On amd64 CPUs with
// AVX2 and FMA (detected at run time with CPUID), every build uses the
// assembly kernels of dot_amd64.s and attend_amd64.s (asm_amd64.go):
// register-blocked 4×2 and 8×1 dot-product tiles for the matrix products,
// and vector scores, exp and weighted sums for attention heads of a
// multiple of 8 floats; SwiGLU runs eight elements at a time in
// swiglu_amd64.s, the Go expf's operations in its order without FMA, so
// bit for bit the Go result. Quantized weights (Q8_0, Q4_0, Q5_0, Q4_K, Q6_K)
// times Q8-quantized activations use the AVX2 integer kernels of
// qdot_amd64.s (VPMADDUBSW/VPMADDWD, also needing F16C), one or four
// whole weight rows per call, whose results are bit for bit those of the
// Go code. A product of four activation rows or more (a prompt) with
// Q8_0, Q4_0 or Q5_0 weights goes by tiles of four weight rows times
// eight activation rows (VPDPBUSD, tile.go and tile_amd64.s) where the CPU
// has AVX-512 F, BW, VL and VNNI, in the one-row kernels' order, so its
// results are the same bits; Q4_K and Q6_K weights go by tiles of the same
// shape (VPMADDUBSW and VPDPWSSD with the block's scales, tilek.go and
// tilek_amd64.s), exact integer block sums and then the one-row kernels'
// float step. The activations are quantized once per call for all jobs
// that share them (a layer's Q, K and V).
//
// Where the CPU has AMX-INT8 and Linux grants the process the tile state
// (amx_amd64.go), every Q8_0 product, one activation row (a decode) or
// many (a prompt, a batch), goes by one AMX kernel instead (amx.go and
// amx_amd64.s): 16 weight rows, read straight from the GGUF blocks, times
// up to 16 activation rows, in an order of its own. For each output and
// each 32-value block b in turn, the exact integer sum s (TDPBSSD), then
// acc = acc + float32(s)·(dw[b]·dx[b]), each of the three operations
// rounded to float32, no fused multiply-add. Batching still never changes
// a Q8_0 result on one machine, but the results are not the bits a CPU
// without AMX gives (dotQ8_0's eight lanes per block): across CPUs, Q8_0
// outputs agree to rounding, not bit for bit. Every other type keeps the
// same bits on every CPU.
//
// The tag purego leaves the assembly out; then, built with
// GOEXPERIMENT=simd, the archsimd kernels of simd_amd64.go are used, and
// otherwise the scalar ones. Every dot product keeps a fixed accumulation
// order, so a row's result never depends on how rows are batched or split.
package kernels
