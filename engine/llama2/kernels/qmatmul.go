package kernels

// activations are one MatMul job's input rows in the form its weight type
// multiplies with.
type activations struct {
	q8  []q8Block   // Q8_0, Q4_0, Q5_0
	q81 []q8_1Block // Q4_1, Q5_1
	q8K []q8KBlock  // Q4_K, Q5_K, Q6_K
	f   []float32   // BF16: rows rounded to bfloat16 (F16 weights multiply float32 rows)
	x2  []q8x2      // q8 packed for the tile kernel, where canTile
	xK2 []q8Kx2     // q8K packed for the K-quant tile kernels
	xa  []amxBlock  // q8 packed for the AMX kernel, where amxQ8
}

// kind is the form of activations a weight type multiplies with.
func kind(t DType) int {
	switch t {
	case Q8_0, Q4_0, Q5_0:
		return 1
	case Q4_1, Q5_1:
		return 2
	case Q4_K, Q5_K, Q6_K:
		return 3
	case BF16:
		return 4
	}
	return 0
}

// prepare quantizes the input rows of every job with quantized weights;
// jobs with the same input rows and kind of activations (a layer's Q, K
// and V, or its gate and up projections) share the first one's, in
// c.src.
func (c *CPU) prepare(jobs []MatMul) {
	for len(c.acts) < len(jobs) {
		c.acts = append(c.acts, activations{})
	}
	c.src = c.src[:0]
outer:
	for i := range jobs {
		m := &jobs[i]
		for j := range i {
			if o := &jobs[j]; kind(o.Type) == kind(m.Type) && kind(m.Type) != 0 && o.Rows == m.Rows && o.N == m.N &&
				len(m.X) > 0 && len(o.X) > 0 && &o.X[0] == &m.X[0] && tileKey(o) == tileKey(m) {
				c.src = append(c.src, c.src[j])
				continue outer
			}
		}
		c.src = append(c.src, i)
		a := &c.acts[i]
		switch m.Type {
		case Q8_0, Q4_0, Q5_0:
			nb := m.N / 32
			a.q8 = grow(a.q8, m.Rows*nb)
			for r := range m.Rows {
				quantizeQ8_0Fast(m.X[r*m.N:(r+1)*m.N], a.q8[r*nb:(r+1)*nb])
			}
			if amxQ8(m) && m.Rows > 1 {
				a.xa = grow(a.xa, (m.Rows+15)/16*nb)
				packAMX(a.q8, m.Rows, nb, a.xa)
			} else if off := tileKey(m); off != 0 {
				a.x2 = grow(a.x2, (m.Rows+1)/2*nb)
				packQ8x2(a.q8, m.Rows, nb, off, a.x2)
			}
		case Q4_1, Q5_1:
			nb := m.N / 32
			a.q81 = grow(a.q81, m.Rows*nb)
			for r := range m.Rows {
				quantizeQ8_1(m.X[r*m.N:(r+1)*m.N], a.q81[r*nb:(r+1)*nb])
			}
		case Q4_K, Q5_K, Q6_K:
			nb := m.N / 256
			a.q8K = grow(a.q8K, m.Rows*nb)
			for r := range m.Rows {
				quantizeQ8K(m.X[r*m.N:(r+1)*m.N], a.q8K[r*nb:(r+1)*nb])
			}
			if tileK(m) {
				a.xK2 = grow(a.xK2, (m.Rows+1)/2*nb)
				packQ8Kx2(a.q8K, m.Rows, nb, a.xK2)
			}
		case BF16:
			a.f = grow(a.f, m.Rows*m.N)
			for j, v := range m.X[:m.Rows*m.N] {
				a.f[j] = BFloatToFloat(FloatToBFloat(v))
			}
		}
	}
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// rows computes output rows [lo, hi) of job i.
func (c *CPU) rows(i int, m *MatMul, lo, hi int) {
	switch m.Type {
	case F32:
		c.matmul(m, lo, hi)
		return
	case Q8_0, Q4_0, Q5_0:
		if amxQ8(m) {
			rowsQ8AMX(m, &c.acts[c.src[i]], lo, hi)
			return
		}
		if tileKernel(m) != nil {
			rowsQ8Tile(m, c.acts[c.src[i]].x2, lo, hi)
			return
		}
		c.rowsQ8(i, m, lo, hi)
		return
	case Q4_K, Q6_K:
		if tileK(m) {
			rowsKTile(m, c.acts[c.src[i]].xK2, lo, hi)
			return
		}
		c.rowsK(i, m, lo, hi)
		return
	}
	a := &c.acts[c.src[i]]
	n, d := m.N, m.D
	rb := m.Type.RowBytes(n)
	for o := lo; o < hi; o++ {
		w := m.Raw[o*rb : (o+1)*rb]
		for r := range m.Rows {
			var v float32
			switch m.Type {
			case Q4_1, Q5_1:
				v = dotQ8_1(m.Type, w, a.q81[r*n/32:(r+1)*n/32])
			case Q5_K:
				v = dotQ5K(w, a.q8K[r*n/256:(r+1)*n/256])
			case F16:
				v = dotF16(w, m.X[r*n:(r+1)*n])
			case BF16:
				v = dotBF16(w, a.f[r*n:(r+1)*n])
			}
			m.Out[r*d+o] = v
		}
	}
}

// rowsQ8 is rows for the weight types with Q8_0 activations.
func (c *CPU) rowsQ8(i int, m *MatMul, lo, hi int) {
	rowsBy4(m, c.acts[c.src[i]].q8, 32, lo, hi, dotQ8x4Fast, dotQ8Fast)
}

// rowsBy4 computes output rows [lo, hi) of m from its activation rows x
// (blocks of bs values): four weight rows at a time against each
// activation row, so that an activation block is read once per four rows,
// then the rest one by one.
func rowsBy4[B any](m *MatMul, x []B, bs, lo, hi int,
	four func(DType, []byte, int, []B, *[4]float32), one func(DType, []byte, []B) float32) {
	n, d := m.N, m.D
	nb, rb := n/bs, m.Type.RowBytes(n)
	o := lo
	for ; o+4 <= hi; o += 4 {
		w := m.Raw[o*rb : (o+4)*rb]
		for r := range m.Rows {
			four(m.Type, w, rb, x[r*nb:(r+1)*nb], (*[4]float32)(m.Out[r*d+o:r*d+o+4]))
		}
	}
	for ; o < hi; o++ {
		w := m.Raw[o*rb : (o+1)*rb]
		for r := range m.Rows {
			m.Out[r*d+o] = one(m.Type, w, x[r*nb:(r+1)*nb])
		}
	}
}

// rowsK is rowsQ8 for Q4_K and Q6_K weights with Q8_K activations. A
// Q4_K job of four activation rows or more (a prompt) goes by tiles of
// about 16 KiB of weight rows, each row against four activation rows at a
// time, so a weight block is unpacked once for four activation rows and
// the activations are read once per tile.
func (c *CPU) rowsK(i int, m *MatMul, lo, hi int) {
	x := c.acts[c.src[i]].q8K
	if m.Type != Q4_K || m.Rows < 4 {
		rowsBy4(m, x, 256, lo, hi, dotKx4Fast, dotKFast)
		return
	}
	n, d := m.N, m.D
	nb, rb := n/256, m.Type.RowBytes(n)
	tile := max(1, 16384/rb)
	var out [4]float32
	for t := lo; t < hi; t += tile {
		end := min(t+tile, hi)
		r := 0
		for ; r+4 <= m.Rows; r += 4 {
			for o := t; o < end; o++ {
				dotQ4Kr4Fast(m.Raw[o*rb:(o+1)*rb], x[r*nb:(r+4)*nb], nb, &out)
				for k, v := range out {
					m.Out[(r+k)*d+o] = v
				}
			}
		}
		for ; r < m.Rows; r++ {
			for o := t; o < end; o++ {
				m.Out[r*d+o] = dotKFast(m.Type, m.Raw[o*rb:(o+1)*rb], x[r*nb:(r+1)*nb])
			}
		}
	}
}
