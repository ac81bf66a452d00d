package kernels

import "math"

// CPU implements Kernels on the CPU: matrix products split by output rows
// and attention split by (row, KV head) across a Pool's workers. Work below a
// threshold runs on the calling goroutine, since waking a worker costs more
// than a 64×64 product.
type CPU struct {
	pool    *Pool
	scratch [][]float32 // attention scores, one buffer per worker
	chunk   int         // minChunk or minChunkSIMD
	matmul  func(m *MatMul, lo, hi int)
	attendG attendFunc
	simd    bool

	// per-call state, reused to avoid allocating closures
	jobs           []MatMul
	acts           []activations // per job of a MatMul call with quantized weights
	src            []int         // per job: the job whose acts it uses
	att            []Attention
	heads          Heads
	rowsAll, parts int       // the current call's output rows (MatMul) or items (Attention), and its chunks
	gluH, gluG     []float32 // the current SwiGLU call's operands
	// matmulFn, attendFn and swigluFn are c.matmulChunk, c.attendChunk
	// and c.swigluChunk, made once so that a call allocates no func value.
	matmulFn, attendFn, swigluFn func(chunk, worker int)
}

// minChunk is the least work (multiply-adds) worth handing to a worker:
// about 5 µs of scalar code. The vector kernels are about 6 times faster,
// so they split only from minChunkSIMD.
const (
	minChunk     = 16 << 10
	minChunkSIMD = 96 << 10
)

// NewCPU returns CPU kernels that run on pool's workers. Its matrix
// products and its attention for 8-float heads use AVX2+FMA code when built
// with GOEXPERIMENT=simd on a CPU that has them. A CPU is used by one
// goroutine at a time (it keeps per-call state).
func NewCPU(pool *Pool) *CPU {
	c := NewScalarCPU(pool)
	if f, g := asmMatmul(), asmAttend(); f != nil && g != nil {
		c.matmul, c.attendG, c.simd, c.chunk = f, g, true, minChunkSIMD
	} else if f, g := simdMatmul(), simdAttend(); f != nil && g != nil {
		c.matmul, c.attendG, c.simd, c.chunk = f, g, true, minChunkSIMD
	}
	return c
}

// NewScalarCPU is NewCPU without the SIMD code, for comparisons.
func NewScalarCPU(pool *Pool) *CPU {
	return &CPU{pool: pool, scratch: make([][]float32, pool.Workers()), matmul: matmulRowsScalar, attendG: attendGroup, chunk: minChunk}
}

// SIMD reports whether the kernels use vector instructions.
func (c *CPU) SIMD() bool { return c.simd }

var _ Kernels = (*CPU)(nil)

// MatMul implements Kernels. The output rows of all jobs form one range that
// is cut into chunks of similar work.
func (c *CPU) MatMul(jobs ...MatMul) {
	total, rows := 0, 0
	for i := range jobs {
		total += jobs[i].Rows * jobs[i].N * jobs[i].D
		rows += jobs[i].D
	}
	c.prepare(jobs)
	chunks := min(total/c.chunk, 2*c.pool.Workers(), rows)
	if chunks <= 1 {
		for i := range jobs {
			c.rows(i, &jobs[i], 0, jobs[i].D)
		}
		return
	}
	if c.matmulFn == nil {
		c.matmulFn = c.matmulChunk
	}
	c.jobs, c.rowsAll, c.parts = jobs, rows, chunks
	c.pool.Run(chunks, c.matmulFn)
	c.jobs = nil
}

// matmulChunk computes chunk of the current MatMul call's output rows.
func (c *CPU) matmulChunk(chunk, _ int) {
	lo, hi := chunk*c.rowsAll/c.parts, (chunk+1)*c.rowsAll/c.parts
	base := 0
	for i := range c.jobs {
		m := &c.jobs[i]
		a, b := max(lo-base, 0), min(hi-base, m.D)
		if a < b {
			c.rows(i, m, a, b)
		}
		base += m.D
	}
}

