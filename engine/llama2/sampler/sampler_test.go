package sampler

import (
	"math"
	"math/rand/v2"
	"slices"
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
	s := New(Options{TopP: 0.9, Seed: 1}, nil)
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
		if got := New(Options{Temperature: 1, TopP: 0.7, Seed: seed}, nil).Sample(logits()); got != want {
			t.Fatalf("seed %d coin %v: got %d, want %d", seed, coin, got, want)
		}
	}
	// top_p 1: plain multinomial over all four.
	counts := make([]int, 4)
	for seed := uint64(1); seed < 4001; seed++ {
		counts[New(Options{Temperature: 1, TopP: 1, Seed: seed}, nil).Sample(logits())]++
	}
	for i, p := range probs {
		if got := float64(counts[i]) / 4000; math.Abs(got-p) > 0.03 {
			t.Errorf("token %d frequency %.3f, want about %.2f", i, got, p)
		}
	}
}

// logitsOf returns logits (at T=1) whose probabilities are probs.
func logitsOf(probs ...float64) []float32 {
	l := make([]float32, len(probs))
	for i, p := range probs {
		l[i] = float32(math.Log(p))
	}
	return l
}

// frequencies samples 4000 seeds with o and returns each token's share.
func frequencies(o Options, probs ...float64) []float64 {
	f := make([]float64, len(probs))
	for seed := uint64(1); seed <= 4000; seed++ {
		o.Seed = seed
		f[New(o, nil).Sample(logitsOf(probs...))] += 1.0 / 4000
	}
	return f
}

func checkShares(t *testing.T, what string, got []float64, want ...float64) {
	t.Helper()
	for i := range want {
		if math.Abs(got[i]-want[i]) > 0.03 {
			t.Errorf("%s: token %d share %.3f, want about %.3f (all: %.3f)", what, i, got[i], want[i], got)
		}
	}
}

// The distribution of the tests below: probabilities 0.05, 0.5, 0.15, 0.3.
var probs4 = []float64{0.05, 0.5, 0.15, 0.3}

func TestTopK(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for seed := uint64(1); seed < 300; seed++ {
		l := make([]float32, 50)
		for i := range l {
			l[i] = 4 * r.Float32()
		}
		want := argmax(l)
		if got := New(Options{Temperature: 1, TopK: 1, Seed: seed}, nil).Sample(l); got != want {
			t.Fatalf("top_k 1: got %d, want the argmax %d", got, want)
		}
	}
	// top_k 2 keeps 0.5 and 0.3, renormalised to 0.625 and 0.375.
	checkShares(t, "top_k 2", frequencies(Options{Temperature: 1, TopK: 2}, probs4...), 0, 0.625, 0, 0.375)
	// Ties with the k-th token stay.
	checkShares(t, "top_k 1 tied", frequencies(Options{Temperature: 1, TopK: 1}, 0.3, 0.3, 0.3, 0.1), 1.0/3, 1.0/3, 1.0/3, 0)
	// top_k 3 then top_p 0.7: 0.5, 0.3, 0.15 renormalised; the cumulative
	// sum passes 0.7 at 0.3, so r = coin·0.8 picks 0.5 below 0.5.
	for seed := uint64(1); seed < 200; seed++ {
		rng := NewRNG(seed)
		want := 1
		if rng.Float32()*0.8 >= 0.5 {
			want = 3
		}
		if got := New(Options{Temperature: 1, TopK: 3, TopP: 0.7, Seed: seed}, nil).Sample(logitsOf(probs4...)); got != want {
			t.Fatalf("top_k 3 top_p 0.7 seed %d: got %d, want %d", seed, got, want)
		}
	}
}

func TestMinP(t *testing.T) {
	// min_p 0.35: at least 0.175, so 0.5 and 0.3 remain.
	checkShares(t, "min_p 0.35", frequencies(Options{Temperature: 1, MinP: 0.35}, probs4...), 0, 0.625, 0, 0.375)
	// min_p 0.2: at least 0.1, so 0.05 goes.
	checkShares(t, "min_p 0.2", frequencies(Options{Temperature: 1, MinP: 0.2}, probs4...), 0, 0.5/0.95, 0.15/0.95, 0.3/0.95)
	checkShares(t, "min_p 1", frequencies(Options{Temperature: 1, MinP: 1}, probs4...), 0, 1, 0, 0)
}

