package llama2

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

// textStream turns decoded token pieces into text that is safe to release:
// it never releases part of a UTF-8 character, nor text that may turn out to
// be the start of a stop sequence, and it cuts the output at the first stop
// sequence. The zero value (no stop sequences) is ready to use.
//
// Invariant: released text never contains the beginning of a stop
// sequence's match, because any suffix that is a prefix of a stop sequence
// is held back; so a match always starts inside pending.
type textStream struct {
	stops   []string
	pending []byte
}

// push appends piece and returns the text that can be released now. stop
// reports that a stop sequence completed: out is then the text before it and
// the stream is finished.
func (t *textStream) push(piece string) (out string, stop bool) {
	t.pending = append(t.pending, piece...)
	if k := t.firstStop(); k >= 0 {
		out = toValid(t.pending[:k])
		t.pending = t.pending[:0]
		return out, true
	}
	cut := len(t.pending) - t.stopPrefix()
	cut = completeUTF8(t.pending[:cut])
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

// firstStop returns the index in pending of the earliest stop sequence
// match, or -1.
func (t *textStream) firstStop() int {
	first := -1
	for _, s := range t.stops {
		if k := bytes.Index(t.pending, []byte(s)); k >= 0 && (first < 0 || k < first) {
			first = k
		}
	}
	return first
}

// stopPrefix returns the length of the longest suffix of pending that is a
// proper prefix of a stop sequence.
func (t *textStream) stopPrefix() int {
	best := 0
	for _, s := range t.stops {
		for n := min(len(s)-1, len(t.pending)); n > best; n-- {
			if bytes.HasSuffix(t.pending, []byte(s[:n])) {
				best = n
				break
			}
		}
	}
	return best
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
