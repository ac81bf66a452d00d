package sampler

import (
	"cmp"
	"math"
	"slices"
)

// RNG is llama2.c's xorshift64* generator. The zero value is degenerate
// (it stays 0); use NewRNG.
type RNG struct{ state uint64 }

// zeroSeed replaces seed 0, on which xorshift would be stuck at zero.
const zeroSeed = 0x9E3779B97F4A7C15

// NewRNG seeds a generator; run.c seeds with the user's seed as is.
func NewRNG(seed uint64) RNG {
	if seed == 0 {
		seed = zeroSeed
	}
	return RNG{state: seed}
}

// Uint32 advances the generator.
func (r *RNG) Uint32() uint32 {
	r.state ^= r.state >> 12
	r.state ^= r.state << 25
	r.state ^= r.state >> 27
	return uint32((r.state * 0x2545F4914F6CDD1D) >> 32)
}

// Float32 returns a number in [0, 1) with 24 random bits.
func (r *RNG) Float32() float32 { return float32(r.Uint32()>>8) / 16777216 }

// Sampler holds one request's sampling settings, random state and scratch.
// It is not safe for concurrent use.
type Sampler struct {
	temperature float32
	topP        float32
	rng         RNG
	cands       []candidate
}

type candidate struct {
	index int
	prob  float32
}

// New returns a sampler. temperature 0 is greedy; topP outside (0, 1)
// samples from the whole distribution.
func New(temperature, topP float32, seed uint64) *Sampler {
	return &Sampler{temperature: temperature, topP: topP, rng: NewRNG(seed)}
}

// Sample returns the next token. It overwrites logits with probabilities
// (except at temperature 0).
func (s *Sampler) Sample(logits []float32) int {
	if s.temperature == 0 {
		return argmax(logits)
	}
	for i := range logits {
		logits[i] /= s.temperature
	}
	softmax(logits)
	coin := s.rng.Float32()
	if s.topP <= 0 || s.topP >= 1 {
		return multinomial(logits, coin)
	}
	return s.nucleus(logits, coin)
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// softmax matches run.c: subtract the maximum, exponentiate, normalise.
func softmax(x []float32) {
	m := x[0]
	for _, v := range x[1:] {
		if v > m {
			m = v
		}
	}
	var sum float32
	for i, v := range x {
		e := float32(math.Exp(float64(v - m)))
		x[i] = e
		sum += e
	}
	for i := range x {
		x[i] /= sum
	}
}

func multinomial(probs []float32, coin float32) int {
	var cdf float32
	for i, p := range probs {
		cdf += p
		if coin < cdf {
			return i
		}
	}
	return len(probs) - 1
}

// nucleus samples from the smallest set of most likely tokens whose
// probabilities exceed topP, after dropping tokens that cannot be in it.
func (s *Sampler) nucleus(probs []float32, coin float32) int {
	cutoff := (1 - s.topP) / float32(len(probs)-1)
	c := s.cands[:0]
	for i, p := range probs {
		if p >= cutoff {
			c = append(c, candidate{i, p})
		}
	}
	s.cands = c
	if len(c) == 0 { // only with a one-token vocabulary
		return argmax(probs)
	}
	// Stable, like the merge sort behind glibc's qsort for such arrays.
	slices.SortStableFunc(c, func(a, b candidate) int { return cmp.Compare(b.prob, a.prob) })
	var cum float32
	last := len(c) - 1
	for i := range c {
		cum += c[i].prob
		if cum > s.topP {
			last = i
			break
		}
	}
	r := coin * cum
	var cdf float32
	for i := range last + 1 {
		cdf += c[i].prob
		if r < cdf {
			return c[i].index
		}
	}
	return c[last].index
}
