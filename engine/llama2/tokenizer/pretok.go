package tokenizer

import (
	"slices"
	"strings"
	"unicode"
)

// Pre-tokenizers cut text into the words that byte-level BPE merges within.
// Each is a regular expression in Hugging Face's tokenizer.json and in
// llama.cpp; Go's regexp has no lookahead, so each is written out here by
// hand, alternative by alternative, with the same leftmost-first choice
// and greedy backtracking as the expression:
//
//	gpt2:      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//	llama-bpe: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//	qwen2:     the same with \p{N} for \p{N}{1,3}
//	smollm:    each \p{N} on its own, then gpt2 within the rest
//	default:   [\p{P}$+<=>^~|]+, then gpt2 within each part, then \p{N}+,
//	           then [0-9][0-9][0-9]
//
// llama.cpp applies a sequence of expressions each within the parts the
// last one cut, keeping the text between matches as parts of their own
// (which is why its gpt2 and default expressions can leave out the last
// \s+). \s is Unicode's White_Space (as in llama.cpp and Hugging Face's
// Rust tokenizers), \p{L} letters, \p{N} numbers, \p{P} punctuation.

// preKind is one of the pre-tokenizers above.
type preKind int

const (
	preDefault preKind = iota
	preGPT2
	preLlama3
	preQwen2
	preSmolLM
)

// preKinds maps each tokenizer.ggml.pre that llama.cpp reads as one of the
// pre-tokenizers above to it; "" (no name) is llama.cpp's default, as for
// files converted before names existed.
var preKinds = map[string]preKind{
	"": preDefault, "default": preDefault,
	"gpt-2": preGPT2, "phi-2": preGPT2, "gigachat": preGPT2, "a.x-4.0": preGPT2, "mellum": preGPT2,
	"exaone4": preGPT2, "mpt": preGPT2, "olmo": preGPT2, "jais": preGPT2, "trillion": preGPT2, "granite-docling": preGPT2,
	"llama3": preLlama3, "llama-v3": preLlama3, "llama-bpe": preLlama3, "falcon3": preLlama3, "falcon-h1": preLlama3,
	"pixtral": preLlama3, "midm-2.0": preLlama3, "lfm2": preLlama3,
	"qwen2": preQwen2, "deepseek-r1-qwen": preQwen2, "kormo": preQwen2, "f2llmv2": preQwen2, "megrez": preQwen2,
	"stablelm2": preQwen2, "hunyuan": preQwen2,
	"smollm": preSmolLM, "codeshell": preSmolLM, "exaone": preSmolLM, "minerva-7b": preSmolLM, "mellum2": preSmolLM,
}

