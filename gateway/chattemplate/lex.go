package chattemplate

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// The lexer turns a template into tokens: text between tags, and the
// words, literals and operators inside {{ }} and {% %}. Whitespace control
// is applied here, as Hugging Face's chat templates are rendered: the
// template loses one trailing newline, lstrip_blocks drops the spaces and
// tabs that start a line before {% or {#, trim_blocks drops the newline
// right after %} or #}, and a '-' inside a tag's delimiter trims all
// whitespace on that side.

type tokKind int

const (
	tText tokKind = iota
	tExprOpen
	tExprClose
	tStmtOpen
	tStmtClose
	tName
	tString
	tInt
	tFloat
	tOp
	tEOF
)

type token struct {
	kind tokKind
	val  string
	pos  int // byte offset in the preprocessed template
}

var (
	lstripBlocks = regexp.MustCompile(`(?m)^[ \t]*(\{[#%-])`)
	trimBlocks   = regexp.MustCompile(`([#%-]\})\n`)
	generation   = regexp.MustCompile(`(\s*)\{%(-?)\s*(?:end)?generation\s*(-?)%\}(\s*)`)
)

func preprocess(src string) string {
	src = strings.TrimSuffix(src, "\n")
	src = lstripBlocks.ReplaceAllString(src, "$1")
	src = trimBlocks.ReplaceAllString(src, "$1")
	// {% generation %} marks (for training masks) render nothing.
	return generation.ReplaceAllStringFunc(src, func(m string) string {
		g := generation.FindStringSubmatch(m)
		out := ""
		if g[2] == "" {
			out += g[1]
		}
		if g[3] == "" {
			out += g[4]
		}
		return out
	})
}

// ops are the operators, longest first.
var ops = []string{"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">", "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"}

func lex(src string) ([]token, error) {
	src = preprocess(src)
	var toks []token
	trimLast := func() {
		if n := len(toks); n > 0 && toks[n-1].kind == tText {
			toks[n-1].val = strings.TrimRightFunc(toks[n-1].val, unicode.IsSpace)
		}
	}
	i := 0
	for i < len(src) {
		// Text up to the next tag.
		j := i
		for j < len(src) && !(src[j] == '{' && j+1 < len(src) && strings.IndexByte("{%#", src[j+1]) >= 0) {
			j++
		}
		if j > i {
			toks = append(toks, token{tText, src[i:j], i})
			i = j
			continue
		}
		start := i
		strip := i+2 < len(src) && src[i+2] == '-'
		switch src[i+1] {
		case '#':
			end := strings.Index(src[i+2:], "#}")
			if end < 0 {
				return nil, fmt.Errorf("comment at byte %d is not closed with #}", start)
			}
			body := src[i+2 : i+2+end]
			if strip {
				trimLast()
			}
			i += 2 + end + 2
			if strings.HasSuffix(body, "-") {
				i = skipSpace(src, i)
			}
			continue
		}
		if strip {
			trimLast()
			i++
		}
		if src[start+1] == '{' {
			toks = append(toks, token{tExprOpen, "{{", start})
		} else {
			toks = append(toks, token{tStmtOpen, "{%", start})
		}
		i += 2
		closing := "}}"
		closeKind := tExprClose
		if src[start+1] == '%' {
			closing, closeKind = "%}", tStmtClose
		}
		var err error
		toks, i, err = lexTag(src, i, toks, closing, closeKind)
		if err != nil {
			return nil, err
		}
	}
	// Drop texts that trimming emptied.
	out := toks[:0]
	for _, t := range toks {
		if t.kind != tText || t.val != "" {
			out = append(out, t)
		}
	}
	return append(out, token{kind: tEOF, pos: len(src)}), nil
}

func skipSpace(src string, i int) int {
	for i < len(src) {
		r := rune(src[i])
		if r >= 0x80 || !unicode.IsSpace(r) {
			break
		}
		i++
	}
	return i
}

// lexTag lexes the inside of a tag, up to and including its closing
// delimiter.
func lexTag(src string, i int, toks []token, closing string, closeKind tokKind) ([]token, int, error) {
	depth := 0 // of { } inside an expression, so "}}" can close dicts
	for {
		i = skipSpace(src, i)
		if i >= len(src) {
			return nil, 0, fmt.Errorf("tag is not closed with %s", closing)
		}
		if src[i] == '-' && strings.HasPrefix(src[i+1:], closing) && depth == 0 {
			toks = append(toks, token{closeKind, closing, i})
			return toks, skipSpace(src, i+3), nil
		}
		if strings.HasPrefix(src[i:], closing) && depth == 0 {
			toks = append(toks, token{closeKind, closing, i})
			return toks, i + 2, nil
		}
		c := src[i]
		switch {
		case c == '\'' || c == '"':
			s, n, err := lexString(src, i)
			if err != nil {
				return nil, 0, err
			}
			toks = append(toks, token{tString, s, i})
			i = n
		case c >= '0' && c <= '9':
			j := i
			for j < len(src) && src[j] >= '0' && src[j] <= '9' {
				j++
			}
			kind := tInt
			if j+1 < len(src) && src[j] == '.' && src[j+1] >= '0' && src[j+1] <= '9' {
				kind = tFloat
				j++
				for j < len(src) && src[j] >= '0' && src[j] <= '9' {
					j++
				}
			}
			toks = append(toks, token{kind, src[i:j], i})
			i = j
		case c == '_' || c < 0x80 && unicode.IsLetter(rune(c)):
			j := i
			for j < len(src) && (src[j] == '_' || src[j] < 0x80 && (unicode.IsLetter(rune(src[j])) || unicode.IsDigit(rune(src[j])))) {
				j++
			}
			toks = append(toks, token{tName, src[i:j], i})
			i = j
		default:
			op := ""
			for _, o := range ops {
				if strings.HasPrefix(src[i:], o) {
					op = o
					break
				}
			}
			if op == "" {
				return nil, 0, fmt.Errorf("unexpected character %q at byte %d", c, i)
			}
			switch op {
			case "{":
				depth++
			case "}":
				depth--
			}
			toks = append(toks, token{tOp, op, i})
			i += len(op)
		}
	}
}

// lexString reads a quoted string literal with Python's escapes.
func lexString(src string, i int) (string, int, error) {
	q := src[i]
	var b strings.Builder
	for j := i + 1; j < len(src); j++ {
		c := src[j]
		switch {
		case c == q:
			return b.String(), j + 1, nil
		case c == '\\' && j+1 < len(src):
			j++
			switch e := src[j]; e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'v':
				b.WriteByte('\v')
			case '\\', '\'', '"':
				b.WriteByte(e)
			case 'x', 'u':
				n := 2
				if e == 'u' {
					n = 4
				}
				var r rune
				if j+n >= len(src) {
					return "", 0, fmt.Errorf("string at byte %d: short \\%c escape", i, e)
				}
				for _, h := range src[j+1 : j+1+n] {
					d := strings.IndexRune("0123456789abcdef", unicode.ToLower(h))
					if d < 0 {
						return "", 0, fmt.Errorf("string at byte %d: bad \\%c escape", i, e)
					}
					r = r*16 + rune(d)
				}
				b.WriteRune(r)
				j += n
			default:
				return "", 0, fmt.Errorf("string at byte %d: unsupported escape \\%c", i, e)
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, fmt.Errorf("string at byte %d is not closed", i)
}
