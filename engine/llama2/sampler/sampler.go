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

// Options configure a Sampler. Temperature, TopP and Seed are run.c's;
// the others are vLLM's sampling parameters, each off at its zero value.
type Options struct {
	// Temperature divides the logits; 0 is greedy (argmax).
	Temperature float32
	// TopP keeps the most likely tokens whose probabilities add up to more
	// than TopP (run.c's nucleus); outside (0, 1) it is off.
	TopP float32
	// TopK keeps the TopK most likely tokens (and those tied with the last
	// of them); 0 or less is off.
	TopK int
	// MinP keeps the tokens at least MinP times as likely as the most
	// likely one; 0 is off.
	MinP float32
	// RepetitionPenalty divides the positive logits and multiplies the
	// others of every token seen in the prompt or the output so far; 0 and
	// 1 are off.
	RepetitionPenalty float32
	// FrequencyPenalty is subtracted from a token's logit once per time the
	// token was sampled so far; 0 is off.
	FrequencyPenalty float32
	// PresencePenalty is subtracted from the logit of every token sampled
	// so far; 0 is off.
	PresencePenalty float32
	// Seed seeds the random number generator.
	Seed uint64
}

// Sampler holds one request's sampling settings, random state, token
// history (only with penalties) and scratch. It is not safe for
// concurrent use.
type Sampler struct {
	o       Options
	rng     RNG
	cands   []candidate
	scratch []float32
	// seen records, with penalties on, every token of the prompt and the
	// output so far.
	seen map[int]*seenToken
}

type candidate struct {
	index int
	prob  float32
}

// seenToken is one token's history: in the prompt, and how many times it
// was sampled.
type seenToken struct {
	inPrompt bool
	count    int
}

// New returns a sampler for one sequence whose prompt tokens are prompt
// (used by RepetitionPenalty only).
func New(o Options, prompt []int) *Sampler {
	if o.RepetitionPenalty == 1 {
		o.RepetitionPenalty = 0
	}
	s := &Sampler{o: o, rng: NewRNG(o.Seed)}
	if s.penalties() {
		s.seen = make(map[int]*seenToken)
		if o.RepetitionPenalty != 0 {
			for _, t := range prompt {
				s.token(t).inPrompt = true
			}
		}
	}
	return s
}

func (s *Sampler) penalties() bool {
	return s.o.RepetitionPenalty != 0 || s.o.FrequencyPenalty != 0 || s.o.PresencePenalty != 0
}

func (s *Sampler) token(t int) *seenToken {
	e := s.seen[t]
	if e == nil {
		e = &seenToken{}
		s.seen[t] = e
	}
	return e
}

// Sample returns the next token and records it as sampled. It overwrites
// logits: with the penalties applied, then (except at temperature 0) with
// probabilities.
func (s *Sampler) Sample(logits []float32) int {
	if s.seen != nil {
		s.penalize(logits)
	}
	tok := s.pick(logits)
	if s.seen != nil {
		s.token(tok).count++
	}
	return tok
}

// penalize applies vLLM's penalties to the logits of the tokens seen:
// repetition first, then frequency and presence.
func (s *Sampler) penalize(logits []float32) {
	rp, fp, pp := s.o.RepetitionPenalty, s.o.FrequencyPenalty, s.o.PresencePenalty
	for t, e := range s.seen {
		if t < 0 || t >= len(logits) {
			continue
		}
		l := logits[t]
		if rp != 0 {
			if l > 0 {
				l /= rp
			} else {
				l *= rp
			}
		}
		if e.count > 0 {
			l -= fp*float32(e.count) + pp
		}
		logits[t] = l
	}
}

// pick returns the next token from penalized logits.
func (s *Sampler) pick(logits []float32) int {
	if s.o.Temperature == 0 {
		return argmax(logits)
	}
	for i := range logits {
		logits[i] /= s.o.Temperature
	}
	softmax(logits)
	coin := s.rng.Float32()
	if (s.o.TopK <= 0 || s.o.TopK >= len(logits)) && s.o.MinP == 0 {
		if s.o.TopP <= 0 || s.o.TopP >= 1 {
			return multinomial(logits, coin)
		}
		return s.nucleus(logits, coin)
	}
	return s.filtered(logits, coin)
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
	topP := s.o.TopP
	cutoff := (1 - topP) / float32(len(probs)-1)
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
	return walkSorted(c, topP, coin)
}

// walkSorted sorts c by probability, most likely first (stable, like the
// merge sort behind glibc's qsort for such arrays), keeps the shortest
// prefix whose cumulative probability exceeds limit (all of c if none
// does), and walks the prefix's CDF with coin scaled to its mass.
func walkSorted(c []candidate, limit, coin float32) int {
	slices.SortStableFunc(c, func(a, b candidate) int { return cmp.Compare(b.prob, a.prob) })
	var cum float32
	last := len(c) - 1
	for i := range c {
		cum += c[i].prob
		if cum > limit {
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

// filtered samples with min-p or top-k on, in vLLM's order: min-p (tokens
// at least MinP times as likely as the most likely), then top-k among
// those, then top-p (run.c's rule, over the kept tokens' renormalised
// probabilities), then the CDF walk over the kept tokens, most likely
// first.
func (s *Sampler) filtered(probs []float32, coin float32) int {
	floor := s.o.MinP * probs[argmax(probs)]
	c := s.cands[:0]
	for i, p := range probs {
		if p >= floor && p > 0 {
			c = append(c, candidate{i, p})
		}
	}
	if k := s.o.TopK; k > 0 && len(c) > k {
		s.scratch = s.scratch[:0]
		for _, x := range c {
			s.scratch = append(s.scratch, x.prob)
		}
		kth := kthLargest(s.scratch, k)
		kept := c[:0]
		for _, x := range c {
			if x.prob >= kth { // ties with the k-th stay, as in vLLM
				kept = append(kept, x)
			}
		}
		c = kept
	}
	s.cands = c
	if len(c) == 0 { // only with NaN probabilities
		return argmax(probs)
	}
	limit := float32(math.Inf(1))
	if topP := s.o.TopP; topP > 0 && topP < 1 {
		var mass float32
		for _, x := range c {
			mass += x.prob
		}
		limit = topP * mass
	}
	return walkSorted(c, limit, coin)
}

// kthLargest returns the k-th largest value of v (1 <= k <= len(v)),
// reordering v: Hoare's selection, expected O(len(v)).
func kthLargest(v []float32, k int) float32 {
	lo, hi, want := 0, len(v)-1, k-1 // want: index in descending order
	for lo < hi {
		// Median of three as the pivot keeps sorted input linear.
		mid := lo + (hi-lo)/2
		a, b, c := v[lo], v[mid], v[hi]
		pivot := max(min(a, b), min(max(a, b), c))
		i, j := lo, hi
		for i <= j {
			for v[i] > pivot {
				i++
			}
			for v[j] < pivot {
				j--
			}
			if i <= j {
				v[i], v[j] = v[j], v[i]
				i++
				j--
			}
		}
		switch {
		case want <= j:
			hi = j
		case want >= i:
			lo = i
		default:
			return v[want]
		}
	}
	return v[want]
}
