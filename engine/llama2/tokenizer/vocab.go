package tokenizer

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Codec is what a model runtime needs from a tokenizer: both the llama2.c
// Tokenizer and the GGUF one built by FromVocab provide it.
type Codec interface {
	// Vocab returns the number of tokens.
	Vocab() int
	// Tokenize encodes text. addSpecial adds the tokens the vocabulary
	// frames a text with (BOS, unless the text starts with BOS already, as
	// a chat template's prompt does; and EOS where the vocabulary asks for
	// it); parseSpecial makes text that spells a special token become
	// that token. It stops early with ctx's error once ctx is done.
	Tokenize(ctx context.Context, text string, addSpecial, parseSpecial bool) ([]int, error)
	// Piece returns the bytes token tok stands for when it follows token
	// prev (a string holding raw bytes, which need not be valid UTF-8).
	// Control tokens stand for nothing.
	Piece(prev, tok int) string
	// EndOfGeneration reports whether sampling tok ends a generation.
	EndOfGeneration(tok int) bool
	// MaxTokenBytes returns the most bytes of text one token of Tokenize's
	// output stands for, or 0 when there is no such bound.
	MaxTokenBytes() int
}

// Token types of GGUF's tokenizer.ggml.token_type (llama.cpp's numbering).
const (
	TypeUndefined   int32 = 0
	TypeNormal      int32 = 1
	TypeUnknown     int32 = 2
	TypeControl     int32 = 3
	TypeUserDefined int32 = 4
	TypeUnused      int32 = 5
	TypeByte        int32 = 6
)

// Vocab is a tokenizer as GGUF metadata describes it: the tokenizer.ggml.*
// keys. Special token ids are -1 when absent.
type Vocab struct {
	Model  string    // tokenizer.ggml.model: "llama" (SentencePiece) or "gpt2" (byte-level BPE)
	Pre    string    // tokenizer.ggml.pre: the pre-tokenizer of a gpt2 vocabulary
	Tokens []string  // tokenizer.ggml.tokens
	Scores []float32 // tokenizer.ggml.scores (llama; may be nil for gpt2)
	Types  []int32   // tokenizer.ggml.token_type (nil: every token normal)
	Merges []string  // tokenizer.ggml.merges, "left right", best first (gpt2)

	BOS, EOS, UNK, PAD, EOT, EOM int32 // tokenizer.ggml.*_token_id
	// FIM holds the fill-in-the-middle tokens' ids, tokenizer.ggml.fim_
	// {pre,suf,mid,pad,rep,sep}_token_id in that order; where one is
	// absent, the token is found by its text (special.go).
	FIM [6]int32

	AddBOS         bool // tokenizer.ggml.add_bos_token
	AddEOS         bool // tokenizer.ggml.add_eos_token
	AddSpacePrefix bool // tokenizer.ggml.add_space_prefix (llama)

	// Name is general.name, which llama.cpp reads for some models' special
	// token attributes (special.go).
	Name string
}

// NoToken is the id of an absent special token in a Vocab.
const NoToken int32 = -1

// NewVocab returns a Vocab of the given model with every special token
// absent.
func NewVocab(model string) Vocab {
	v := Vocab{Model: model, BOS: NoToken, EOS: NoToken, UNK: NoToken, PAD: NoToken, EOT: NoToken, EOM: NoToken}
	for i := range v.FIM {
		v.FIM[i] = NoToken
	}
	return v
}

// DefaultAddBOS reports whether llama.cpp adds BOS to a vocabulary of the
// given model and pre-tokenizer whose file does not say
// (tokenizer.ggml.add_bos_token): SentencePiece ones and Llama 3's do.
func DefaultAddBOS(model, pre string) bool {
	return model == "llama" || model == "gpt2" && preKinds[pre] == preLlama3
}

// GGUF is a tokenizer built from GGUF metadata by FromVocab. It is
// immutable and safe for concurrent use.
type GGUF struct {
	v       Vocab
	ids     map[string]int32
	decoded []string // what each token stands for (Piece)
	types   []int32  // token types, with llama.cpp's overrides (special.go)
	eog     map[int32]bool
	special []int32 // tokens matched in text before tokenizing, longest first
	strip   map[int32]strip
	maxTok  int

	bpe *bpeModel
	spm *spmModel
}

var _ Codec = (*GGUF)(nil)
var _ Codec = (*Tokenizer)(nil)

