package tokenizer

import (
	"context"
	"math"
)

// mergeSpans is the merge loop that both GGUF models share: the text is cut
// into spans (initially one per code point), and the adjacent pair whose
// priority is lowest (then leftmost) joins, over and over, until no pair
// has a priority. The spans form a linked list and a 4-ary heap holds the
// candidate pairs, as in merge.go; a pair ended by a neighbour's merge is
// skipped when it comes out. prio reports the priority of joining the two
// texts, or false when they do not join. It returns the final spans as
// [start, end) byte offsets, in order.
func mergeSpans(ctx context.Context, text string, cuts []int32, prio func(a, b string) (uint32, bool)) ([][2]int32, error) {
	n := len(cuts) - 1 // cuts holds n+1 offsets, 0 and len(text) included
	if n <= 0 {
		return nil, nil
	}
	type span struct {
		start, end int32
		prev, next int32
		version    uint32
	}
	spans := make([]span, n)
	for i := range n {
		spans[i] = span{start: cuts[i], end: cuts[i+1], prev: int32(i - 1), next: int32(i + 1)}
	}
	spans[n-1].next = -1
	var h pairHeap
	adding := true // the first pairs are heapified at once, in O(n)
	consider := func(l, r int32) {
		a, b := &spans[l], &spans[r]
		p, ok := prio(text[a.start:a.end], text[b.start:b.end])
		if !ok {
			return
		}
		c := candidate{key: uint64(p)<<32 | uint64(uint32(l)), right: r, lver: a.version, rver: b.version}
		if adding {
			h = append(h, c)
		} else {
			h.push(c)
		}
	}
	for i := range n - 1 {
		consider(int32(i), int32(i+1))
	}
	adding = false
	h.heapify()
	for k := 1; len(h) > 0; k++ {
		if k%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		c := h.pop()
		left := c.left()
		l, r := &spans[left], &spans[c.right]
		if l.version != c.lver || r.version != c.rver {
			continue
		}
		l.end = r.end
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
	out := make([][2]int32, 0, n)
	for i := int32(0); i >= 0; i = spans[i].next {
		out = append(out, [2]int32{spans[i].start, spans[i].end})
	}
	return out, nil
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
