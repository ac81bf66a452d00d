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
	// RMSNorm sets out = weight * x / sqrt(mean(x²) + 1e-5) for one row;
	// out may alias x.
	RMSNorm(out, x, weight []float32)
	// RoPE rotates the adjacent pairs (v[i], v[i+1]) of every head by the
	// angles whose cosines and sines are cos and sin (one per pair of a head,
	// so the head size is 2*len(cos)).
	RoPE(v, cos, sin []float32)
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
type MatMul struct {
	Out, X, W  []float32
	Rows, N, D int
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