// FromVocab builds a tokenizer from GGUF metadata. It refuses an unknown
// model or pre-tokenizer, naming it, and a vocabulary whose parts do not
// fit together.
func FromVocab(v Vocab) (*GGUF, error) {
	n := len(v.Tokens)
	if n == 0 {
		return nil, fmt.Errorf("tokenizer: empty vocabulary")
	}
	if v.Scores != nil && len(v.Scores) != n {
		return nil, fmt.Errorf("tokenizer: %d scores for %d tokens", len(v.Scores), n)
	}
	if v.Types != nil && len(v.Types) != n {
		return nil, fmt.Errorf("tokenizer: %d token types for %d tokens", len(v.Types), n)
	}
	for _, s := range []struct {
		name string
		id   int32
	}{{"bos", v.BOS}, {"eos", v.EOS}, {"unknown", v.UNK}, {"padding", v.PAD}, {"eot", v.EOT}, {"eom", v.EOM},
		{"fim_pre", v.FIM[0]}, {"fim_suf", v.FIM[1]}, {"fim_mid", v.FIM[2]}, {"fim_pad", v.FIM[3]}, {"fim_rep", v.FIM[4]}, {"fim_sep", v.FIM[5]}} {
		if s.id < NoToken || s.id >= int32(n) {
			return nil, fmt.Errorf("tokenizer: %s_token_id %d is outside the vocabulary of %d tokens", s.name, s.id, n)
		}
	}
	if v.AddBOS && v.BOS == NoToken {
		return nil, fmt.Errorf("tokenizer: add_bos_token is set but there is no bos_token_id")
	}
	if v.AddEOS && v.EOS == NoToken {
		return nil, fmt.Errorf("tokenizer: add_eos_token is set but there is no eos_token_id")
	}
	g := &GGUF{v: v, ids: make(map[string]int32, n), decoded: make([]string, n), eog: map[int32]bool{}}
	for i, tok := range v.Tokens {
		if _, dup := g.ids[tok]; !dup {
			g.ids[tok] = int32(i)
		}
	}
	g.classify()
	g.stripAttrs()
	var err error
	switch v.Model {
	case "gpt2":
		if _, ok := preKinds[v.Pre]; !ok {
			return nil, fmt.Errorf("tokenizer: unsupported pre-tokenizer %q of a gpt2 vocabulary (supported: %s)", v.Pre, supportedPre())
		}
		g.bpe, err = newBPE(g)
	case "llama":
		g.spm, err = newSPM(g)
	default:
		return nil, fmt.Errorf("tokenizer: unsupported tokenizer model %q (supported: llama, gpt2)", v.Model)
	}
	if err != nil {
		return nil, err
	}
	for i := range n {
		switch g.tokenType(int32(i)) {
		case TypeControl, TypeUserDefined, TypeUnknown:
			if v.Tokens[i] != "" {
				g.special = append(g.special, int32(i))
			}
		}
		g.maxTok = max(g.maxTok, len(g.decoded[i]), len(v.Tokens[i]))
	}
	// Longest first, so a special token that contains another wins.
	slices.SortStableFunc(g.special, func(a, b int32) int { return len(v.Tokens[b]) - len(v.Tokens[a]) })
	// An unknown code point becomes one token standing for up to 4 bytes.
	g.maxTok = max(g.maxTok, 4)
	return g, nil
}

func (g *GGUF) tokenType(id int32) int32 { return g.types[id] }

// Vocab returns the number of tokens.
func (g *GGUF) Vocab() int { return len(g.v.Tokens) }

// Text returns token tok's entry in the vocabulary ("" when out of range).
func (g *GGUF) Text(tok int) string {
	if tok < 0 || tok >= len(g.v.Tokens) {
		return ""
	}
	return g.v.Tokens[tok]
}

// ID returns the token whose vocabulary entry is text.
func (g *GGUF) ID(text string) (int, bool) {
	id, ok := g.ids[text]
	return int(id), ok
}

// Control reports whether tok is a control token (by its type, or by its
// text as llama.cpp recognises control tokens: special.go). Control tokens
// decode to nothing, and only parse-special matches them in text.
func (g *GGUF) Control(tok int) bool {
	return tok >= 0 && tok < len(g.types) && g.types[tok] == TypeControl
}

// BOS and EOS return the vocabulary's BOS and EOS tokens, -1 when absent.
func (g *GGUF) BOS() int { return int(g.v.BOS) }
func (g *GGUF) EOS() int { return int(g.v.EOS) }

