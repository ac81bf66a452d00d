//go:build goexperiment.simd && amd64

package kernels

import (
	"fmt"
	"math"
	"simd/archsimd"
	"unsafe"
)

// The AVX2+FMA matrix kernel. It calls archsimd.ClearAVXUpperBits
// (VZEROUPPER) before running scalar code or returning: scalar float code
// after AVX code otherwise pays false dependencies on every instruction.
// (Attention stays scalar: with this experimental compiler a vector version
// spilled its registers and was no faster.) Every dot product keeps one 8-wide accumulator
// over the first n&^7 columns, reduced by hsum8's fixed tree, plus a scalar
// tail in column order, so a product's value does not depend on the tile
// that computed it, hence not on batching.

type f8 = archsimd.Float32x8

func simdMatmul() func(m *MatMul, lo, hi int) {
	if !archsimd.X86.AVX2() || !archsimd.X86.FMA() {
		return nil
	}
	return matmulRowsSIMD
}

// at loads eight floats at element offset i from p. Callers check bounds
// before their loops, which then run without slice arithmetic.
func at(p unsafe.Pointer, i int) f8 {
	return archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(p, uintptr(i)*4)))
}

func ptr(s []float32) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(s)) }

// hsum8 returns the lane sums of a0..a7 as one vector: lane i holds
// ((ai0+ai1)+(ai2+ai3)) + ((ai4+ai5)+(ai6+ai7)).
func hsum8(a0, a1, a2, a3, a4, a5, a6, a7 f8) f8 {
	t0 := a0.AddPairsGrouped(a1).AddPairsGrouped(a2.AddPairsGrouped(a3))
	t1 := a4.AddPairsGrouped(a5).AddPairsGrouped(a6.AddPairsGrouped(a7))
	return t0.Select128FromPair(0, 2, t1).Add(t0.Select128FromPair(1, 3, t1))
}

// tail returns Σ w[j]*x[j] for j in [from, len(w)), in order.
func tail(w, x []float32, from int) float32 {
	var s float32
	for j := from; j < len(w); j++ {
		s += w[j] * x[j]
	}
	return s
}

// matmulRowsSIMD computes output rows [lo, hi) of m. Weight rows are
// taken eight at a time and, while they sit in L1, multiplied with every
// batch row; one 8-wide accumulator per output keeps few vectors live (the
// Go compiler spills larger register tiles).
func matmulRowsSIMD(m *MatMul, lo, hi int) {
	n, d := m.N, m.D
	if len(m.W) < d*n || len(m.X) < m.Rows*n || len(m.Out) < m.Rows*d || lo < 0 || hi > d {
		panic(fmt.Sprintf("kernels: MatMul slices too short for %d×%d·%d×%d", d, n, n, m.Rows))
	}
	n8 := n &^ 7
	i := lo
	for ; i+8 <= hi; i += 8 {
		w := m.W[i*n : (i+8)*n]
		for r := range m.Rows {
			dot8(w, m.X[r*n:(r+1)*n], n, n8).Store((*[8]float32)(m.Out[r*d+i : r*d+i+8]))
		}
	}
	for ; i < hi; i++ {
		w := m.W[i*n : (i+1)*n]
		for r := range m.Rows {
			m.Out[r*d+i] = dot1(w, m.X[r*n:(r+1)*n], n8)
		}
	}
	archsimd.ClearAVXUpperBits()
	if n8 == n {
		return
	}
	for i := lo; i < hi; i++ {
		w := m.W[i*n : (i+1)*n]
		for r := range m.Rows {
			m.Out[r*d+i] += tail(w, m.X[r*n:(r+1)*n], n8)
		}
	}
}