// supportedPre lists the names of preKinds for an error message.
func supportedPre() string {
	var names []string
	for name := range preKinds {
		if name != "" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// splitter returns the splitter of a pre-tokenizer.
func (k preKind) splitter() func(string, func(string)) {
	switch k {
	case preLlama3:
		return func(s string, emit func(string)) { splitLlama3(s, 3, emit) }
	case preQwen2:
		return func(s string, emit func(string)) { splitLlama3(s, 1, emit) }
	case preSmolLM:
		return func(s string, emit func(string)) {
			isolate(s, isN, true, func(part string) { splitGPT2(part, emit) })
		}
	case preGPT2:
		return splitGPT2
	default:
		return splitDefault
	}
}

// isDefaultPunct is llama.cpp's [\p{P}\$\+<=>\^~\|].
func isDefaultPunct(r rune) bool {
	return unicode.IsPunct(r) || strings.ContainsRune("$+<=>^~|", r)
}

// splitDefault is llama.cpp's default pre-tokenizer.
func splitDefault(s string, emit func(string)) {
	isolate(s, isDefaultPunct, false, func(part string) {
		splitGPT2(part, func(word string) {
			isolate(word, isN, false, func(w string) { splitDigits3(w, emit) })
		})
	})
}

// splitDigits3 cuts every run of three ASCII digits, leftmost first, from
// s (the expression [0-9][0-9][0-9]), emitting the text between them as
// parts of their own.
func splitDigits3(s string, emit func(string)) {
	isDigit := func(i int) bool { return i < len(s) && s[i] >= '0' && s[i] <= '9' }
	start := 0
	for i := 0; i+3 <= len(s); {
		if isDigit(i) && isDigit(i+1) && isDigit(i+2) {
			if i > start {
				emit(s[start:i])
			}
			emit(s[i : i+3])
			i += 3
			start = i
			continue
		}
		i++
	}
	if start < len(s) {
		emit(s[start:])
	}
}

func isL(r rune) bool { return unicode.IsLetter(r) }
func isN(r rune) bool { return unicode.IsNumber(r) }
func isS(r rune) bool { return unicode.IsSpace(r) }

// isOther is [^\s\p{L}\p{N}].
func isOther(r rune) bool { return !isS(r) && !isL(r) && !isN(r) }

func isCRLF(r rune) bool { return r == '\r' || r == '\n' }

// runesOf decodes s into code points and their byte offsets (with len(s)
// last); an invalid byte is U+FFFD, one byte long.
func runesOf(s string) ([]rune, []int) {
	rs := make([]rune, 0, len(s))
	offs := make([]int, 0, len(s)+1)
	for i, r := range s {
		rs = append(rs, r)
		offs = append(offs, i)
	}
	return rs, append(offs, len(s))
}

// isolate cuts s into runs where each code point of class stands alone
// (single) or forms a run with its neighbours of class, and runs of the
// other code points; it emits every part in order.
func isolate(s string, class func(rune) bool, single bool, emit func(string)) {
	start := 0
	in := false
	for i, r := range s {
		c := class(r)
		if i > start && (c != in || c && single) {
			emit(s[start:i])
			start = i
		}
		in = c
	}
	if start < len(s) {
		emit(s[start:])
	}
}

// contraction returns the length in code points of a contraction ('s 't
// 're 've 'm 'll 'd) at rs[i:], 0 if none; fold allows upper case.
func contraction(rs []rune, i int, fold bool) int {
	if rs[i] != '\'' || i+1 >= len(rs) {
		return 0
	}
	lower := func(r rune) rune {
		if fold && r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}
	switch lower(rs[i+1]) {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v':
		if i+2 < len(rs) && lower(rs[i+2]) == 'e' {
			return 3
		}
	case 'l':
		if i+2 < len(rs) && lower(rs[i+2]) == 'l' {
			return 3
		}
	}
	return 0
}

// run returns the end of the run of class starting at i.
func run(rs []rune, i int, class func(rune) bool) int {
	for i < len(rs) && class(rs[i]) {
		i++
	}
	return i
}

// spaces matches \s+(?!\S)|\s+ at rs[i] (a space): the run of spaces, less
// its last space when a non-space follows and the run is longer than one.
func spaces(rs []rune, i int) int {
	j := run(rs, i, isS)
	if j < len(rs) && j-i > 1 {
		return j - 1
	}
	return j
}

// splitGPT2 is GPT-2's expression.
func splitGPT2(s string, emit func(string)) {
	rs, offs := runesOf(s)
	for i := 0; i < len(rs); {
		j := gpt2Match(rs, i)
		emit(s[offs[i]:offs[j]])
		i = j
	}
}

func gpt2Match(rs []rune, i int) int {
	if n := contraction(rs, i, false); n > 0 {
		return i + n
	}
	k := i
	if rs[i] == ' ' && i+1 < len(rs) {
		k = i + 1
	}
	for _, class := range []func(rune) bool{isL, isN, isOther} {
		if class(rs[k]) {
			return run(rs, k, class)
		}
	}
	return spaces(rs, i)
}

// splitLlama3 is Llama 3's expression with \p{N}{1,maxDigits}.
func splitLlama3(s string, maxDigits int, emit func(string)) {
	rs, offs := runesOf(s)
	for i := 0; i < len(rs); {
		j := llama3Match(rs, i, maxDigits)
		emit(s[offs[i]:offs[j]])
		i = j
	}
}

func llama3Match(rs []rune, i, maxDigits int) int {
	r := rs[i]
	if n := contraction(rs, i, true); n > 0 {
		return i + n
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if isL(r) {
		return run(rs, i, isL)
	}
	if !isCRLF(r) && !isN(r) && i+1 < len(rs) && isL(rs[i+1]) {
		return run(rs, i+1, isL)
	}
	// \p{N}{1,maxDigits}
	if isN(r) {
		j := i
		for j < len(rs) && j-i < maxDigits && isN(rs[j]) {
			j++
		}
		return j
	}
	// ?[^\s\p{L}\p{N}]+[\r\n]*
	k := i
	if r == ' ' && i+1 < len(rs) && isOther(rs[i+1]) {
		k = i + 1
	}
	if isOther(rs[k]) {
		return run(rs, run(rs, k, isOther), isCRLF)
	}
	// \s*[\r\n]+: through the last CR or LF of the run of spaces.
	j := run(rs, i, isS)
	for e := j - 1; e >= i; e-- {
		if isCRLF(rs[e]) {
			return e + 1
		}
	}
	return spaces(rs, i)
}
