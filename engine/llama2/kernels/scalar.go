package kernels

import "math"

// The scalar kernels below are plain Go tuned for the gc compiler: four
// independent accumulators (one add chain limits a single-accumulator loop)
// and re-slicing so the loops run without bounds checks.

// dot returns Σ a[i]*b[i] over len(a); b must be at least as long.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	for len(a) >= 8 && len(b) >= 8 {
		s0 += a[0] * b[0]
		s1 += a[1] * b[1]
		s2 += a[2] * b[2]
		s3 += a[3] * b[3]
		s0 += a[4] * b[4]
		s1 += a[5] * b[5]
		s2 += a[6] * b[6]
		s3 += a[7] * b[7]
		a, b = a[8:], b[8:]
	}
	for len(a) >= 4 && len(b) >= 4 {
		s0 += a[0] * b[0]
		s1 += a[1] * b[1]
		s2 += a[2] * b[2]
		s3 += a[3] * b[3]
		a, b = a[4:], b[4:]
	}
	for i := range a {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// dot2 returns the dot products of w with x0 and x1 in one pass over w.
// Each sum uses exactly dot's accumulators and order, so a row's result
// does not depend on how rows are batched.
func dot2(w, x0, x1 []float32) (float32, float32) {
	x0, x1 = x0[:len(w)], x1[:len(w)]
	var a0, a1, a2, a3, b0, b1, b2, b3 float32
	for len(w) >= 4 && len(x0) >= 4 && len(x1) >= 4 {
		a0 += w[0] * x0[0]
		b0 += w[0] * x1[0]
		a1 += w[1] * x0[1]
		b1 += w[1] * x1[1]
		a2 += w[2] * x0[2]
		b2 += w[2] * x1[2]
		a3 += w[3] * x0[3]
		b3 += w[3] * x1[3]
		w, x0, x1 = w[4:], x0[4:], x1[4:]
	}
	for i := range w {
		a0 += w[i] * x0[i]
		b0 += w[i] * x1[i]
	}
	return (a0 + a1) + (a2 + a3), (b0 + b1) + (b2 + b3)
}

// axpy sets y += a*x over len(y); x must be at least as long.
func axpy(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for len(y) >= 4 && len(x) >= 4 {
		y[0] += a * x[0]
		y[1] += a * x[1]
		y[2] += a * x[2]
		y[3] += a * x[3]
		y, x = y[4:], x[4:]
	}
	for i := range y {
		y[i] += a * x[i]
	}
}

// matmulRowsScalar computes output rows [lo, hi) of job m for all its
// batch rows, two batch rows per pass over a weight row. Weight rows are
// taken in blocks of scalarBlock so a block is read from memory once and
// reused from L1 by every batch pair (a large matrix is not streamed
// Rows/2 times).
func matmulRowsScalar(m *MatMul, lo, hi int) {
	n, d := m.N, m.D
	for i0 := lo; i0 < hi; i0 += scalarBlock {
		i1 := min(i0+scalarBlock, hi)
		r := 0
		for ; r+2 <= m.Rows; r += 2 {
			x0, x1 := m.X[r*n:(r+1)*n], m.X[(r+1)*n:(r+2)*n]
			o0, o1 := m.Out[r*d:(r+1)*d], m.Out[(r+1)*d:(r+2)*d]
			for i := i0; i < i1; i++ {
				o0[i], o1[i] = dot2(m.W[i*n:(i+1)*n], x0, x1)
			}
		}
		if r < m.Rows {
			x := m.X[r*n : (r+1)*n]
			o := m.Out[r*d : (r+1)*d]
			for i := i0; i < i1; i++ {
				o[i] = dot(m.W[i*n:(i+1)*n], x)
			}
		}
	}
}

// scalarBlock is how many weight rows matmulRowsScalar multiplies with
// every batch row before moving on: 16 rows of 768 floats are 48 KiB.
const scalarBlock = 16

// expf is exp for float32 arguments: range reduction by ln 2 (rounding to
// nearest with the 1.5·2^23 trick, so no branches) and a degree-6
// polynomial (Cephes expf), within a few ulp of math.Exp and several times
// faster. Results below e^expCutoff (4e-31) are 0: next to the 1 that a
// softmax's maximum contributes they vanish in float32 anyway, while
// multiplying them would make denormals, which cost microcode assists.
const expCutoff = -70

func expf(x float32) float32 {
	const (
		log2e = 1.44269504088896341
		c1    = 0.693359375
		c2    = -2.12194440e-4
		magic = 12582912 // 1.5·2^23: adding it rounds to an integer
	)
	if !(x > expCutoff) { // also NaN, which has no useful exponential here
		return 0
	}
	if x > 88.72283 {
		return float32(math.Inf(1))
	}
	t := x*log2e + magic
	k := int32(math.Float32bits(t)) - 0x4B400000
	fk := t - magic
	r := x - fk*c1 - fk*c2
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	p = p*r*r + r + 1
	if k > 127 { // 2^128 is not a float32; x is just below the overflow limit
		return p * 2 * math.Float32frombits(uint32(127+127)<<23)
	}
	return p * math.Float32frombits(uint32(k+127)<<23)
}

func rmsnorm(out, x, weight []float32, eps float32) {
	x = x[:len(weight)]
	out = out[:len(weight)]
	// The sum of squares in float64, as ggml computes it (a float32 sum
	// can round an activation that the next matrix product quantizes to
	// the other integer).
	sum := 0.0
	for _, v := range x {
		sum += float64(v) * float64(v)
	}
	ss := float32(sum/float64(len(x))) + eps
	ss = float32(1 / math.Sqrt(float64(ss)))
	for i, w := range weight {
		out[i] = w * (ss * x[i])
	}
}

func softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	m := x[0]
	for _, v := range x[1:] {
		if v > m {
			m = v
		}
	}
	var sum float32
	for i, v := range x {
		e := expf(v - m)
		x[i] = e
		sum += e
	}
	inv := 1 / sum
	for i := range x {
		x[i] *= inv
	}
}

