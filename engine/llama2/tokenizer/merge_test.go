package tokenizer

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// mergeQuadratic is the merge this package used before merge.go: rescan
// every adjacent pair after each merge, O(n²). It is the reference the
// heap-based merge must match token for token.
func (t *Tokenizer) mergeQuadratic(toks []int) []int {
	buf := make([]byte, 0, 2*t.maxLen)
	for {
		best, bestID := -1, int32(-1)
		bestScore := float32(-1e10) // llama2.c's floor: lower scores never merge
		for i := 0; i+1 < len(toks); i++ {
			a, b := t.pieces[toks[i]], t.pieces[toks[i+1]]
			if len(a)+len(b) > t.maxLen {
				continue
			}
			buf = append(append(buf[:0], a...), b...)
			id, ok := t.ids[string(buf)]
			if !ok {
				continue
			}
			if s := t.scores[id]; s > bestScore {
				best, bestID, bestScore = i, id, s
			}
		}
		if best < 0 {
			return toks
		}
		toks[best] = int(bestID)
		toks = append(toks[:best+1], toks[best+2:]...)
	}
}

// referenceEncode is Encode with BOS and the quadratic merge.
func (t *Tokenizer) referenceEncode(text string) []int {
	toks := t.appendSymbols([]int{BOS}, text)
	return append(toks[:1], t.mergeQuadratic(toks[1:])...)
}

// tokenizerFile encodes pieces and scores as a tokenizer.bin.
func tokenizerFile(pieces []string, scores []float32) []byte {
	maxLen := 1
	for _, p := range pieces {
		maxLen = max(maxLen, len(p))
	}
	b := binary.LittleEndian.AppendUint32(nil, uint32(maxLen))
	for i, p := range pieces {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(scores[i]))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	return b
}

// randomVocab builds a vocabulary over a small alphabet, so that merges
// are frequent and chains of them long: the specials, byte tokens, then
// random pieces of 1 to 6 letters, with scores drawn from few values so
// that ties are common, and a few at or below llama2.c's floor.
func randomVocab(t testing.TB, seed uint64) *Tokenizer {
	r := rand.New(rand.NewPCG(seed, 99))
	pieces := []string{"<unk>", "\n<s>\n", "\n</s>\n"}
	for b := range 256 {
		pieces = append(pieces, "<0x"+strings.ToUpper(hex2(byte(b)))+">")
	}
	letters := []string{"a", "b", " ", "c", "\u00e9"}
	pieces = append(pieces, letters...)
	for range 40 + r.IntN(200) {
		n := 1 + r.IntN(6)
		var p strings.Builder
		for range n {
			p.WriteString(letters[r.IntN(len(letters))])
		}
		pieces = append(pieces, p.String())
	}
	scores := make([]float32, len(pieces))
	for i := range scores {
		switch r.IntN(20) {
		case 0:
			scores[i] = -1e10 // never merges
		case 1:
			scores[i] = -2e10
		default:
			scores[i] = float32(r.IntN(8)) - 4
		}
	}
	tk, err := Parse(tokenizerFile(pieces, scores), len(pieces))
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func hex2(b byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[b>>4], digits[b&15]})
}

// randomText draws n code points, mostly from the vocabulary's letters,
// sometimes any byte (invalid UTF-8 included) or a code point outside it.
func randomText(r *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		switch k := r.IntN(30); {
		case k == 0:
			b.WriteByte(byte(r.IntN(256)))
		case k == 1:
			b.WriteString("€")
		default:
			b.WriteString([]string{"a", "b", " ", "c", "\u00e9"}[r.IntN(5)])
		}
	}
	return b.String()
}

func checkSame(t *testing.T, tk *Tokenizer, text string) {
	t.Helper()
	got, err := tk.Encode(context.Background(), text, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := tk.referenceEncode(text); !slices.Equal(got, want) {
		t.Fatalf("Encode(%q) = %v, reference %v", text, got, want)
	}
	checkBound(t, tk, text, got)
}

// checkBound checks MaxTokenBytes: the text with its dummy prefix is no
// longer than MaxTokenBytes bytes per token after BOS.
func checkBound(t *testing.T, tk *Tokenizer, text string, toks []int) {
	t.Helper()
	m := tk.MaxTokenBytes()
	if m == 0 || text == "" {
		return
	}
	n := len(text)
	if tk.hasSpace {
		n++
	}
	if n > m*(len(toks)-1) {
		t.Fatalf("Encode(%q): %d bytes in %d tokens, more than MaxTokenBytes %d each", text, n, len(toks)-1, m)
	}
}

// TestMergeMatchesQuadratic compares the heap merge with the quadratic
// reference on random vocabularies and texts.
func TestMergeMatchesQuadratic(t *testing.T) {
	for seed := range uint64(60) {
		tk := randomVocab(t, seed)
		r := rand.New(rand.NewPCG(seed, 7))
		for _, n := range []int{0, 1, 2, 3, 5, 10, 40, 200} {
			checkSame(t, tk, randomText(r, n))
		}
	}
}

// FuzzMergeMatchesQuadratic is TestMergeMatchesQuadratic on any text.
func FuzzMergeMatchesQuadratic(f *testing.F) {
	f.Add(uint64(1), "ab ab abc")
	f.Add(uint64(2), "aaaaaaaaaaaaaaaaaaaaaaaaaaaaab")
	f.Add(uint64(3), "\xff\xfe é€ c b a")
	f.Fuzz(func(t *testing.T, seed uint64, text string) {
		if len(text) > 2000 {
			return // the reference is quadratic
		}
		checkSame(t, randomVocab(t, seed%64), text)
	})
}

// TestMaxTokenBytes checks the bound's value and its absence when a byte's
// fallback piece is empty.
func TestMaxTokenBytes(t *testing.T) {
	pieces := []string{"<unk>", "\n<s>\n", "\n</s>\n"}
	for b := range 256 {
		pieces = append(pieces, "<0x"+strings.ToUpper(hex2(byte(b)))+">")
	}
	pieces = append(pieces, " ", "a", "aa", "aaaaaaaaaa")
	scores := make([]float32, len(pieces))
	tk, err := Parse(tokenizerFile(pieces, scores), len(pieces))
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.MaxTokenBytes(); got != 10 {
		t.Errorf("MaxTokenBytes = %d, want 10 (the longest piece)", got)
	}
	pieces[3+'z'] = "" // 'z' falls back to an empty piece
	tk, err = Parse(tokenizerFile(pieces, scores), len(pieces))
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.MaxTokenBytes(); got != 0 {
		t.Errorf("MaxTokenBytes = %d with an empty fallback piece, want 0", got)
	}
}

// countdown is a context that is done after its Err has been asked n
// times: it shows when Encode looks.
type countdown struct {
	context.Context
	n int
}

func (c *countdown) Err() error {
	if c.n <= 0 {
		return context.Canceled
	}
	c.n--
	return nil
}

func TestEncodeStopsWhenContextIsDone(t *testing.T) {
	tk := randomVocab(t, 5)
	text := strings.Repeat("ab c", 1<<16)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tk.Encode(ctx, text, true, false); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled before: err = %v", err)
	}
	// Done after the first look: the merge loop must notice.
	c := &countdown{Context: context.Background(), n: 1}
	if _, err := tk.Encode(c, text, true, false); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled during the merge: err = %v", err)
	}
	if toks, err := tk.Encode(context.Background(), text, true, false); err != nil || len(toks) < 2 {
		t.Fatalf("not cancelled: %d tokens, %v", len(toks), err)
	}
}