// dot8 returns the products of the eight rows of w (stride n) with x over
// the first n8 columns.
func dot8(w, x []float32, n, n8 int) f8 {
	px := ptr(x)
	p0, p1, p2, p3 := ptr(w), ptr(w[n:]), ptr(w[2*n:]), ptr(w[3*n:])
	p4, p5, p6, p7 := ptr(w[4*n:]), ptr(w[5*n:]), ptr(w[6*n:]), ptr(w[7*n:])
	var a0, a1, a2, a3, a4, a5, a6, a7 f8
	for j := 0; j < n8; j += 8 {
		y := at(px, j)
		a0 = at(p0, j).MulAdd(y, a0)
		a1 = at(p1, j).MulAdd(y, a1)
		a2 = at(p2, j).MulAdd(y, a2)
		a3 = at(p3, j).MulAdd(y, a3)
		a4 = at(p4, j).MulAdd(y, a4)
		a5 = at(p5, j).MulAdd(y, a5)
		a6 = at(p6, j).MulAdd(y, a6)
		a7 = at(p7, j).MulAdd(y, a7)
	}
	return hsum8(a0, a1, a2, a3, a4, a5, a6, a7)
}

// dot1 is one product over the first n8 columns with the same
// accumulation as dot8.
func dot1(w, x []float32, n8 int) float32 {
	var a, z f8
	pw, px := ptr(w), ptr(x)
	for j := 0; j < n8; j += 8 {
		a = at(pw, j).MulAdd(at(px, j), a)
	}
	return hsum8(a, z, z, z, z, z, z, z).GetLo().GetElem(0)
}

func simdAttend() attendFunc {
	if !archsimd.X86.AVX2() || !archsimd.X86.FMA() {
		return nil
	}
	return eachHead(attendHeadSIMD)
}

// attendHeadSIMD is attendHead with vector code for 8-float heads
// (stories260K); other sizes use the scalar kernel.
func attendHeadSIMD(out, q []float32, t *Attention, kvOff, kvDim int, scale float32, att []float32) {
	n := t.Len
	if len(q) != 8 || n < 8 {
		attendHead(out, q, t, kvOff, kvDim, scale, att)
		return
	}
	if len(t.Keys) < (n-1)*kvDim+kvOff+8 || len(t.Values) < (n-1)*kvDim+kvOff+8 || len(att) < n || len(out) < 8 {
		panic("kernels: Attention slices too short")
	}
	pk, pv := ptr(t.Keys[kvOff:]), ptr(t.Values[kvOff:])
	n8 := n &^ 7
	m := scores8(pk, kvDim, n8, archsimd.LoadFloat32x8((*[8]float32)(q)), archsimd.BroadcastFloat32x8(scale), att)
	archsimd.ClearAVXUpperBits()
	for p := n8; p < n; p++ {
		s := dot(q, t.Keys[kvOff+p*kvDim:kvOff+p*kvDim+8]) * scale
		att[p] = s
		if s > m {
			m = s
		}
	}
	sum := exp8(att[:n8], m)
	archsimd.ClearAVXUpperBits()
	for p := n8; p < n; p++ {
		e := expf(att[p] - m)
		att[p] = e
		sum += e
	}
	weighted8(pv, kvDim, att[:n], 1/sum, (*[8]float32)(out))
	archsimd.ClearAVXUpperBits()
}

// scores8 sets att[p] = scale·q·k_p for p < n8 (n8 >= 8), eight positions
// at a time, and returns their maximum.
func scores8(pk unsafe.Pointer, kvDim, n8 int, q, scale f8, att []float32) float32 {
	pa := ptr(att)
	mv := archsimd.BroadcastFloat32x8(float32(math.Inf(-1)))
	for p := 0; p < n8; p += 8 {
		b := p * kvDim
		s := hsum8(q.Mul(at(pk, b)), q.Mul(at(pk, b+kvDim)), q.Mul(at(pk, b+2*kvDim)), q.Mul(at(pk, b+3*kvDim)),
			q.Mul(at(pk, b+4*kvDim)), q.Mul(at(pk, b+5*kvDim)), q.Mul(at(pk, b+6*kvDim)), q.Mul(at(pk, b+7*kvDim))).Mul(scale)
		s.Store((*[8]float32)(unsafe.Add(pa, uintptr(p)*4)))
		mv = mv.Max(s)
	}
	h := mv.GetLo().Max(mv.GetHi())
	h = h.Max(h.SelectFromPair(2, 3, 0, 1, h))
	h = h.Max(h.SelectFromPair(1, 0, 3, 2, h))
	return h.GetElem(0)
}