func rope(v, cos, sin []float32) {
	hs := 2 * len(cos)
	for len(v) >= hs {
		h := v[:hs]
		for p := range cos {
			c, s := cos[p], sin[p]
			a, b := h[2*p], h[2*p+1]
			h[2*p] = a*c - b*s
			h[2*p+1] = a*s + b*c
		}
		v = v[hs:]
	}
}

func swiglu(h, g []float32) {
	g = g[:len(h)]
	for i, v := range h {
		h[i] = v * (1 / (1 + expf(-v))) * g[i]
	}
}

// attendGroup is the attendFunc of plain Go: for 8-float heads,
// attendGroup8; otherwise scores of every head against each key row, a
// softmax per head, then every head's weighted sum from each value row.
// Each head's output is bit for bit attendHead's for it alone.
func attendGroup(out, q []float32, g int, t *Attention, kvOff, kvDim int, scale float32, att []float32) {
	hs := len(q) / g
	if g == 1 {
		attendHead(out, q, t, kvOff, kvDim, scale, att)
		return
	}
	if hs == 8 {
		attendGroup8(out, q, g, t, kvOff, kvDim, scale, att)
		return
	}
	n := t.Len
	att = att[:g*n]
	keys, vals := t.Keys[kvOff:], t.Values[kvOff:]
	for p := range n {
		k := keys[p*kvDim : p*kvDim+hs]
		for h := range g {
			att[h*n+p] = dot(q[h*hs:(h+1)*hs], k) * scale
		}
	}
	for h := range g {
		softmax(att[h*n : (h+1)*n])
	}
	out = out[:g*hs]
	clear(out)
	for p := range n {
		v := vals[p*kvDim : p*kvDim+hs]
		for h := range g {
			axpy(out[h*hs:(h+1)*hs], att[h*n+p], v)
		}
	}
}

// attendHead computes one head of one attention task into out (HeadSize
// floats); att is scratch of at least t.Len floats.
func attendHead(out, q []float32, t *Attention, kvOff, kvDim int, scale float32, att []float32) {
	hs := len(q)
	if hs == 8 {
		attendHead8(out, q, t, kvOff, kvDim, scale, att)
		return
	}
	att = att[:t.Len]
	keys := t.Keys[kvOff:]
	for p := range att {
		att[p] = dot(q, keys[p*kvDim:p*kvDim+hs]) * scale
	}
	softmax(att)
	out = out[:hs]
	clear(out)
	vals := t.Values[kvOff:]
	for p, a := range att {
		axpy(out, a, vals[p*kvDim:p*kvDim+hs])
	}
}

