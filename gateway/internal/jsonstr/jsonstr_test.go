package jsonstr

import (
	"encoding/json"
	"strings"
	"testing"
)

var stringCases = []string{
	"", "plain ascii", `quote " backslash \ slash /`, "<script>&amp;</script>",
	"\x00\x01\x07\b\f\n\r\t\x1f\x7f", "héllo wörld €𝄞", "\u2028\u2029 line seps",
	"bad \xff utf8 \xc3", "\xe2\x82", "\xed\xa0\x80 surrogate", "\xef\xbf\xbd real replacement",
	strings.Repeat("a\"", 100),
}

func TestAppendMatchesEncodingJSON(t *testing.T) {
	for _, s := range stringCases {
		want, _ := json.Marshal(s)
		if got := Append([]byte("x"), s); string(got) != "x"+string(want) {
			t.Errorf("Append(%q) = %s, want %s", s, got[1:], want)
		}
		if got := AppendBytes(nil, []byte(s)); string(got) != string(want) {
			t.Errorf("AppendBytes(%q) = %s, want %s", s, got, want)
		}
	}
}

func FuzzAppend(f *testing.F) {
	for _, s := range stringCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := Append(nil, s); string(got) != string(want) {
			t.Fatalf("Append(%q) = %s, want %s", s, got, want)
		}
	})
}

func BenchmarkAppend(b *testing.B) {
	s := " the quick brown fox"
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf = Append(buf[:0], s)
	}
}