// RMSNorm implements Kernels.
func (c *CPU) RMSNorm(out, x, weight []float32, eps float32) { rmsnorm(out, x, weight, eps) }

// RoPE implements Kernels.
func (c *CPU) RoPE(v, cos, sin []float32, neox bool) {
	if neox {
		ropeNeox(v, cos, sin)
		return
	}
	rope(v, cos, sin)
}

// Softmax implements Kernels.
func (c *CPU) Softmax(x []float32) { softmax(x) }

// minSwiGLU is the least number of elements of a SwiGLU call worth handing
// to a worker (about 50 µs): the calls of a prompt chunk (rows × hidden
// width) split across the workers; a decode step's one row does not.
const minSwiGLU = 8 << 10

// SwiGLU implements Kernels. Each element is computed alone, so the result
// does not depend on how the call is split.
func (c *CPU) SwiGLU(h, g []float32) {
	chunks := min(len(h)/minSwiGLU, 2*c.pool.Workers())
	if chunks <= 1 {
		swigluFast(h, g)
		return
	}
	if c.swigluFn == nil {
		c.swigluFn = c.swigluChunk
	}
	c.gluH, c.gluG, c.parts = h, g[:len(h)], chunks
	c.pool.Run(chunks, c.swigluFn)
	c.gluH, c.gluG = nil, nil
}

// swigluChunk computes chunk of the current SwiGLU call.
func (c *CPU) swigluChunk(chunk, _ int) {
	lo, hi := chunk*len(c.gluH)/c.parts, (chunk+1)*len(c.gluH)/c.parts
	swigluFast(c.gluH[lo:hi], c.gluG[lo:hi])
}

// attendFunc computes the attention of the g query heads that share one KV
// head (grouped-query attention) for one task: q and out hold the g heads
// (g·HeadSize floats), the KV head's floats start at kvOff within each
// kvDim-float position of t.Keys and t.Values, and att is scratch of at
// least g·t.Len floats. Each key and value row is read once for all g
// heads.
type attendFunc func(out, q []float32, g int, t *Attention, kvOff, kvDim int, scale float32, att []float32)

// Attention implements Kernels. Its work items are (task, KV head) pairs,
// each covering the query heads that share the KV head.
func (c *CPU) Attention(shape Heads, tasks ...Attention) {
	items := len(tasks) * shape.KVHeads
	work := 0
	for i := range tasks {
		work += tasks[i].Len
	}
	work *= shape.Heads * shape.HeadSize * 2
	chunks := min(work/c.chunk, 2*c.pool.Workers(), items)
	c.att, c.heads = tasks, shape
	if chunks <= 1 {
		c.attend(0, items, 0)
	} else {
		if c.attendFn == nil {
			c.attendFn = c.attendChunk
		}
		c.rowsAll, c.parts = items, chunks
		c.pool.Run(chunks, c.attendFn)
	}
	c.att = nil
}

// attendChunk runs chunk of the current Attention call's items.
func (c *CPU) attendChunk(chunk, worker int) {
	c.attend(chunk*c.rowsAll/c.parts, (chunk+1)*c.rowsAll/c.parts, worker)
}

// attend runs items [lo, hi) of the current Attention call, item =
// task*KVHeads + KV head.
func (c *CPU) attend(lo, hi, worker int) {
	s := c.heads
	hs := s.HeadSize
	kvDim := s.KVHeads * hs
	g := s.Heads / s.KVHeads
	scale := float32(1 / math.Sqrt(float64(hs)))
	for it := lo; it < hi; it++ {
		t := &c.att[it/s.KVHeads]
		kvh := it % s.KVHeads
		if need := g * t.Len; cap(c.scratch[worker]) < need {
			c.scratch[worker] = make([]float32, need+need/2)
		}
		h0, h1 := kvh*g*hs, (kvh+1)*g*hs
		c.attendG(t.Out[h0:h1], t.Q[h0:h1], g, t, kvh*hs, kvDim, scale, c.scratch[worker][:cap(c.scratch[worker])])
	}
}
