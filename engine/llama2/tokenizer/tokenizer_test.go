package tokenizer_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/streamgate/streamgate/engine/llama2/internal/testmodel"
	"github.com/streamgate/streamgate/engine/llama2/tokenizer"
)

// sharedModels returns ../shared/models (or $STREAMGATE_MODEL_DIR); it
// skips the test when absent unless STREAMGATE_REQUIRE=1.
func sharedModels(t testing.TB, file string) string {
	t.Helper()
	for _, d := range []string{os.Getenv("STREAMGATE_MODEL_DIR"), "../../../../shared/models", "../../../shared/models"} {
		if d == "" {
			continue
		}
		if p := filepath.Join(d, file); fileExists(p) {
			return p
		}
	}
	if os.Getenv("STREAMGATE_REQUIRE") == "1" {
		t.Fatalf("model file %s not found and STREAMGATE_REQUIRE=1", file)
	}
	t.Skipf("model file %s not found (set STREAMGATE_MODEL_DIR to a folder holding it)", file)
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

func TestGoldenIDs(t *testing.T) {
	for _, tc := range []struct {
		file  string
		vocab int
		want  map[string][]int
	}{
		{"tok512.bin", 512, map[string][]int{
			"Once upon a time": {1, 403, 407, 261, 378},
			"Hello world":      {1, 346, 306, 414, 263, 304, 341},
		}},
		{"tokenizer.bin", 32000, map[string][]int{
			"Once upon a time": {1, 9038, 2501, 263, 931},
			"Hello world":      {1, 15043, 3186},
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			tk, err := tokenizer.Load(sharedModels(t, tc.file), tc.vocab)
			if err != nil {
				t.Fatal(err)
			}
			for text, want := range tc.want {
				got := encode(t, tk, text)
				if !slices.Equal(got, want) {
					t.Errorf("Encode(%q) = %v, want %v", text, got, want)
				}
				var dec strings.Builder
				for i := 1; i < len(got); i++ {
					dec.WriteString(tk.Piece(got[i-1], got[i]))
				}
				if dec.String() != text {
					t.Errorf("decode(%v) = %q, want %q", got, dec.String(), text)
				}
			}
			if got := mustEncode(t, tk, "", true, true); !slices.Equal(got, []int{1, 2}) {
				t.Errorf("Encode(\"\", bos, eos) = %v", got)
			}
		})
	}
}

func synthetic(t *testing.T, extra ...string) *tokenizer.Tokenizer {
	t.Helper()
	pieces := testmodel.Pieces(300, extra...)
	scores := make([]float32, len(pieces))
	for i := range scores {
		scores[i] = -float32(i)
	}
	path := filepath.Join(t.TempDir(), "tok.bin")
	if err := testmodel.WriteTokenizer(path, pieces, scores); err != nil {
		t.Fatal(err)
	}
	tk, err := tokenizer.Load(path, len(pieces))
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestEncodeByteFallbackAndMerges(t *testing.T) {
	// ids: 259 " ", 260 "é", 261 "a", 262 "b", 263 "c", 264 "ab", 265 " ab",
	// 266 "abc"; lower ids score higher.
	tk := synthetic(t, " ", "é", "a", "b", "c", "ab", " ab", "abc")
	for text, want := range map[string][]int{
		"ab":  {1, 265},      // "ab", then " ab"
		"abc": {1, 265, 263}, // " ab" outscores "abc"
		"é":   {1, 259, 260}, // a code point in the vocabulary
		"€":   {1, 259, 0xE2 + 3, 0x82 + 3, 0xAC + 3},
		"😀x":  {1, 259, 0xF0 + 3, 0x9F + 3, 0x98 + 3, 0x80 + 3, 'x' + 3},
	} {
		if got := encode(t, tk, text); !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, want %v", text, got, want)
		}
	}
}

func TestPiece(t *testing.T) {
	tk := synthetic(t, " ", " hi")
	if got := tk.Piece(tokenizer.BOS, 260); got != "hi" {
		t.Errorf("piece after BOS = %q, want leading space dropped", got)
	}
	if got := tk.Piece(5, 260); got != " hi" {
		t.Errorf("piece = %q", got)
	}
	if got := tk.Piece(5, testmodel.Byte(0xE2)); got != "\xE2" {
		t.Errorf("byte token = %q", got)
	}
	if got := tk.Piece(5, 100000); got != "" {
		t.Errorf("out of range = %q", got)
	}
}

func TestParseErrors(t *testing.T) {
	good := append([]byte{5, 0, 0, 0}, 0, 0, 0, 0, 2, 0, 0, 0, 'h', 'i')
	for _, tc := range []struct {
		name  string
		data  []byte
		vocab int
		msg   string
	}{
		{"empty", nil, 1, "too short"},
		{"max len", []byte{0, 0, 0, 0}, 1, "max_token_length 0"},
		{"truncated", good[:10], 1, "entry 0 of 1 is truncated"},
		{"long piece", append([]byte{1, 0, 0, 0}, good[4:]...), 1, "entry 0 has length 2"},
		{"fewer entries", good, 2, "entry 1 of 2 is truncated"},
		{"more entries", append(good, good[4:]...), 1, "10 trailing bytes"},
	} {
		_, err := tokenizer.Parse(tc.data, tc.vocab)
		if !errors.Is(err, tokenizer.ErrFormat) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: err = %v, want ErrFormat with %q", tc.name, err, tc.msg)
		}
	}
	if _, err := tokenizer.Parse(good, 1); err != nil {
		t.Errorf("good: %v", err)
	}
}

// TestRealVocabulariesMatchQuadratic compares Encode with the quadratic
// reference on both real vocabularies: story text, and text with code
// points outside them.
func TestRealVocabulariesMatchQuadratic(t *testing.T) {
	for _, v := range vocabs {
		t.Run(v.file, func(t *testing.T) {
			tk, err := tokenizer.Load(sharedModels(t, v.file), v.vocab)
			if err != nil {
				t.Fatal(err)
			}
			texts := []string{storyText(1500), "Zoë's café — naïve 😀 ✓ \x00\xff tab\tnew\nline", strings.Repeat("a", 300), strings.Repeat(" ", 50)}
			for _, text := range texts {
				got := encode(t, tk, text)
				if want := tokenizer.ReferenceEncode(tk, text); !slices.Equal(got, want) {
					t.Fatalf("Encode(%q) = %v, reference %v", text, got, want)
				}
				if n := len(text) + 1; n > tk.MaxTokenBytes()*(len(got)-1) {
					t.Errorf("%d bytes (dummy prefix included) in %d tokens, more than MaxTokenBytes %d each", n, len(got)-1, tk.MaxTokenBytes())
				}
			}
			t.Logf("MaxTokenBytes %d", tk.MaxTokenBytes())
		})
	}
}
