package tokenizer

import "context"

// llama2.c merges, over and over, the adjacent pair whose joined piece is
// the best-scoring token (the leftmost pair on ties) until no pair joins.
// Rescanning every pair after each merge takes O(n²) time; merge below
// gets the same result in O(n log n): the tokens form a doubly linked
// list, and a heap holds every adjacent pair that joins, best score first,
// then leftmost. A merge changes only the pairs around the merged token,
// so it pushes at most two new pairs; pairs it ends are left in the heap
// and skipped when they come out (their symbols' versions have moved on).

// symbol is one token of the list being merged. Symbols keep their index,
// which is their order in the text, so the leftmost of two pairs is the one
// whose left symbol has the lower index.
type symbol struct {
	tok        int32
	prev, next int32  // indices of the neighbours, -1 at the ends
	version    uint32 // bumped whenever the symbol merges or is merged away
}

// candidate is a pair that may merge: symbols left and left's next, which
// join into token id, valid while both symbols have the recorded versions.
// key orders the heap, lowest first: the score, best first, then left.
type candidate struct {
	key        uint64
	right, id  int32
	lver, rver uint32
}

func (c *candidate) left() int32 { return int32(uint32(c.key)) }

// heapKey orders candidates by score, highest first, then leftmost: the
// high half is the score's bits made to sort as unsigned integers in the
// reverse order of the floats, the low half the left symbol's index.
// Scores are compared as llama2.c compares them, so -0 ties with +0.
func heapKey(score float32, left int32) uint64 {
	return uint64(scorePriority(score))<<32 | uint64(uint32(left))
}

// minScore is llama2.c's floor: pairs scoring no higher never merge (nor
// do pairs whose score is NaN).
const minScore = -1e10

// merger is the state of one merge.
type merger struct {
	t    *Tokenizer
	syms []symbol
	heap pairHeap
	buf  []byte
	// adding makes push append without ordering, for a heapify after.
	adding bool
}

// merge merges toks in place and returns the merged prefix of toks.
func (t *Tokenizer) merge(ctx context.Context, toks []int) ([]int, error) {
	if len(toks) < 2 {
		return toks, nil
	}
	m := merger{t: t, syms: make([]symbol, len(toks)), heap: make([]candidate, 0, len(toks)), buf: make([]byte, 0, 2*t.maxLen)}
	for i, tok := range toks {
		m.syms[i] = symbol{tok: int32(tok), prev: int32(i - 1), next: int32(i + 1)}
	}
	m.syms[len(toks)-1].next = -1
	m.adding = true // the first pairs are heapified at once, in O(n)
	for i := range len(toks) - 1 {
		m.consider(int32(i), int32(i+1))
	}
	m.adding = false
	m.heap.heapify()
	for n := 1; len(m.heap) > 0; n++ {
		if n%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		c := m.heap.pop()
		left := c.left()
		l, r := &m.syms[left], &m.syms[c.right]
		if l.version != c.lver || r.version != c.rver {
			continue // a neighbour merged since this pair was pushed
		}
		l.tok = c.id
		l.version++
		r.version++
		l.next = r.next
		if r.next >= 0 {
			m.syms[r.next].prev = left
			m.consider(left, r.next)
		}
		if l.prev >= 0 {
			m.consider(l.prev, left)
		}
	}
	out := toks[:0]
	for i := int32(0); i >= 0; i = m.syms[i].next {
		out = append(out, int(m.syms[i].tok))
	}
	return out, nil
}

// consider pushes the pair of symbols l and r if their pieces join into a
// token that may merge.
func (m *merger) consider(l, r int32) {
	t := m.t
	a, b := t.pieces[m.syms[l].tok], t.pieces[m.syms[r].tok]
	if len(a)+len(b) > t.maxLen {
		return
	}
	m.buf = append(append(m.buf[:0], a...), b...)
	id, ok := t.ids[string(m.buf)]
	if !ok {
		return
	}
	s := t.scores[id]
	if !(s > minScore) {
		return
	}
	if m.adding {
		m.heap = append(m.heap, candidate{key: heapKey(s, l), right: r, id: id, lver: m.syms[l].version, rver: m.syms[r].version})
		return
	}
	m.heap.push(candidate{key: heapKey(s, l), right: r, id: id, lver: m.syms[l].version, rver: m.syms[r].version})
}

// pairHeap is a 4-ary min-heap of candidates by key (shallower than a
// binary heap: fewer cache misses on a long text's heap).
type pairHeap []candidate

func (h *pairHeap) push(c candidate) {
	*h = append(*h, c)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 4
		if s[p].key <= c.key {
			break
		}
		s[i] = s[p]
		i = p
	}
	s[i] = c
}

func (h *pairHeap) pop() candidate {
	s := *h
	top := s[0]
	n := len(s) - 1
	*h = s[:n]
	if n > 0 {
		h.siftDown(0, s[n])
	}
	return top
}

// heapify orders candidates appended without push, in O(n).
func (h pairHeap) heapify() {
	for i := (len(h) - 2) / 4; i >= 0 && len(h) > 1; i-- { // from the last node's parent
		h.siftDown(i, h[i])
	}
}

// siftDown places c at or below index i.
func (h pairHeap) siftDown(i int, c candidate) {
	n := len(h)
	for {
		first := 4*i + 1
		if first >= n {
			break
		}
		best := first
		for j := first + 1; j < min(first+4, n); j++ {
			if h[j].key < h[best].key {
				best = j
			}
		}
		if c.key <= h[best].key {
			break
		}
		h[i] = h[best]
		i = best
	}
	h[i] = c
}
