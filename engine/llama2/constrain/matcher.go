package constrain

import (
	"encoding/binary"
	"math"
	mbits "math/bits"
	"slices"
	"strings"
	"unicode/utf8"
)

// Vocab is a model's vocabulary arranged for masking: the tokens' bytes in
// a trie, so that tokens sharing a prefix walk it once; the tokens that
// are plain string content (no quote, backslash or control byte, whole
// UTF-8 characters), by their length in characters, since inside a string
// those are allowed by length alone; and the tokens that end a
// generation. Build it once per model; it is read-only and safe for
// concurrent use.
type Vocab struct {
	size int
	all  trie // every token with bytes
	odd  trie // the tokens that are not plain string content
	// atMost[k] is the set of plain tokens of at most k characters; the
	// last entry holds them all.
	atMost [][]uint64
	eog    []int32
}

// trie holds token byte strings; node 0 is the root.
type trie struct {
	nodes []trieNode
	edges []trieEdge
	ends  []int32 // tokens, grouped by the node they end at
}

type trieNode struct {
	edges, edgesEnd int32 // range of edges
	ends, endsEnd   int32 // range of ends
}

type trieEdge struct {
	b     byte
	child int32
}

// NewVocab arranges pieces (token i stands for the bytes pieces[i]);
// eog(i) reports whether token i ends a generation. Tokens with no bytes
// that do not end a generation are never allowed.
func NewVocab(pieces []string, eog func(int) bool) *Vocab {
	v := &Vocab{size: len(pieces)}
	var all, odd []int32
	plain := make([]int, len(pieces))
	longest := 0
	for i, p := range pieces {
		plain[i] = -1
		switch {
		case eog(i):
			v.eog = append(v.eog, int32(i))
			continue
		case p == "":
			continue
		}
		all = append(all, int32(i))
		if n, ok := plainChars(p); ok {
			plain[i] = n
			longest = max(longest, n)
		} else {
			odd = append(odd, int32(i))
		}
	}
	v.all.build(pieces, all)
	v.odd.build(pieces, odd)
	words := (len(pieces) + 63) / 64
	v.atMost = make([][]uint64, longest+1)
	for k := range v.atMost {
		v.atMost[k] = make([]uint64, words)
		if k > 0 {
			copy(v.atMost[k], v.atMost[k-1])
		}
	}
	for i, n := range plain {
		if n >= 0 {
			for k := n; k <= longest; k++ {
				v.atMost[k][i/64] |= 1 << (i % 64)
			}
		}
	}
	return v
}

// plainChars returns the characters of p if it is plain string content.
func plainChars(p string) (int, bool) {
	n := 0
	for _, r := range p {
		if r == utf8.RuneError || r < 0x20 || r == '"' || r == '\\' {
			return 0, false // RuneError: also invalid or cut UTF-8
		}
		n++
	}
	return n, true
}

func (t *trie) build(pieces []string, ids []int32) {
	slices.SortFunc(ids, func(a, b int32) int {
		if c := strings.Compare(pieces[a], pieces[b]); c != 0 {
			return c
		}
		return int(a - b)
	})
	t.node(pieces, ids, 0)
}

// node adds the node of the tokens ids (sorted, sharing their first depth
// bytes) and returns its index.
func (t *trie) node(pieces []string, ids []int32, depth int) int32 {
	idx := int32(len(t.nodes))
	t.nodes = append(t.nodes, trieNode{})
	n := trieNode{ends: int32(len(t.ends))}
	i := 0
	for i < len(ids) && len(pieces[ids[i]]) == depth {
		t.ends = append(t.ends, ids[i])
		i++
	}
	n.endsEnd = int32(len(t.ends))
	type group struct {
		b      byte
		lo, hi int
	}
	var groups []group
	for i < len(ids) {
		b := pieces[ids[i]][depth]
		j := i
		for j < len(ids) && pieces[ids[j]][depth] == b {
			j++
		}
		groups = append(groups, group{b, i, j})
		i = j
	}
	// Edges of a node are contiguous: reserve them before the children.
	n.edges = int32(len(t.edges))
	for _, g := range groups {
		t.edges = append(t.edges, trieEdge{b: g.b})
	}
	n.edgesEnd = int32(len(t.edges))
	for k, g := range groups {
		c := t.node(pieces, ids[g.lo:g.hi], depth+1)
		t.edges[n.edges+int32(k)].child = c
	}
	t.nodes[idx] = n
	return idx
}