// exp8 replaces att[p] by exp(att[p]-m) (len(att) a multiple of 8) and
// returns their sum; like expf, results below e^expCutoff are 0.
func exp8(att []float32, m float32) float32 {
	bc := archsimd.BroadcastFloat32x8
	mb, cutoff, hi, log2e := bc(m), bc(expCutoff), bc(88.37626), bc(1.44269504088896341)
	c1, c2 := bc(-0.693359375), bc(2.12194440e-4)
	p0, p1, p2 := bc(1.9875691500e-4), bc(1.3981999507e-3), bc(8.3334519073e-3)
	p3, p4, p5 := bc(4.1665795894e-2), bc(1.6666665459e-1), bc(5.0000001201e-1)
	one, bias := bc(1), archsimd.BroadcastInt32x8(127)
	var sum f8
	pa := ptr(att)
	for i := 0; i < len(att); i += 8 {
		x := at(pa, i).Sub(mb)
		keep := x.Greater(cutoff)
		x = x.Max(cutoff).Min(hi)
		fk := x.Mul(log2e).RoundToEven()
		r := fk.MulAdd(c1, x)
		r = fk.MulAdd(c2, r)
		y := p0.MulAdd(r, p1)
		y = y.MulAdd(r, p2)
		y = y.MulAdd(r, p3)
		y = y.MulAdd(r, p4)
		y = y.MulAdd(r, p5)
		y = y.Mul(r).MulAdd(r, r).Add(one)
		k := fk.ConvertToInt32().Add(bias).ShiftAllLeft(23)
		e := y.Mul(k.AsFloat32x8()).Masked(keep)
		e.Store((*[8]float32)(unsafe.Add(pa, uintptr(i)*4)))
		sum = sum.Add(e)
	}
	var z f8
	return hsum8(sum, z, z, z, z, z, z, z).GetLo().GetElem(0)
}

// weighted8 sets out = inv·Σ_p att[p]·v_p over 8-float value rows.
func weighted8(pv unsafe.Pointer, kvDim int, att []float32, inv float32, out *[8]float32) {
	bc := archsimd.BroadcastFloat32x8
	var o0, o1, o2, o3 f8
	p := 0
	for ; p+4 <= len(att); p += 4 {
		a := att[p : p+4 : p+4]
		o0 = bc(a[0]).MulAdd(at(pv, p*kvDim), o0)
		o1 = bc(a[1]).MulAdd(at(pv, (p+1)*kvDim), o1)
		o2 = bc(a[2]).MulAdd(at(pv, (p+2)*kvDim), o2)
		o3 = bc(a[3]).MulAdd(at(pv, (p+3)*kvDim), o3)
	}
	for ; p < len(att); p++ {
		o0 = bc(att[p]).MulAdd(at(pv, p*kvDim), o0)
	}
	o0.Add(o1).Add(o2.Add(o3)).Mul(bc(inv)).Store(out)
}

// eachHead makes an attendFunc of a one-head kernel: the heads of a group
// run one after the other, each reading the KV head's rows.
func eachHead(f func(out, q []float32, t *Attention, kvOff, kvDim int, scale float32, att []float32)) attendFunc {
	return func(out, q []float32, g int, t *Attention, kvOff, kvDim int, scale float32, att []float32) {
		hs := len(q) / g
		for h := range g {
			f(out[h*hs:(h+1)*hs], q[h*hs:(h+1)*hs], t, kvOff, kvDim, scale, att)
		}
	}
}