// EndOfGeneration reports whether tok ends a generation: the EOS, EOT and
// EOM tokens, and any of <|eot_id|>, <|im_end|>, <|end_of_text|>,
// <|endoftext|>, <|eom_id|>, <|end|>, <end_of_turn>, ... the vocabulary
// has (llama.cpp's list, special.go).
func (g *GGUF) EndOfGeneration(tok int) bool { return g.eog[int32(tok)] }

// MaxTokenBytes returns the most bytes of text one token stands for: the
// longest piece or vocabulary entry, and at least 4 (an unknown code
// point).
func (g *GGUF) MaxTokenBytes() int { return g.maxTok }

// Piece returns the bytes token tok stands for: control tokens stand for
// nothing, byte tokens for their byte; in a SentencePiece vocabulary with
// add_space_prefix, the first piece after BOS loses its leading space.
func (g *GGUF) Piece(prev, tok int) string {
	if tok < 0 || tok >= len(g.decoded) {
		return ""
	}
	p := g.decoded[tok]
	if g.spm != nil && g.v.AddSpacePrefix && prev == int(g.v.BOS) && strings.HasPrefix(p, " ") {
		p = p[1:]
	}
	return p
}

// Tokenize encodes text: see Codec.
func (g *GGUF) Tokenize(ctx context.Context, text string, addSpecial, parseSpecial bool) ([]int, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []int
	if addSpecial && g.v.AddBOS {
		out = append(out, int(g.v.BOS))
	}
	var err error
	out, err = g.encodeText(ctx, out, text, parseSpecial)
	if err != nil {
		return nil, err
	}
	// A text that starts with BOS spelled out (a chat template's
	// bos_token) gets no second one, as llama.cpp's server strips the
	// template's when the vocabulary adds its own.
	if len(out) > 1 && addSpecial && g.v.AddBOS && out[1] == out[0] {
		out = out[1:]
	}
	if addSpecial && g.v.AddEOS {
		out = append(out, int(g.v.EOS))
	}
	return out, nil
}

// Tokenize encodes text as llama2.c does: addSpecial adds BOS; llama2.c
// vocabularies have no special tokens to parse.
func (t *Tokenizer) Tokenize(ctx context.Context, text string, addSpecial, _ bool) ([]int, error) {
	return t.Encode(ctx, text, addSpecial, false)
}

// EndOfGeneration reports whether tok ends a generation: BOS or EOS.
func (t *Tokenizer) EndOfGeneration(tok int) bool { return tok == BOS || tok == EOS }

// encodeText appends the tokens of text: special tokens spelled in it
// first (user-defined ones always, control ones only with parseSpecial),
// then the model's encoding of the text between them.
func (g *GGUF) encodeText(ctx context.Context, out []int, text string, parseSpecial bool) ([]int, error) {
	type fragment struct {
		text string
		tok  int32 // NoToken for text
	}
	var frags []fragment
	if text != "" { // an empty text has no dummy prefix either
		frags = append(frags, fragment{text: text, tok: NoToken})
	}
	for _, id := range g.special {
		if !parseSpecial && g.tokenType(id) != TypeUserDefined {
			continue
		}
		sp := g.v.Tokens[id]
		st := g.strip[id]
		var next []fragment
		for _, f := range frags {
			if f.tok != NoToken || !strings.Contains(f.text, sp) {
				next = append(next, f)
				continue
			}
			rest := f.text
			for {
				before, after, found := strings.Cut(rest, sp)
				if found && st&lstrip != 0 {
					before = strings.TrimRight(before, cSpaces)
				}
				if before != "" {
					next = append(next, fragment{text: before, tok: NoToken})
				}
				if !found {
					break
				}
				next = append(next, fragment{tok: id})
				rest = after
				if st&rstrip != 0 {
					rest = strings.TrimLeft(rest, cSpaces)
				}
			}
		}
		frags = next
	}
	prevSpecial := true // the text starts the prompt
	var err error
	for _, f := range frags {
		if f.tok != NoToken {
			out = append(out, int(f.tok))
			prevSpecial = true
			continue
		}
		if g.spm != nil {
			out, err = g.spm.encode(ctx, out, f.text, prevSpecial)
		} else {
			out, err = g.bpe.encode(ctx, out, f.text)
		}
		if err != nil {
			return nil, err
		}
		prevSpecial = false
	}
	return out, nil
}
