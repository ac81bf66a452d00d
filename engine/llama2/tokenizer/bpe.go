package tokenizer

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Byte-level BPE (GGUF's "gpt2" model): the text is cut into words by the
// pre-tokenizer that tokenizer.ggml.pre names, each word's bytes are
// spelled with GPT-2's printable stand-in characters, and merges join
// adjacent symbols, lowest rank first (then leftmost), until none applies.

// byteRunes maps each byte to GPT-2's stand-in character: printable
// Latin-1 bytes stand for themselves, the others for U+0100 onwards in
// byte order.
var byteRunes, runeBytes = func() ([256]rune, map[rune]byte) {
	var br [256]rune
	rb := make(map[rune]byte, 256)
	next := rune(256)
	for b := range 256 {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF) {
			r = next
			next++
		}
		br[b] = r
		rb[r] = byte(b)
	}
	return br, rb
}()

// byteLevel spells text's bytes with their stand-in characters.
func byteLevel(dst []byte, text string) []byte {
	for i := 0; i < len(text); i++ {
		dst = utf8.AppendRune(dst, byteRunes[text[i]])
	}
	return dst
}

// fromByteLevel turns a token spelled in stand-in characters back into its
// bytes; a character that stands for no byte is kept as it is.
func fromByteLevel(tok string) string {
	var b strings.Builder
	for _, r := range tok {
		if c, ok := runeBytes[r]; ok {
			b.WriteByte(c)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

type mergePair struct{ a, b string }

type bpeModel struct {
	g            *GGUF
	ranks        map[mergePair]uint32
	split        func(text string, emit func(word string))
	ignoreMerges bool // a word that is a token is that token (Llama 3)
}

func newBPE(g *GGUF) (*bpeModel, error) {
	m := &bpeModel{g: g, ranks: make(map[mergePair]uint32, len(g.v.Merges)), split: preTokenizer(g.v.Pre)}
	m.ignoreMerges = g.v.Pre == "llama-bpe"
	for i, s := range g.v.Merges {
		a, b, ok := strings.Cut(s, " ")
		if !ok || a == "" || b == "" {
			return nil, fmt.Errorf("tokenizer: merge %d %q is not two symbols separated by a space", i, s)
		}
		if _, dup := m.ranks[mergePair{a, b}]; !dup {
			m.ranks[mergePair{a, b}] = uint32(i)
		}
	}
	for i, tok := range g.v.Tokens {
		switch g.tokenType(int32(i)) {
		case TypeControl, TypeUnknown, TypeUnused:
		case TypeUserDefined:
			g.decoded[i] = tok
		default:
			g.decoded[i] = fromByteLevel(tok)
		}
	}
	return m, nil
}

// encode appends the tokens of a text with no special tokens in it.
func (m *bpeModel) encode(ctx context.Context, out []int, text string) ([]int, error) {
	var (
		buf []byte
		err error
	)
	words := 0
	m.split(text, func(word string) {
		if err != nil {
			return
		}
		if words++; words%ctxCheckEvery == 0 {
			if err = ctx.Err(); err != nil {
				return
			}
		}
		buf = byteLevel(buf[:0], word)
		w := string(buf)
		if m.ignoreMerges {
			if id, ok := m.g.ids[w]; ok {
				out = append(out, int(id))
				return
			}
		}
		var spans [][2]int32
		spans, err = mergeSpans(ctx, w, codePointCuts(w), func(a, b string) (uint32, bool) {
			r, ok := m.ranks[mergePair{a, b}]
			return r, ok
		})
		for _, s := range spans {
			sym := w[s[0]:s[1]]
			if id, ok := m.g.ids[sym]; ok {
				out = append(out, int(id))
				continue
			}
			// A symbol that is no token: one token per stand-in character
			// (every byte's is one in a byte-level vocabulary).
			for _, r := range sym {
				if id, ok := m.g.ids[string(r)]; ok {
					out = append(out, int(id))
				} else if m.g.v.UNK != NoToken {
					out = append(out, int(m.g.v.UNK))
				}
			}
		}
	})
	return out, err
}
