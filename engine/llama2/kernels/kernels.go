package kernels

// Kernels is the arithmetic a transformer forward pass needs. Vectors are
// float32 slices; matrices are row-major [out][in], so W(d,n)·x(n) -> y(d).
//
// A Kernels value is used by one forward pass at a time; it may use worker
// goroutines internally. CPU is the implementation in this package; a GPU
// implementation would keep weights resident and batch MatMul jobs into
// GEMMs.
type Kernels interface {
	// MatMul runs every job; jobs may run in parallel with each other and
	// must not overlap in their outputs.
	MatMul(jobs ...MatMul)
	// RMSNorm sets out = weight * x / sqrt(mean(x²) + eps) for one row;
	// out may alias x.
	RMSNorm(out, x, weight []float32, eps float32)
	// RoPE rotates pairs of every head by the angles whose cosines and sines
	// are cos and sin (one per pair of a head, so the head size is
	// 2*len(cos)): the adjacent pairs (v[i], v[i+1]), or with neox the
	// pairs (v[i], v[i+half]) of GPT-NeoX (Qwen).
	RoPE(v, cos, sin []float32, neox bool)
	// Softmax replaces x by softmax(x).
	Softmax(x []float32)
	// SwiGLU sets h[i] = silu(h[i]) * g[i].
	SwiGLU(h, g []float32)
	// Attention runs every task: causal multi-head attention of one query
	// row against its cached keys and values.
	Attention(shape Heads, tasks ...Attention)
}

// MatMul is one batched matrix-vector product:
// Out[r*D+i] = Σ_j W[i*N+j] · X[r*N+j] for r < Rows, i < D.
//
// With Type F32 (the zero value) the weights are W. With another Type they
// are Raw: D rows of Type.RowBytes(N) bytes each, and the activations are
// quantized per row first as ggml does (Q8_0 for Q8_0 and Q4_0, Q8_K for
// the K-quants, rounded to bfloat16 for BF16; F16 weights multiply float32
// rows, as llama.cpp's x86 CPU backend was measured to do), so the products
// are those of llama.cpp's CPU backend up to the order of float additions.
type MatMul struct {
	Out, X, W  []float32
	Rows, N, D int
	Type       DType
	Raw        []byte
}

// Heads is the attention geometry: Q heads share KV heads in groups of
// Heads/KVHeads (grouped-query attention).
type Heads struct {
	Heads, KVHeads, HeadSize int
}

// Attention is one query row: Q and Out hold Heads*HeadSize floats, Keys and
// Values hold Len positions of KVHeads*HeadSize floats each.
type Attention struct {
	Out, Q       []float32
	Keys, Values []float32
	Len          int
}
