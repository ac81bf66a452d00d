package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestQuantRoundTrip checks every weight type: decoding what Quantize
// encodes gives back the values within the type's precision, and the
// quantized matrix product agrees with the product of the decoded weights.
func TestQuantRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n, d, rows = 512, 24, 3
	w := make([]float32, n*d)
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	x := make([]float32, rows*n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	pool := NewPool(2)
	defer pool.Close()
	tol := map[DType]float64{F32: 0, F16: 3e-3, BF16: 0.025, Q8_0: 0.02, Q4_0: 0.35, Q4_K: 0.3, Q6_K: 0.09, Q4_1: 0.3, Q5_0: 0.17, Q5_1: 0.15, Q5_K: 0.15}
	for _, typ := range []DType{F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, Q4_1, Q5_0, Q5_1, Q5_K} {
		raw := Quantize(typ, w)
		back := make([]float32, len(w))
		Dequantize(typ, raw, back)
		worst := 0.0
		for i := range w {
			worst = max(worst, math.Abs(float64(back[i]-w[i])))
		}
		if worst > tol[typ] {
			t.Errorf("%v: round trip error %g > %g", typ, worst, tol[typ])
		}
		c := NewScalarCPU(pool)
		got := make([]float32, rows*d)
		job := MatMul{Out: got, X: x, Rows: rows, N: n, D: d, Type: typ, Raw: raw}
		if typ == F32 {
			job.W, job.Raw = back, nil
		}
		c.MatMul(job)
		for r := range rows {
			for o := range d {
				want := 0.0
				for j := range n {
					want += float64(back[o*n+j]) * float64(x[r*n+j])
				}
				// The activations are quantized too: Q8 rows lose about
				// 1/254 of each row's largest value per element.
				if e := math.Abs(float64(got[r*d+o]) - want); e > 0.05*math.Sqrt(n)+1e-3 {
					t.Errorf("%v: out[%d][%d] = %g, decoded weights give %g", typ, r, o, got[r*d+o], want)
				}
			}
		}
	}
}

func TestHalf(t *testing.T) {
	for _, c := range []struct {
		f float32
		h uint16
	}{{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {1e6, 0x7c00}, {5.960464477539063e-08, 1}, {0.33325195, 0x3555}, {0, 0}} {
		if got := FloatToHalf(c.f); got != c.h {
			t.Errorf("FloatToHalf(%g) = %#x, want %#x", c.f, got, c.h)
		}
		if got := HalfToFloat(c.h); c.h != 0x7c00 && got != c.f {
			t.Errorf("HalfToFloat(%#x) = %g, want %g", c.h, got, c.f)
		}
	}
	for i := range 1 << 16 {
		h := uint16(i)
		if h&0x7c00 == 0x7c00 {
			continue
		}
		if got := FloatToHalf(HalfToFloat(h)); got != h && !(h == 0x8000 && got == 0x8000) {
			t.Fatalf("half %#x round trips to %#x", h, got)
		}
	}
}

// TestQuantizeQ8_0Fast checks the activations' Q8_0 quantizer (assembly
// where the CPU allows) against quantizeQ8_0 bit for bit: random blocks of
// every magnitude, a zero block, blocks whose values fall exactly halfway
// between two steps (ties go to even), and negative zeros.
func TestQuantizeQ8_0Fast(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const nb = 64
	for trial := range 20 {
		x := make([]float32, 32*nb)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * math.Exp(4*rng.NormFloat64()))
		}
		for j := range 32 {
			x[j] = 0
			x[32+j] = float32(j%2*2-1) * (float32(j) + 0.5) // amax 127 below: step 1, ties
			x[64+j] = float32(math.Copysign(0, -1))
		}
		x[32+31] = 127
		x[64+5] = 1e-30
		var want, got [nb]q8Block
		quantizeQ8_0(x, want[:])
		quantizeQ8_0Fast(x, got[:])
		for b := range want {
			if math.Float32bits(got[b].d) != math.Float32bits(want[b].d) || got[b].qs != want[b].qs {
				t.Fatalf("trial %d block %d: got %v %v, want %v %v", trial, b, got[b].d, got[b].qs, want[b].d, want[b].qs)
			}
		}
	}
}
