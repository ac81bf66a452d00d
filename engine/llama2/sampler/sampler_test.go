package sampler

import (
	"math"
	"testing"
)

func TestRNGMatchesXorshift64Star(t *testing.T) {
	// Independent transcription of run.c's random_u32 for seed 42.
	state := uint64(42)
	next := func() uint32 {
		state ^= state >> 12
		state ^= state << 25
		state ^= state >> 27
		return uint32((state * 0x2545F4914F6CDD1D) >> 32)
	}
	r := NewRNG(42)
	for i := range 1000 {
		if got, want := r.Uint32(), next(); got != want {
			t.Fatalf("draw %d = %d, want %d", i, got, want)
		}
	}
	f := NewRNG(7)
	for range 1000 {
		if v := f.Float32(); v < 0 || v >= 1 {
			t.Fatalf("Float32 = %v", v)
		}
	}
	z := NewRNG(0)
	if z.Uint32() == 0 && z.Uint32() == 0 {
		t.Fatal("seed 0 is stuck at zero")
	}
}

func TestGreedyIsFirstArgmax(t *testing.T) {
	s := New(0, 0.9, 1)
	if got := s.Sample([]float32{1, 3, 2, 3}); got != 1 {
		t.Fatalf("argmax = %d, want 1", got)
	}
}

// TestNucleus checks the top-p walk on a distribution small enough to
// follow by hand: probabilities 0.5, 0.3, 0.15, 0.05 (as logits at T=1).
func TestNucleus(t *testing.T) {
	probs := []float64{0.05, 0.5, 0.15, 0.3}
	logits := func() []float32 {
		l := make([]float32, len(probs))
		for i, p := range probs {
			l[i] = float32(math.Log(p))
		}
		return l
	}
	// top_p 0.7: sorted 0.5 (1), 0.3 (3) → cumulative 0.8 > 0.7, cut after
	// index 1. r = coin*0.8: token 1 if r < 0.5, else token 3.
	for seed := uint64(1); seed < 200; seed++ {
		rng := NewRNG(seed)
		coin := rng.Float32()
		want := 1
		if coin*0.8 >= 0.5 {
			want = 3
		}
		if got := New(1, 0.7, seed).Sample(logits()); got != want {
			t.Fatalf("seed %d coin %v: got %d, want %d", seed, coin, got, want)
		}
	}
	// top_p 1: plain multinomial over all four.
	counts := make([]int, 4)
	for seed := uint64(1); seed < 4001; seed++ {
		counts[New(1, 1, seed).Sample(logits())]++
	}
	for i, p := range probs {
		if got := float64(counts[i]) / 4000; math.Abs(got-p) > 0.03 {
			t.Errorf("token %d frequency %.3f, want about %.2f", i, got, p)
		}
	}
}
