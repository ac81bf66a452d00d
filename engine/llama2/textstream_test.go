package llama2

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// expected is what a stream of text with stops must produce when it
// arrives in pieces ending at ends: the text up to the earliest stop match
// within the text received when the first match completes, made valid
// UTF-8. (Generation ends at that point, so a stop sequence that started
// earlier but would complete later never gets the chance.)
func expected(text string, ends []int, stops []string) (string, bool) {
	for _, e := range ends {
		cut, hit := e, false
		for _, s := range stops {
			if k := strings.Index(text[:e], s); k >= 0 && k < cut {
				cut, hit = k, true
			}
		}
		if hit {
			return strings.ToValidUTF8(text[:cut], "\uFFFD"), true
		}
	}
	return strings.ToValidUTF8(text, "\uFFFD"), false
}

// TestTextStreamInvariants splits random texts (ASCII, multi-byte and
// invalid bytes) into random pieces and checks that the released text is
// always valid UTF-8, never contains a stop sequence, and adds up to the
// expected output.
func TestTextStreamInvariants(t *testing.T) {
	alphabet := []string{"a", "b", "c", " ", "é", "€", "😀", "\xff", "\xe2\x82"}
	checkTextStream(t, rand.New(rand.NewPCG(1, 1)), alphabet, alphabet[:7], 20, 3)
}

// TestTextStreamRepetitiveStops is TestTextStreamInvariants with stop
// sequences over two letters, whose many self-overlaps exercise the
// matching automata's failure links.
func TestTextStreamRepetitiveStops(t *testing.T) {
	ab := []string{"a", "b"}
	checkTextStream(t, rand.New(rand.NewPCG(2, 2)), ab, ab, 40, 7)
}

// checkTextStream runs 3000 rounds of random texts of up to textLen
// letters, with up to two stop sequences of up to stopLen letters.
func checkTextStream(t *testing.T, r *rand.Rand, alphabet, stopAlphabet []string, textLen, stopLen int) {
	t.Helper()
	for round := range 3000 {
		var text strings.Builder
		for range r.IntN(textLen) {
			text.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		var stops []string
		for range r.IntN(3) {
			var s strings.Builder
			for range 1 + r.IntN(stopLen) {
				s.WriteString(stopAlphabet[r.IntN(len(stopAlphabet))])
			}
			stops = append(stops, s.String())
		}
		ts := textStream{stops: stops}
		src := text.String()
		var out strings.Builder
		stopped := false
		var ends []int
		for len(src) > 0 && !stopped {
			n := 1 + r.IntN(min(len(src), 4))
			piece, stop := ts.push(src[:n])
			src = src[n:]
			ends = append(ends, text.Len()-len(src))
			stopped = stop
			if !utf8.ValidString(piece) {
				t.Fatalf("round %d: invalid piece %q", round, piece)
			}
			out.WriteString(piece)
		}
		if !stopped {
			out.WriteString(ts.flush())
		}
		for len(src) > 0 { // the pieces a stopped stream was not sent
			n := 1 + r.IntN(min(len(src), 4))
			src = src[n:]
			ends = append(ends, text.Len()-len(src))
		}
		want, hit := expected(text.String(), ends, stops)
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

// BenchmarkTextStreamStops feeds one-byte pieces against the most stop
// text a request may ask for (16 sequences of 256 bytes) in a shape that is
// bad for a scan of every suffix: the last sequence keeps 255 bytes held
// back, and every suffix of those is tried against the others.
//
//	go test -run '^$' -bench TextStream ./engine/llama2/
func BenchmarkTextStreamStops(b *testing.B) {
	stops := make([]string, maxStops)
	for i := range stops {
		stops[i] = "b" + strings.Repeat("a", maxStopLen-1)
	}
	stops[maxStops-1] = strings.Repeat("a", maxStopLen-1) + "Z"
	for b.Loop() {
		ts := textStream{stops: stops}
		for range 1000 {
			if _, stop := ts.push("a"); stop {
				b.Fatal("stopped")
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/piece")
}
