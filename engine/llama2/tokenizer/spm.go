package tokenizer

import (
	"context"
	"strings"
)

// SentencePiece-style BPE (GGUF's "llama" model), as llama.cpp runs it:
// spaces become ▁ (with one more in front of a text that starts the prompt
// or follows a special token, when add_space_prefix is set), every code
// point starts as a symbol, and adjacent symbols whose joined text is a
// token join, best score first (then leftmost), until none does. A final
// symbol that is no token becomes its bytes' <0xXX> tokens, or UNK.

type spmModel struct {
	g      *GGUF
	byteID [256]int32
}

func newSPM(g *GGUF) (*spmModel, error) {
	m := &spmModel{g: g}
	for i := range m.byteID {
		m.byteID[i] = NoToken
	}
	for i, tok := range g.v.Tokens {
		typ := g.tokenType(int32(i))
		if b, ok := byteToken(tok); ok && (typ == TypeByte || g.v.Types == nil) {
			if m.byteID[b] == NoToken {
				m.byteID[b] = int32(i)
			}
			g.decoded[i] = byteStrings[b : int(b)+1]
			continue
		}
		switch typ {
		case TypeControl, TypeUnknown, TypeUnused, TypeUndefined:
		case TypeUserDefined:
			g.decoded[i] = tok
		default:
			g.decoded[i] = strings.ReplaceAll(tok, "▁", " ")
		}
	}
	return m, nil
}

func (m *spmModel) score(id int32) float32 {
	if m.g.v.Scores == nil {
		return 0
	}
	return m.g.v.Scores[id]
}

// encode appends the tokens of a text with no special tokens in it; prefix
// adds the dummy space.
func (m *spmModel) encode(ctx context.Context, out []int, text string, prefix bool) ([]int, error) {
	if prefix && m.g.v.AddSpacePrefix {
		text = " " + text
	}
	text = strings.ReplaceAll(text, " ", "▁")
	var sm spanMerger
	cuts := codePointCuts(text)
	sm.start(cuts, func(i int) int32 {
		if id, ok := m.g.ids[text[cuts[i]:cuts[i+1]]]; ok {
			return id
		}
		return NoToken
	})
	err := sm.merge(ctx, text, func(joined string, _, _ int32) (uint32, int32, bool) {
		id, ok := m.g.ids[joined]
		if !ok {
			return 0, 0, false
		}
		return scorePriority(m.score(id)), id, true
	})
	if err != nil {
		return nil, err
	}
	sm.each(func(s *span) {
		if s.id >= 0 {
			out = append(out, int(s.id))
			return
		}
		// A code point that is no token: its bytes' tokens.
		for _, b := range []byte(text[s.start:s.end]) {
			switch {
			case m.byteID[b] != NoToken:
				out = append(out, int(m.byteID[b]))
			case m.g.v.UNK != NoToken:
				out = append(out, int(m.g.v.UNK))
			}
		}
	})
	return out, nil
}
