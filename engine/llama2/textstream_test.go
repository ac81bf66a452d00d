package llama2

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// expected is what a stream of text with stops must produce: the text up
// to the earliest stop match, made valid UTF-8.
func expected(text string, stops []string) (string, bool) {
	cut, hit := len(text), false
	for _, s := range stops {
		if k := strings.Index(text, s); k >= 0 && k < cut {
			cut, hit = k, true
		}
	}
	return strings.ToValidUTF8(text[:cut], "\uFFFD"), hit
}

// TestTextStreamInvariants splits random texts (ASCII, multi-byte and
// invalid bytes) into random pieces and checks that the released text is
// always valid UTF-8, never contains a stop sequence, and adds up to the
// expected output.
func TestTextStreamInvariants(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	alphabet := []string{"a", "b", "c", " ", "é", "€", "😀", "\xff", "\xe2\x82"}
	for round := range 3000 {
		var text strings.Builder
		for range r.IntN(20) {
			text.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		var stops []string
		for range r.IntN(3) {
			var s strings.Builder
			for range 1 + r.IntN(3) {
				s.WriteString(alphabet[r.IntN(7)])
			}
			stops = append(stops, s.String())
		}
		ts := textStream{stops: stops}
		src := text.String()
		var out strings.Builder
		stopped := false
		for len(src) > 0 && !stopped {
			n := 1 + r.IntN(min(len(src), 4))
			piece, stop := ts.push(src[:n])
			src = src[n:]
			stopped = stop
			if !utf8.ValidString(piece) {
				t.Fatalf("round %d: invalid piece %q", round, piece)
			}
			out.WriteString(piece)
		}
		if !stopped {
			out.WriteString(ts.flush())
		}
		want, hit := expected(text.String(), stops)
		// Replacement characters may group invalid bytes differently when
		// split; compare with them removed, and exactly otherwise.
		if strip(out.String()) != strip(want) || hit != stopped {
			t.Fatalf("round %d: text %q stops %q: got %q (stop %v), want %q (stop %v)", round, text.String(), stops, out.String(), stopped, want, hit)
		}
		if !strings.ContainsRune(want, utf8.RuneError) && out.String() != want {
			t.Fatalf("round %d: got %q, want %q", round, out.String(), want)
		}
	}
}

func strip(s string) string { return strings.ReplaceAll(s, "\uFFFD", "") }

func TestTextStreamHoldsPrefixes(t *testing.T) {
	ts := textStream{stops: []string{"END"}}
	for _, step := range []struct{ in, out string }{
		{"The ", "The "}, {"E", ""}, {"N", ""}, {"D", ""},
	} {
		out, stop := ts.push(step.in)
		if out != step.out {
			t.Fatalf("push(%q) = %q, want %q", step.in, out, step.out)
		}
		if stop != (step.in == "D") {
			t.Fatalf("push(%q): stop = %v", step.in, stop)
		}
	}
	ts = textStream{stops: []string{"END"}}
	ts.push("xE")
	if out, _ := ts.push("Nd"); out != "ENd" {
		t.Fatalf("released %q after the prefix was ruled out", out)
	}
}
