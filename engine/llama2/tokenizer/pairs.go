package tokenizer

import (
	"context"
	"math"
)

// span is a symbol of a text being merged: bytes [start, end) of the
// text, the token it is (-1 when none), its neighbours (-1 at the ends), and
// a version bumped whenever it merges or is merged away.
type span struct {
	start, end int32
	id         int32
	prev, next int32
	version    uint32
}

// joinFunc reports the priority (lowest first) of joining two adjacent
// symbols, given their joined text and their tokens, and the token they
// join into, or false when they do not join.
type joinFunc func(joined string, aID, bID int32) (prio uint32, id int32, ok bool)

// spanMerger holds the merge loop's state, reused from one text to the
// next.
type spanMerger struct {
	spans []span
	heap  pairHeap
}

// start makes the symbols of text, one per cut: cuts holds the n+1 offsets
// of n symbols, 0 and len(text) included; id gives each one's token.
func (m *spanMerger) start(cuts []int32, id func(i int) int32) {
	n := len(cuts) - 1
	m.spans = m.spans[:0]
	for i := range n {
		m.spans = append(m.spans, span{start: cuts[i], end: cuts[i+1], id: id(i), prev: int32(i - 1), next: int32(i + 1)})
	}
	if n > 0 {
		m.spans[n-1].next = -1
	}
}

// merge is the merge loop that both GGUF models share: the adjacent pair
// whose priority is lowest (then leftmost) joins, over and over, until no
// pair joins. The symbols form a linked list and a 4-ary heap holds the
// candidate pairs, as in merge.go; a pair ended by a neighbour's merge is
// skipped when it comes out. Then each visits the final symbols in
// order.
func (m *spanMerger) merge(ctx context.Context, text string, join joinFunc) error {
	spans := m.spans
	m.heap = m.heap[:0]
	adding := true // the first pairs are heapified at once, in O(n)
	consider := func(l, r int32) {
		a, b := &spans[l], &spans[r]
		p, id, ok := join(text[a.start:b.end], a.id, b.id)
		if !ok {
			return
		}
		c := candidate{key: uint64(p)<<32 | uint64(uint32(l)), right: r, id: id, lver: a.version, rver: b.version}
		if adding {
			m.heap = append(m.heap, c)
		} else {
			m.heap.push(c)
		}
	}
	for i := 0; i+1 < len(spans); i++ {
		consider(int32(i), int32(i+1))
	}
	adding = false
	m.heap.heapify()
	for k := 1; len(m.heap) > 0; k++ {
		if k%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		c := m.heap.pop()
		left := c.left()
		l, r := &spans[left], &spans[c.right]
		if l.version != c.lver || r.version != c.rver {
			continue
		}
		l.end, l.id = r.end, c.id
		l.version++
		r.version++
		l.next = r.next
		if r.next >= 0 {
			spans[r.next].prev = left
			consider(left, r.next)
		}
		if l.prev >= 0 {
			consider(l.prev, left)
		}
	}
	return nil
}

// each calls f with the final symbols, in order.
func (m *spanMerger) each(f func(s *span)) {
	if len(m.spans) == 0 {
		return
	}
	for i := int32(0); i >= 0; i = m.spans[i].next {
		f(&m.spans[i])
	}
}

// scorePriority maps a score, best highest, to a priority, best lowest,
// keeping the order of every score (so -0 ties with +0 as floats do).
func scorePriority(score float32) uint32 {
	if score == 0 {
		score = 0
	}
	u := math.Float32bits(score)
	if u&(1<<31) != 0 {
		u = ^u
	} else {
		u |= 1 << 31
	}
	return ^u
}

// codePointCuts returns the offsets of text's code points (invalid bytes
// count one each), with len(text) last.
func codePointCuts(text string) []int32 {
	cuts := make([]int32, 0, len(text)+1)
	for i := range text { // ranging a string steps by code point, or by one invalid byte
		cuts = append(cuts, int32(i))
	}
	return append(cuts, int32(len(text)))
}
