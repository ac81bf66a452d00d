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

// mergeKey is a merge's two tokens.
func mergeKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// mergeRule is what a merge makes: its rank (lower first) and token.
type mergeRule struct{ rank, id uint32 }

type bpeModel struct {
	g            *GGUF
	merges       map[uint64]mergeRule
	byteID       [256]int32 // the token of each byte's stand-in character, -1 if none
	split        func(text string, emit func(word string))
	ignoreMerges bool // a word that is a token is that token (Llama 3)
}

func newBPE(g *GGUF) (*bpeModel, error) {
	kind := preKinds[g.v.Pre]
	m := &bpeModel{g: g, merges: make(map[uint64]mergeRule, len(g.v.Merges)), split: kind.splitter()}
	m.ignoreMerges = kind == preLlama3
	for b, r := range byteRunes {
		m.byteID[b] = NoToken
		if id, ok := g.ids[string(r)]; ok {
			m.byteID[b] = id
		}
	}
	for i, s := range g.v.Merges {
		a, b, ok := strings.Cut(s, " ")
		if !ok || a == "" || b == "" {
			return nil, fmt.Errorf("tokenizer: merge %d %q is not two symbols separated by a space", i, s)
		}
		// A merge of parts or into a result that is no token can never
		// apply: merging starts from tokens, and makes only tokens.
		aID, okA := g.ids[a]
		bID, okB := g.ids[b]
		id, okAB := g.ids[a+b]
		if !okA || !okB || !okAB {
			continue
		}
		if _, dup := m.merges[mergeKey(aID, bID)]; !dup {
			m.merges[mergeKey(aID, bID)] = mergeRule{rank: uint32(i), id: uint32(id)}
		}
	}
	for i, tok := range g.v.Tokens {
		switch g.tokenType(int32(i)) {
		case TypeControl, TypeUnknown, TypeUnused, TypeUndefined:
		case TypeUserDefined:
			g.decoded[i] = tok
		default:
			g.decoded[i] = fromByteLevel(tok)
		}
	}
	return m, nil
}

func (m *bpeModel) join(_ string, a, b int32) (uint32, int32, bool) {
	if a < 0 || b < 0 {
		return 0, 0, false
	}
	r, ok := m.merges[mergeKey(a, b)]
	return r.rank, int32(r.id), ok
}

// encode appends the tokens of a text with no special tokens in it. The
// symbols that merging starts from are the word's bytes (each one GPT-2
// stand-in character).
func (m *bpeModel) encode(ctx context.Context, out []int, text string) ([]int, error) {
	var (
		sm   spanMerger
		buf  []byte
		cuts []int32
		err  error
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
		if m.ignoreMerges {
			buf = byteLevel(buf[:0], word)
			if id, ok := m.g.ids[string(buf)]; ok {
				out = append(out, int(id))
				return
			}
		}
		cuts = cuts[:0]
		for i := range len(word) + 1 {
			cuts = append(cuts, int32(i))
		}
		sm.start(cuts, func(i int) int32 { return m.byteID[word[i]] })
		if err = sm.merge(ctx, word, m.join); err != nil {
			return
		}
		sm.each(func(s *span) {
			switch {
			case s.id >= 0:
				out = append(out, int(s.id))
			case m.g.v.UNK != NoToken: // a byte with no token
				out = append(out, int(m.g.v.UNK))
			}
		})
	})
	return out, err
}
