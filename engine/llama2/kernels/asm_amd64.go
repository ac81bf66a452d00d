//go:build amd64 && !purego

package kernels

import (
	"fmt"
	"math"
)

// The assembly kernels of dot_amd64.s: AVX2+FMA dot-product tiles, used
// whenever the CPU and the OS support AVX2 and FMA (checked once with
// CPUID/XGETBV), in every build, GOEXPERIMENT or not. Build with the tag
// purego to leave them out.

// dot8x1 sets out[i] = w[i*ldw:][:n]·x[:n] for i < 8.
//
//go:noescape
func dot8x1(w *float32, ldw int, x *float32, n int, out *float32)

// dot4x2 sets out[b*ldo+i] = w[i*ldw:][:n]·x[b*ldx:][:n] for i < 4, b < 2.
//
//go:noescape
func dot4x2(w *float32, ldw int, x *float32, ldx int, n int, out *float32, ldo int)

// dot1x1 returns w[:n]·x[:n].
//
//go:noescape
func dot1x1(w, x *float32, n int) float32

func cpuid(eax, ecx uint32) (a, b, c, d uint32)
func xgetbv0() uint32

// hasAVX2FMA reports whether the CPU has AVX2 and FMA and the OS saves the
// YMM registers.
var hasAVX2FMA = func() bool {
	maxID, _, _, _ := cpuid(0, 0)
	if maxID < 7 {
		return false
	}
	_, _, c1, _ := cpuid(1, 0)
	const fma, osxsave, avx = 1 << 12, 1 << 27, 1 << 28
	if c1&(fma|osxsave|avx) != fma|osxsave|avx || xgetbv0()&6 != 6 {
		return false
	}
	_, b7, _, _ := cpuid(7, 0)
	return b7&(1<<5) != 0
}()

func asmMatmul() func(m *MatMul, lo, hi int) {
	if !hasAVX2FMA {
		return nil
	}
	return matmulRowsAVX
}

// matmulRowsAVX computes output rows [lo, hi) of m. Weight rows are taken
// eight at a time and, while they sit in L1, multiplied with the batch
// rows two at a time (4×2 tiles: six loads per eight FMAs, eight
// independent accumulators to cover the FMA latency); a lone batch row
// uses an 8×1 tile. Leftover weight rows use 4×2 tiles and single dot
// products. All tiles compute a product identically (dot_amd64.s), so a
// row's result does not depend on the batch around it.
func matmulRowsAVX(m *MatMul, lo, hi int) {
	n, d, rows := m.N, m.D, m.Rows
	if len(m.W) < d*n || len(m.X) < rows*n || len(m.Out) < rows*d || lo < 0 || hi > d {
		panic(fmt.Sprintf("kernels: MatMul slices too short for %d×%d·%d×%d", d, n, n, rows))
	}
	if lo >= hi || rows <= 0 {
		return
	}
	if n == 0 {
		for r := range rows {
			clear(m.Out[r*d+lo : r*d+hi])
		}
		return
	}
	w, x, out := m.W, m.X, m.Out
	i := lo
	for ; i+8 <= hi; i += 8 {
		r := 0
		for ; r+2 <= rows; r += 2 {
			dot4x2(&w[i*n], n, &x[r*n], n, n, &out[r*d+i], d)
			dot4x2(&w[(i+4)*n], n, &x[r*n], n, n, &out[r*d+i+4], d)
		}
		if r < rows {
			dot8x1(&w[i*n], n, &x[r*n], n, &out[r*d+i])
		}
	}
	for ; i+4 <= hi; i += 4 {
		r := 0
		for ; r+2 <= rows; r += 2 {
			dot4x2(&w[i*n], n, &x[r*n], n, n, &out[r*d+i], d)
		}
		if r < rows {
			for k := i; k < i+4; k++ {
				out[r*d+k] = dot1x1(&w[k*n], &x[r*n], n)
			}
		}
	}
	for ; i < hi; i++ {
		for r := range rows {
			out[r*d+i] = dot1x1(&w[i*n], &x[r*n], n)
		}
	}
}

// scores8x8 sets att[p] = scale·q·k_p over 8-float keys k_p = k[p*kvDim:]
// for p < n8 (a positive multiple of 8) and returns their maximum.
//
//go:noescape
func scores8x8(k *float32, kvDim int, n8 int, q *float32, scale float32, att *float32) float32

// expVec replaces att[p] by exp(att[p]-m) for p < n8 (a positive multiple
// of 8; results below e^expCutoff are 0) and returns their sum.
//
//go:noescape
func expVec(att *float32, n8 int, m float32) float32

// weightedVec sets out[:8] = inv·Σ_{p<n} att[p]·v[p*kvDim:][:8] (n > 0).
//
//go:noescape
func weightedVec(v *float32, kvDim int, att *float32, n int, inv float32, out *float32)

// scores8x8x2 is scores8x8 for two 8-float queries, q[0:8] and q[8:16],
// against the same keys, each key row loaded once: head 0's scores go to
// att, head 1's to att[ldatt:]. It returns each head's maximum.
//
//go:noescape
func scores8x8x2(k *float32, kvDim int, n8 int, q *float32, scale float32, att *float32, ldatt int) (m0, m1 float32)

// weightedVec2 is weightedVec for two heads' weights att0 and att1 over the
// same value rows, each row loaded once: out0[:8] and out1[:8].
//
//go:noescape
func weightedVec2(v *float32, kvDim int, att0, att1 *float32, n int, inv0, inv1 float32, out0, out1 *float32)