// greedyRun samples n tokens at temperature 0 from the same logits each
// step.
func greedyRun(o Options, prompt []int, logits []float32, n int) []int {
	s := New(o, prompt)
	var out []int
	for range n {
		out = append(out, s.Sample(slices.Clone(logits)))
	}
	return out
}

func TestPenalties(t *testing.T) {
	for _, tc := range []struct {
		name   string
		o      Options
		prompt []int
		logits []float32
		want   []int
	}{
		{"none", Options{}, []int{0}, []float32{2, 1.9}, []int{0, 0, 0}},
		{"neutral", Options{RepetitionPenalty: 1}, []int{0}, []float32{2, 1.9}, []int{0, 0, 0}},
		// 2/1.2 < 1.9: a prompt token is divided down; once both are
		// seen, both are: 2/1.2 > 1.9/1.2.
		{"repetition of the prompt", Options{RepetitionPenalty: 1.2}, []int{0}, []float32{2, 1.9}, []int{1, 0, 0}},
		// A negative logit is multiplied down: -1·1.2 < -1.05.
		{"repetition negative", Options{RepetitionPenalty: 1.2}, []int{0}, []float32{-1, -1.05}, []int{1, 0, 0}},
		// Tokens count once they are sampled.
		{"repetition of the output", Options{RepetitionPenalty: 1.2}, nil, []float32{2, 1.9}, []int{0, 1, 0}},
		// Below 1 it favours what was seen: 1.9/0.5 > 2.
		{"repetition below 1", Options{RepetitionPenalty: 0.5}, []int{0}, []float32{1.9, 2}, []int{0, 0, 0}},
		// 3-0.3n against 2.5-0.3m.
		{"frequency", Options{FrequencyPenalty: 0.3}, []int{0}, []float32{3, 2.5}, []int{0, 0, 1, 0, 1}},
		{"frequency negative", Options{FrequencyPenalty: -0.3}, nil, []float32{2.5, 3}, []int{1, 1, 1}},
		// 3-0.6, 2.5-0.6, 2.45-0.6 once each is sampled.
		{"presence", Options{PresencePenalty: 0.6}, []int{0}, []float32{3, 2.5, 2.45}, []int{0, 1, 2, 0, 0}},
	} {
		if got := greedyRun(tc.o, tc.prompt, tc.logits, len(tc.want)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestNeutralValuesChangeNothing samples many steps with the extras at
// their neutral values and without them: the tokens must be the same.
func TestNeutralValuesChangeNothing(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	for _, base := range []Options{{Temperature: 1}, {Temperature: 0.8, TopP: 0.9}, {}} {
		neutral := base
		neutral.RepetitionPenalty, neutral.TopK = 1, 64 // top_k of the whole vocabulary
		for seed := uint64(1); seed < 50; seed++ {
			base.Seed, neutral.Seed = seed, seed
			a, b := New(base, []int{1, 2, 3}), New(neutral, []int{1, 2, 3})
			for range 20 {
				l := make([]float32, 64)
				for i := range l {
					l[i] = 3 * r.Float32()
				}
				if x, y := a.Sample(slices.Clone(l)), b.Sample(l); x != y {
					t.Fatalf("%+v seed %d: %d without the extras, %d with neutral ones", base, seed, x, y)
				}
			}
		}
	}
}

func TestKthLargest(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for range 500 {
		v := make([]float32, 1+r.IntN(40))
		for i := range v {
			v[i] = float32(r.IntN(8)) // many ties
		}
		sorted := slices.Clone(v)
		slices.Sort(sorted)
		slices.Reverse(sorted)
		k := 1 + r.IntN(len(v))
		if got := kthLargest(slices.Clone(v), k); got != sorted[k-1] {
			t.Fatalf("kthLargest(%v, %d) = %v, want %v", v, k, got, sorted[k-1])
		}
	}
}
