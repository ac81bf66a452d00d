package tokenizer

import "strings"

// llama.cpp does not take a GGUF vocabulary's token types as they are: it
// recognises control tokens by their text (tokenizer.ggml.token_type often
// marks them normal or user-defined), and decides which tokens end a
// generation by text too. The lists below are those of the llama.cpp that
// the parity tests run (node-llama-cpp 3.22.1's).

// eogTexts end a generation wherever a vocabulary has them, besides its
// EOS, EOT and EOM ids; each is a control token.
var eogTexts = []string{
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
	"<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
	"<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
	"<｜end▁of▁sentence｜>", "[e~[",
}

// fimTexts are fill-in-the-middle tokens (by kind: prefix, suffix,
// middle, pad, repo, file separator), each a control token; those of the
// last three kinds also end a generation.
var fimTexts = [][]string{
	{"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"},
	{"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"},
	{"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"},
	{"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"},
	{"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"},
	{"<|file_sep|>"},
}

// renderedTexts are gpt-oss's channel tokens: user-defined, so they are
// always matched in text and decode to their text.
var renderedTexts = []string{"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}

// classify sets g.types (the vocabulary's types with llama.cpp's
// overrides) and g.eog.
func (g *GGUF) classify() {
	v := g.v
	g.types = make([]int32, len(v.Tokens))
	for i := range g.types {
		switch {
		case v.Types == nil:
			g.types[i] = TypeNormal
		case v.Types[i] >= TypeNormal && v.Types[i] <= TypeByte:
			g.types[i] = v.Types[i]
		default: // undefined, or a type llama.cpp does not know: it stands for nothing
			g.types[i] = TypeUndefined
		}
	}
	control := func(text string) (int32, bool) {
		id, ok := g.ids[text]
		if ok {
			g.types[id] = TypeControl
		}
		return id, ok
	}
	for i, texts := range fimTexts {
		// A file's fim_*_token_id names the token; only without one is it
		// found by its text, and made a control token.
		if id := v.FIM[i]; id != NoToken {
			if i >= 3 {
				g.eog[id] = true
			}
			continue
		}
		for _, t := range texts {
			if id, ok := control(t); ok && i >= 3 {
				g.eog[id] = true
			}
		}
	}
	for _, t := range eogTexts {
		if id, ok := control(t); ok {
			g.eog[id] = true
		}
	}
	for _, t := range renderedTexts {
		if id, ok := g.ids[t]; ok {
			g.types[id] = TypeUserDefined
		}
	}
	for _, id := range []int32{v.EOS, v.EOT, v.EOM} {
		if id != NoToken {
			g.eog[id] = true
		}
	}
	// gpt-oss and solar-open end turns with <|return|>/<|call|> or
	// <|calls|>/<|flush|>, so their <|end|> does not end a generation.
	has := func(t string) bool { id, ok := g.ids[t]; return ok && g.eog[id] }
	if id, ok := g.ids["<|end|>"]; ok && g.eog[id] && (has("<|return|>") && has("<|call|>") || has("<|calls|>") && has("<|flush|>")) {
		delete(g.eog, id)
		g.types[id] = TypeUserDefined
	}
	// gemma4 and paddleocr: </s> is text there.
	if id, ok := g.ids["</s>"]; ok && g.eog[id] && has("<|tool_response>") {
		delete(g.eog, id)
		g.types[id] = TypeNormal
	}
}

// strip is a special token's lstrip and rstrip attributes: where it is
// found in text, the spaces before it (lstrip) or after it (rstrip) go
// with it.
type strip uint8

const (
	lstrip strip = 1 << iota
	rstrip
)

// cSpaces are the bytes C's isspace accepts, which llama.cpp strips.
const cSpaces = " \t\n\v\f\r"

// stripAttrs sets g.strip as llama.cpp does, by general.name, which is
// the only place it takes them from: a Phi-3 model's special tokens (and
// </s>) take the spaces after them, except <unk>, <s> and <|endoftext|>;
// ModernBERT's [MASK] takes the spaces before it. (llama.cpp refuses a
// Phi-3 file that lacks one of those four tokens; here they are left out.)
func (g *GGUF) stripAttrs() {
	g.strip = map[int32]strip{}
	name := strings.ToLower(g.v.Name)
	switch {
	case strings.Contains(name, "phi-3") || strings.Contains(name, "phi3"):
		for i := range g.types {
			switch g.types[i] {
			case TypeControl, TypeUserDefined, TypeUnknown:
				g.strip[int32(i)] |= rstrip
			}
		}
		if id, ok := g.ids["</s>"]; ok {
			g.strip[id] |= rstrip
		}
		for _, t := range []string{"<unk>", "<s>", "<|endoftext|>"} {
			if id, ok := g.ids[t]; ok {
				g.strip[id] &^= rstrip
			}
		}
	case strings.Contains(name, "modern-bert"):
		if id, ok := g.ids["[MASK]"]; ok {
			g.strip[id] |= lstrip
		}
	}
}
