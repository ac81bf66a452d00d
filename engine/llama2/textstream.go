package llama2

import (
	"strings"
	"unicode/utf8"
)

// textStream turns decoded token pieces into text that is safe to release:
// it never releases part of a UTF-8 character, nor text that may turn out to
// be the start of a stop sequence, and it cuts the output at the first stop
// sequence. The zero value (no stop sequences) is ready to use, and so is a
// value with only stops set.
//
// Invariant: released text never contains the beginning of a stop
// sequence's match, because any suffix that is a prefix of a stop sequence
// is held back; so a match always starts inside pending.
//
// Stop sequences are matched with Knuth-Morris-Pratt automata, one per
// sequence, fed each byte once: a push costs O(len(piece)·len(stops)),
// whatever the sequences hold.
type textStream struct {
	stops   []string
	pending []byte
	// matched[i] is the length of the longest suffix of the text so far
	// that is a prefix of stops[i] (the automaton's state); border[i] is
	// stops[i]'s failure function.
	matched []int
	border  [][]int
}

// push appends piece and returns the text that can be released now. stop
// reports that a stop sequence completed: out is then the text before it and
// the stream is finished.
func (t *textStream) push(piece string) (out string, stop bool) {
	if t.matched == nil && len(t.stops) > 0 {
		t.matched = make([]int, len(t.stops))
		t.border = make([][]int, len(t.stops))
		for i, s := range t.stops {
			t.border[i] = borders(s)
		}
	}
	from := len(t.pending)
	t.pending = append(t.pending, piece...)
	// The earliest match: each sequence's first match ends first among
	// its matches, and the earliest start among those wins.
	first, held := -1, 0
	for i, s := range t.stops {
		q := t.matched[i]
		for j := from; j < len(t.pending); j++ {
			q = advance(s, t.border[i], q, t.pending[j])
			if q == len(s) {
				if k := j + 1 - len(s); first < 0 || k < first {
					first = k
				}
				break
			}
		}
		t.matched[i] = q
		held = max(held, q)
	}
	if first >= 0 {
		out = toValid(t.pending[:first])
		t.pending = t.pending[:0]
		return out, true
	}
	cut := completeUTF8(t.pending[:len(t.pending)-held])
	out = toValid(t.pending[:cut])
	t.pending = append(t.pending[:0], t.pending[cut:]...)
	return out, false
}

// flush releases everything still held (generation ended without a stop
// sequence); an incomplete trailing character becomes U+FFFD.
func (t *textStream) flush() string {
	out := toValid(t.pending)
	t.pending = t.pending[:0]
	return out
}

// borders returns the failure function of s: b[i] is the length of the
// longest proper prefix of s[:i+1] that is also its suffix.
func borders(s string) []int {
	b := make([]int, len(s))
	for i, q := 1, 0; i < len(s); i++ {
		for q > 0 && s[i] != s[q] {
			q = b[q-1]
		}
		if s[i] == s[q] {
			q++
		}
		b[i] = q
	}
	return b
}

// advance moves the automaton of s (failure function b) from state q (q
// bytes of s matched, q < len(s)) over byte c.
func advance(s string, b []int, q int, c byte) int {
	for q > 0 && s[q] != c {
		q = b[q-1]
	}
	if s[q] == c {
		q++
	}
	return q
}

// completeUTF8 returns the length of the longest prefix of b that does not
// end inside a UTF-8 character that later bytes could complete.
func completeUTF8(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}

// toValid returns b as a string with invalid UTF-8 replaced by U+FFFD.
func toValid(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}
