package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// randQ8Blocks returns nb random activation blocks; extreme sets every
// value to ±127, the largest VPMADDUBSW pair sums.
func randQ8Blocks(rng *rand.Rand, nb int, extreme bool) []q8Block {
	x := make([]float32, 32*nb)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()))
	}
	out := make([]q8Block, nb)
	quantizeQ8_0(x, out)
	if extreme {
		for b := range out {
			for j := range out[b].qs {
				out[b].qs[j] = int8(127 - 254*rng.IntN(2))
			}
		}
	}
	return out
}

// randQuantBlocks returns nb random blocks of size bytes: an f16 scale
// and random bytes (every int8 from -128, every nibble), or, with extreme,
// every value byte fill.
func randQuantBlocks(rng *rand.Rand, nb, size int, extreme bool, fill byte) []byte {
	w := make([]byte, nb*size)
	for b := range nb {
		blk := w[b*size : (b+1)*size]
		binary.LittleEndian.PutUint16(blk, FloatToHalf(float32(rng.NormFloat64()*0.01)))
		for j := 2; j < size; j++ {
			blk[j] = byte(rng.IntN(256))
			if extreme {
				blk[j] = fill
			}
		}
	}
	return w
}

// TestQuantDotAsm checks the assembly Q8_0 and Q4_0 dot products against
// the Go ones bit for bit (their integer block sums are exact and the
// float accumulation is the same), on random blocks and on the extremes
// (weights -128 or nibble 0, activations ±127), for 0 to 40 blocks.
func TestQuantDotAsm(t *testing.T) {
	if !hasQuantAVX2 {
		t.Skip("no AVX2/F16C assembly in this build or on this CPU")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for nb := range 41 {
		for _, extreme := range []bool{false, true} {
			x := randQ8Blocks(rng, nb, extreme)
			w8 := randQuantBlocks(rng, nb, 34, extreme, 0x80)
			if got, want := dotQ8_0Fast(w8, x), dotQ8_0(w8, x); math.Float32bits(got) != math.Float32bits(want) {
				t.Errorf("Q8_0 nb=%d extreme=%v: asm %g, Go %g", nb, extreme, got, want)
			}
			w4 := randQuantBlocks(rng, nb, 18, extreme, 0x00)
			if got, want := dotQ4_0Fast(w4, x), dotQ4_0(w4, x); math.Float32bits(got) != math.Float32bits(want) {
				t.Errorf("Q4_0 nb=%d extreme=%v: asm %g, Go %g", nb, extreme, got, want)
			}
		}
	}
}

// BenchmarkQuantDot measures one weight row of 4864 columns (Qwen2.5-0.5B's
// FFN width) times one Q8_0 activation row, Go and assembly, and a Q4_K row
// or Q6_K row of 4864 columns times a Q8_K row.
func BenchmarkQuantDot(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	const nb = 4864 / 32
	x := randQ8Blocks(rng, nb, false)
	for _, c := range []struct {
		name   string
		size   int
		goDot  func([]byte, []q8Block) float32
		asmDot func([]byte, []q8Block) float32
	}{{"Q8_0", 34, dotQ8_0, dotQ8_0Fast}, {"Q4_0", 18, dotQ4_0, dotQ4_0Fast}} {
		w := randQuantBlocks(rng, nb, c.size, false, 0)
		b.Run(c.name+"/go", func(b *testing.B) {
			for b.Loop() {
				c.goDot(w, x)
			}
			b.ReportMetric(float64(b.N)*32*nb/b.Elapsed().Seconds()/1e9, "GMAC/s")
		})
		if hasQuantAVX2 {
			b.Run(c.name+"/asm", func(b *testing.B) {
				for b.Loop() {
					c.asmDot(w, x)
				}
				b.ReportMetric(float64(b.N)*32*nb/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
		}
	}
	xf := make([]float32, 4864)
	for i := range xf {
		xf[i] = float32(rng.NormFloat64())
	}
	wk := Quantize(Q4_K, make([]float32, 4864*1))
	for i := range wk {
		wk[i] = byte(rng.IntN(256))
	}
	xk := make([]q8KBlock, 4864/256)
	quantizeQ8K(xf, xk)
	w6 := make([]byte, 210*4864/256)
	for i := range w6 {
		w6[i] = byte(rng.IntN(256))
	}
	for _, c := range []struct {
		name string
		sum  func([]byte, *[256]int8) int32
		ok   bool
	}{{"Q6_K/go", q6KSumGo, true}, {"Q6_K/asm", q6KSumAsmForBench, hasQuantAVX2}} {
		if !c.ok {
			continue
		}
		b.Run(c.name, func(b *testing.B) {
			defer func(f func([]byte, *[256]int8) int32) { q6KSum = f }(q6KSum)
			q6KSum = c.sum
			for b.Loop() {
				dotQ6K(w6, xk)
			}
			b.ReportMetric(float64(b.N)*4864/b.Elapsed().Seconds()/1e9, "GMAC/s")
		})
	}
	for _, c := range []struct {
		name string
		sum  func([]byte, *[256]int8, *[8]uint8) int32
		ok   bool
	}{{"Q4_K/go", q4KSumGo, true}, {"Q4_K/asm", q4KSumAsmForBench, hasQuantAVX2}} {
		if !c.ok {
			continue
		}
		b.Run(c.name, func(b *testing.B) {
			defer func(f func([]byte, *[256]int8, *[8]uint8) int32) { q4KSum = f }(q4KSum)
			q4KSum = c.sum
			for b.Loop() {
				dotQ4K(wk, xk)
			}
			b.ReportMetric(float64(b.N)*4864/b.Elapsed().Seconds()/1e9, "GMAC/s")
		})
	}
}

// TestQ4KSumAsm checks the assembly Q4_K group sums against the Go ones on
// random blocks and on the extremes (nibbles 15, scales 63, activations
// ±127 or -128 from quantizeQ8K's clamp-free low end).
func TestQ4KSumAsm(t *testing.T) {
	if !hasQuantAVX2 {
		t.Skip("no AVX2/F16C assembly in this build or on this CPU")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 200 {
		extreme := i%4 == 0
		qs := make([]byte, 128)
		var q8 [256]int8
		var sc [8]uint8
		for j := range qs {
			qs[j] = byte(rng.IntN(256))
			if extreme {
				qs[j] = 0xff
			}
		}
		for j := range q8 {
			q8[j] = int8(rng.IntN(256) - 128)
			if extreme {
				q8[j] = int8(-128 + 255*rng.IntN(2))
			}
		}
		for j := range sc {
			sc[j] = uint8(rng.IntN(64))
			if extreme {
				sc[j] = 63
			}
		}
		if got, want := q4KSumAsmForBench(qs, &q8, &sc), q4KSumGo(qs, &q8, &sc); got != want {
			t.Fatalf("block %d: asm %d, Go %d", i, got, want)
		}
	}
}

// TestQ6KSumAsm checks the assembly Q6_K group sums against the Go ones on
// random blocks (every 6-bit value, every int8 scale) and on the extremes
// (all values -32 or all 31, scales -128, activations ±127 or -128).
func TestQ6KSumAsm(t *testing.T) {
	if !hasQuantAVX2 {
		t.Skip("no AVX2/F16C assembly in this build or on this CPU")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for i := range 300 {
		blk := make([]byte, 210)
		var q8 [256]int8
		for j := range blk {
			blk[j] = byte(rng.IntN(256))
		}
		for j := range q8 {
			q8[j] = int8(rng.IntN(256) - 128)
		}
		if i%3 != 0 {
			fill := byte(0xff * (i % 3 / 2))
			for j := range 192 {
				blk[j] = fill
			}
			for j := 192; j < 208; j++ {
				blk[j] = 0x80
			}
			for j := range q8 {
				q8[j] = int8(-128 + 255*rng.IntN(2))
			}
		}
		if got, want := q6KSumAsmForBench(blk, &q8), q6KSumGo(blk, &q8); got != want {
			t.Fatalf("block %d: asm %d, Go %d", i, got, want)
		}
	}
}