// Size returns the number of tokens.
func (v *Vocab) Size() int { return v.size }

// maxCacheWords bounds one Matcher's mask cache (8 MiB).
const maxCacheWords = 1 << 20

// Matcher is one generation's constraint: the automaton's state, and the
// masks of the states met so far. It is not safe for concurrent use.
type Matcher struct {
	v      *Vocab
	stacks []*frame
	next   []*frame
	key    []byte
	cache  map[string][]uint64
	words  int
	// scratch per trie depth for Mask's walk
	levels [][]*frame
	// Misses and Hits count Mask's cache lookups.
	Misses, Hits int
}

// Matcher returns a matcher of g's outputs over v's tokens.
func (g *Grammar) Matcher(v *Vocab) *Matcher {
	root := &frame{node: &node{kind: kindRoot, alts: []*node{g.root}}}
	return &Matcher{v: v, stacks: []*frame{root}, cache: map[string][]uint64{}}
}

// root returns the root node of f's stack.
func (f *frame) root() *node {
	for f.parent != nil {
		f = f.parent
	}
	return f.node
}

// Reset starts the output over, keeping the masks cached so far.
func (m *Matcher) Reset() {
	m.stacks = append(m.stacks[:0], &frame{node: m.stacks[len(m.stacks)-1].root()})
}

// Advance feeds the bytes of a sampled token. It returns false (and leaves
// the state unusable) if they break the constraint.
func (m *Matcher) Advance(piece string) bool {
	for i := 0; i < len(piece); i++ {
		m.next = m.next[:0]
		for _, f := range m.stacks {
			m.next = step(m.next, f, piece[i])
		}
		m.stacks, m.next = dedupe(m.next), m.stacks
		if len(m.stacks) == 0 {
			return false
		}
	}
	return true
}

// Accepting reports whether the output so far is a complete value.
func (m *Matcher) Accepting() bool {
	for _, f := range m.stacks {
		if accepting(f) {
			return true
		}
	}
	return false
}

// Finished reports whether the output is complete and nothing may follow.
func (m *Matcher) Finished() bool {
	for _, f := range m.stacks {
		if !finished(f) {
			return false
		}
	}
	return true
}

// finished reports whether f's stack is complete and takes no more bytes:
// only complete literals that no longer literal extends lie above the root.
func finished(f *frame) bool {
	for f.node.kind == kindLiteral && canEnd(f) {
		for i, l := range f.node.lits {
			if f.seen&(1<<i) != 0 && int(f.n) < len(l) {
				return false
			}
		}
		f = done(f)
	}
	return f.node.kind == kindRoot && f.st == rootDone
}

func accepting(f *frame) bool {
	for {
		if f.node.kind == kindRoot {
			return f.st == rootDone
		}
		if !canEnd(f) {
			return false
		}
		f = done(f)
	}
}

// Mask returns the set of tokens allowed next, a bit per token (token i is
// bit i%64 of word i/64): those whose bytes continue the output within the
// constraint, and the end-of-generation tokens once the output is
// complete. The slice is cached per state and must not be changed.
func (m *Matcher) Mask() []uint64 {
	m.key = m.appendKey(m.key[:0])
	if mask, ok := m.cache[string(m.key)]; ok {
		m.Hits++
		return mask
	}
	m.Misses++
	mask := make([]uint64, (m.v.size+63)/64)
	if top := m.stacks[0]; len(m.stacks) == 1 && top.node.kind == kindString && top.node.pattern == nil && top.st == strChar && top.n2 == 0 {
		// Inside a string: plain tokens by length, the others walked.
		k := len(m.v.atMost) - 1
		if top.node.maxLen >= 0 {
			k = min(k, top.node.maxLen-int(top.n))
		}
		copy(mask, m.v.atMost[k])
		m.walk(mask, &m.v.odd, 0, m.stacks, 0)
	} else {
		m.walk(mask, &m.v.all, 0, m.stacks, 0)
	}
	if m.Accepting() {
		for _, t := range m.v.eog {
			mask[t/64] |= 1 << (t % 64)
		}
	}
	if m.words+len(mask) <= maxCacheWords {
		m.cache[string(m.key)] = mask
		m.words += len(mask)
	}
	return mask
}