// attendHead8 is attendHead for 8-float heads (stories260K): attendGroup8
// with a group of one.
func attendHead8(out, q []float32, t *Attention, kvOff, kvDim int, scale float32, att []float32) {
	attendGroup8(out, q, 1, t, kvOff, kvDim, scale, att)
}

// attendBlock is how many positions attendGroup8 takes at a time: their
// key or value rows stay in L1 while every head of the group uses them.
const attendBlock = 64

// attendGroup8 is attendGroup for 8-float heads, with the query and the
// output of a head held in registers over a block of positions instead of
// calling dot and axpy per position. A head's arithmetic (the order of
// every sum) does not depend on the group or the blocks.
func attendGroup8(out, q []float32, g int, t *Attention, kvOff, kvDim int, scale float32, att []float32) {
	n := t.Len
	att, q, out = att[:g*n], q[:g*8], out[:g*8]
	keys, vals := t.Keys[kvOff:], t.Values[kvOff:]
	for p0 := 0; p0 < n; p0 += attendBlock {
		p1 := min(p0+attendBlock, n)
		for h := range g {
			scoreRows8(att[h*n+p0:h*n+p1], q[h*8:h*8+8], keys[p0*kvDim:], kvDim, scale)
		}
	}
	for h := range g {
		a := att[h*n : (h+1)*n]
		m := float32(math.Inf(-1))
		for _, s := range a {
			if s > m { // not max(): its NaN handling costs a branchy sequence
				m = s
			}
		}
		for p, s := range a {
			a[p] = expf(s - m)
		}
	}
	clear(out)
	for p0 := 0; p0 < n; p0 += attendBlock {
		p1 := min(p0+attendBlock, n)
		for h := range g {
			addWeighted8(out[h*8:h*8+8], att[h*n+p0:h*n+p1], vals[p0*kvDim:], kvDim)
		}
	}
	for h := range g {
		var sum float32
		for _, e := range att[h*n : (h+1)*n] {
			sum += e
		}
		inv := 1 / sum
		o := out[h*8 : h*8+8]
		for i := range o {
			o[i] *= inv
		}
	}
}

// scoreRows8 sets att[p] = scale·q·k_p for the 8-float keys k_p =
// keys[p*kvDim:].
func scoreRows8(att, q, keys []float32, kvDim int, scale float32) {
	q = q[:8]
	q0, q1, q2, q3, q4, q5, q6, q7 := q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7]
	for p := range att {
		k := keys[p*kvDim : p*kvDim+8]
		s := ((q0*k[0] + q1*k[1]) + (q2*k[2] + q3*k[3])) + ((q4*k[4] + q5*k[5]) + (q6*k[6] + q7*k[7]))
		att[p] = s * scale
	}
}

// addWeighted8 adds Σ_p att[p]·v_p to out[:8] over the 8-float value rows
// v_p = vals[p*kvDim:], in position order.
func addWeighted8(out, att, vals []float32, kvDim int) {
	out = out[:8]
	o0, o1, o2, o3, o4, o5, o6, o7 := out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7]
	for p, a := range att {
		v := vals[p*kvDim : p*kvDim+8]
		o0 += a * v[0]
		o1 += a * v[1]
		o2 += a * v[2]
		o3 += a * v[3]
		o4 += a * v[4]
		o5 += a * v[5]
		o6 += a * v[6]
		o7 += a * v[7]
	}
	out[0], out[1], out[2], out[3] = o0, o1, o2, o3
	out[4], out[5], out[6], out[7] = o4, o5, o6, o7
}

// ropeNeox is rope for the GPT-NeoX pairing: element i of a head rotates
// with element i+half.
func ropeNeox(v, cos, sin []float32) {
	half := len(cos)
	hs := 2 * half
	for len(v) >= hs {
		h := v[:hs]
		for p := range cos {
			c, s := cos[p], sin[p]
			a, b := h[p], h[p+half]
			h[p] = a*c - b*s
			h[p+half] = a*s + b*c
		}
		v = v[hs:]
	}
}
