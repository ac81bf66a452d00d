package tokenizer

import "unicode"

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
//
// \s is Unicode's White_Space (as in llama.cpp and Hugging Face's Rust
// tokenizers), \p{L} letters, \p{N} numbers.

// preTokenizer returns the splitter of a supported tokenizer.ggml.pre.
func preTokenizer(pre string) func(string, func(string)) {
	switch pre {
	case "llama-bpe":
		return func(s string, emit func(string)) { splitLlama3(s, 3, emit) }
	case "qwen2":
		return func(s string, emit func(string)) { splitLlama3(s, 1, emit) }
	case "smollm":
		return func(s string, emit func(string)) {
			isolate(s, isN, true, func(part string) { splitGPT2(part, emit) })
		}
	default: // gpt2
		return splitGPT2
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