// walk marks the tokens below trie node at, reached with stacks.
func (m *Matcher) walk(mask []uint64, t *trie, at int32, stacks []*frame, depth int) {
	for len(m.levels) <= depth {
		m.levels = append(m.levels, nil)
	}
	n := t.nodes[at]
	for e := n.edges; e < n.edgesEnd; e++ {
		edge := t.edges[e]
		next := m.levels[depth][:0]
		for _, f := range stacks {
			next = step(next, f, edge.b)
		}
		m.levels[depth] = next
		if len(next) == 0 {
			continue
		}
		c := t.nodes[edge.child]
		for _, tok := range t.ends[c.ends:c.endsEnd] {
			mask[tok/64] |= 1 << (tok % 64)
		}
		if c.edges < c.edgesEnd {
			m.walk(mask, t, edge.child, next, depth+1)
		}
	}
	if depth < len(m.levels) {
		clear(m.levels[depth][:cap(m.levels[depth])])
	}
}

// Apply sets the logits of the tokens Mask does not allow to -Inf. It
// returns false when no token is allowed.
func (m *Matcher) Apply(logits []float32) bool {
	mask := m.Mask()
	any := false
	inf := float32(math.Inf(-1))
	for w, bits := range mask {
		if bits != 0 {
			any = true
		}
		lo := w * 64
		for off := ^bits; off != 0; off &= off - 1 { // the disallowed tokens
			if i := lo + mbits.TrailingZeros64(off); i < len(logits) {
				logits[i] = inf
			}
		}
	}
	for i := len(mask) * 64; i < len(logits); i++ {
		logits[i] = inf
	}
	return any
}

// dedupe drops stacks equal to an earlier one, and keeps at most maxAlive.
func dedupe(s []*frame) []*frame {
	if len(s) < 2 {
		return s
	}
	out := s[:0]
	for i, f := range s {
		if !slices.ContainsFunc(s[:i], func(g *frame) bool { return sameStack(f, g) }) {
			out = append(out, f)
		}
	}
	if len(out) > maxAlive {
		out = out[:maxAlive]
	}
	return out
}

func sameStack(a, b *frame) bool {
	for a != nil && b != nil {
		if a == b {
			return true
		}
		if a.node != b.node || a.st != b.st || a.spaced != b.spaced || a.cur != b.cur || a.n != b.n ||
			a.n2 != b.n2 || a.seen != b.seen || a.cand != b.cand || a.key != b.key {
			return false
		}
		a, b = a.parent, b.parent
	}
	return a == b
}

// appendKey encodes the state: two states with equal keys accept the same
// continuations.
func (m *Matcher) appendKey(b []byte) []byte {
	for _, top := range m.stacks {
		b = binary.AppendUvarint(b, uint64(top.depth))
		for f := top; f != nil; f = f.parent {
			flags := byte(0)
			if f.spaced {
				flags |= 1
			}
			if f.key {
				flags |= 2
			}
			b = binary.AppendVarint(b, int64(f.node.id))
			b = append(b, f.st, flags, f.cur)
			b = binary.AppendUvarint(b, uint64(f.n))
			b = binary.AppendUvarint(b, uint64(f.n2))
			b = binary.AppendUvarint(b, f.seen)
			b = binary.AppendUvarint(b, f.cand)
		}
	}
	return b
}