func asmAttend() attendFunc {
	if !hasAVX2FMA {
		return nil
	}
	return attendGroupAVX
}

// attendGroupAVX is attendGroup with vector code for heads of a multiple of
// 8 floats and at least 8 positions: the heads of the group are taken two
// at a time (attendPairAVX), so each key and value row is read once per
// pair; an odd last head runs alone (attendHeadAVX). Other shapes use the
// scalar attendGroup. Every head's output is bit for bit what
// attendHeadAVX computes for it alone.
func attendGroupAVX(out, q []float32, g int, t *Attention, kvOff, kvDim int, scale float32, att []float32) {
	hs := len(q) / g
	if hs == 0 || hs%8 != 0 || t.Len < 8 {
		attendGroup(out, q, g, t, kvOff, kvDim, scale, att)
		return
	}
	h := 0
	for ; h+2 <= g; h += 2 {
		attendPairAVX(out[h*hs:(h+2)*hs], q[h*hs:(h+2)*hs], t, kvOff, kvDim, scale, att)
	}
	if h < g {
		attendHeadAVX(out[h*hs:(h+1)*hs], q[h*hs:(h+1)*hs], t, kvOff, kvDim, scale, att)
	}
}

// attendPairAVX is attendHeadAVX for two query heads (q and out hold two
// heads of a multiple of 8 floats) over the same KV head, with at least 8
// positions; att is scratch of at least 2·t.Len floats.
func attendPairAVX(out, q []float32, t *Attention, kvOff, kvDim int, scale float32, att []float32) {
	n, hs := t.Len, len(q)/2
	if kvDim < hs || kvOff < 0 || len(t.Keys) < (n-1)*kvDim+kvOff+hs || len(t.Values) < (n-1)*kvDim+kvOff+hs || len(att) < 2*n || len(out) < 2*hs {
		panic("kernels: Attention slices too short")
	}
	a0, a1 := att[:n], att[n:2*n]
	q0, q1 := q[:hs], q[hs:2*hs]
	n8 := n &^ 7
	var m0, m1 float32
	if hs == 8 {
		m0, m1 = scores8x8x2(&t.Keys[kvOff], kvDim, n8, &q[0], scale, &a0[0], n)
		for p := n8; p < n; p++ {
			k := t.Keys[kvOff+p*kvDim : kvOff+p*kvDim+8]
			s0, s1 := dot(q0, k)*scale, dot(q1, k)*scale
			a0[p], a1[p] = s0, s1
			m0, m1 = max32(m0, s0), max32(m1, s1)
		}
	} else {
		m0, m1 = float32(math.Inf(-1)), float32(math.Inf(-1))
		for p := range n {
			k := &t.Keys[kvOff+p*kvDim]
			s0, s1 := dot1x1(k, &q0[0], hs)*scale, dot1x1(k, &q1[0], hs)*scale
			a0[p], a1[p] = s0, s1
			m0, m1 = max32(m0, s0), max32(m1, s1)
		}
	}
	sum0, sum1 := expVec(&a0[0], n8, m0), expVec(&a1[0], n8, m1)
	for p := n8; p < n; p++ {
		e0, e1 := expf(a0[p]-m0), expf(a1[p]-m1)
		a0[p], a1[p] = e0, e1
		sum0 += e0
		sum1 += e1
	}
	for c := 0; c < hs; c += 8 {
		weightedVec2(&t.Values[kvOff+c], kvDim, &a0[0], &a1[0], n, 1/sum0, 1/sum1, &out[c], &out[hs+c])
	}
}

// attendHeadAVX is attendHead with vector code for heads of a multiple of
// 8 floats and at least 8 positions: scores (eight positions at a time for
// 8-float heads, stories260K; one dot tile per position otherwise), a
// vector exp, and the weighted sum of values, 8 output floats at a time.
// Positions past the last multiple of 8 use the scalar exp (and, for
// 8-float heads, the scalar dot); other shapes use attendHead.
func attendHeadAVX(out, q []float32, t *Attention, kvOff, kvDim int, scale float32, att []float32) {
	n, hs := t.Len, len(q)
	if hs == 0 || hs%8 != 0 || n < 8 {
		attendHead(out, q, t, kvOff, kvDim, scale, att)
		return
	}
	if kvDim < hs || kvOff < 0 || len(t.Keys) < (n-1)*kvDim+kvOff+hs || len(t.Values) < (n-1)*kvDim+kvOff+hs || len(att) < n || len(out) < hs {
		panic("kernels: Attention slices too short")
	}
	n8 := n &^ 7
	var m float32
	if hs == 8 {
		m = scores8x8(&t.Keys[kvOff], kvDim, n8, &q[0], scale, &att[0])
		for p := n8; p < n; p++ {
			s := dot(q, t.Keys[kvOff+p*kvDim:kvOff+p*kvDim+8]) * scale
			att[p] = s
			m = max32(m, s)
		}
	} else {
		m = float32(math.Inf(-1))
		for p := range n {
			s := dot1x1(&t.Keys[kvOff+p*kvDim], &q[0], hs) * scale
			att[p] = s
			m = max32(m, s)
		}
	}
	sum := expVec(&att[0], n8, m)
	for p := n8; p < n; p++ {
		e := expf(att[p] - m)
		att[p] = e
		sum += e
	}
	for c := 0; c < hs; c += 8 {
		weightedVec(&t.Values[kvOff+c], kvDim, &att[0], n, 1/sum, &out[c])
	}
}

// max32 is max for scores, without max's NaN handling (a branchy sequence).
func max32(m, s float32) float32 {
	if s > m {
		return s
	}
	return m
}
