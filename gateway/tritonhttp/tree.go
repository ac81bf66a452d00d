package tritonhttp

import (
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/streamgate/streamgate/gateway/internal/jsonobj"
)

// node is one JSON value of a request, read in one pass (parseTree), the
// way Triton's JSON library sees it: objects keep their members in order
// (and duplicates: lookups take the first), numbers keep their literal.
type node struct {
	kind byte // '{' object, '[' array, '"' string, '0' number, 't' true, 'f' false, 'n' null
	// s is a string's value or a number's literal. A number's literal
	// aliases the parsed bytes: nodes do not outlive the parse.
	s string
	// kids are an array's elements, or an object's keys and values
	// alternately.
	kids []node
}

// maxDepth bounds nesting, as encoding/json does.
const maxDepth = 10000

var errSyntax = errors.New("syntax")

// parseTree reads b, one JSON value (all white space: an empty object, as
// jsonobj.Members takes it). Invalid JSON is a *jsonobj.SyntaxError with
// its position.
func parseTree(b []byte) (node, error) {
	p := treeParser{b: b}
	p.space()
	if p.i == len(b) {
		return node{kind: '{'}, nil
	}
	n, err := p.value(0)
	if err == nil {
		p.space()
		if p.i != len(b) {
			err = errSyntax
		}
	}
	if err != nil {
		_, jerr := jsonobj.Members(b)
		var se *jsonobj.SyntaxError
		if errors.As(jerr, &se) {
			return node{}, se
		}
		return node{}, &jsonobj.SyntaxError{Offset: int64(p.i), Line: 1, Column: p.i + 1, Msg: "invalid JSON"}
	}
	return n, nil
}

type treeParser struct {
	b []byte
	i int
}

func (p *treeParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *treeParser) value(depth int) (node, error) {
	if depth > maxDepth || p.i >= len(p.b) {
		return node{}, errSyntax
	}
	switch c := p.b[p.i]; {
	case c == '{' || c == '[':
		return p.composite(c, depth)
	case c == '"':
		s, err := p.str()
		return node{kind: '"', s: s}, err
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	}
	for _, lit := range []string{"true", "false", "null"} {
		if len(p.b)-p.i >= len(lit) && string(p.b[p.i:p.i+len(lit)]) == lit {
			p.i += len(lit)
			return node{kind: lit[0]}, nil
		}
	}
	return node{}, errSyntax
}

func (p *treeParser) composite(open byte, depth int) (node, error) {
	n := node{kind: open}
	closing := byte(']')
	if open == '{' {
		closing = '}'
	}
	p.i++
	p.space()
	if p.i < len(p.b) && p.b[p.i] == closing {
		p.i++
		return n, nil
	}
	for {
		p.space()
		if open == '{' {
			if p.i >= len(p.b) || p.b[p.i] != '"' {
				return n, errSyntax
			}
			k, err := p.str()
			if err != nil {
				return n, err
			}
			n.kids = append(n.kids, node{kind: '"', s: k})
			p.space()
			if p.i >= len(p.b) || p.b[p.i] != ':' {
				return n, errSyntax
			}
			p.i++
			p.space()
		}
		v, err := p.value(depth + 1)
		if err != nil {
			return n, err
		}
		n.kids = append(n.kids, v)
		p.space()
		if p.i >= len(p.b) {
			return n, errSyntax
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case closing:
			p.i++
			return n, nil
		default:
			return n, errSyntax
		}
	}
}

// number scans -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?.
func (p *treeParser) number() (node, error) {
	start := p.i
	digits := func() int {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.b[p.i] == '-' {
		p.i++
	}
	if p.i < len(p.b) && p.b[p.i] == '0' {
		p.i++
	} else if digits() == 0 {
		return node{}, errSyntax
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return node{}, errSyntax
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return node{}, errSyntax
		}
	}
	lit := p.b[start:p.i]
	return node{kind: '0', s: unsafe.String(unsafe.SliceData(lit), len(lit))}, nil
}

// str reads a string, decoding escapes and replacing invalid UTF-8 (and
// lone surrogates) with U+FFFD, as encoding/json does.
func (p *treeParser) str() (string, error) {
	p.i++ // the opening quote
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := string(p.b[start:p.i])
			p.i++
			return s, nil
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return p.slowStr(start)
		}
		p.i++
	}
	return "", errSyntax
}

func (p *treeParser) slowStr(start int) (string, error) {
	out := append([]byte(nil), p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return string(out), nil
		case c < 0x20:
			return "", errSyntax
		case c == '\\':
			if p.i+1 >= len(p.b) {
				return "", errSyntax
			}
			e := p.b[p.i+1]
			p.i += 2
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", errSyntax
				}
				if utf16.IsSurrogate(r) {
					r2 := utf8.RuneError
					if save := p.i; p.i+1 < len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
						p.i += 2
						if x, ok := p.hex4(); !ok {
							return "", errSyntax
						} else if d := utf16.DecodeRune(r, x); d != utf8.RuneError {
							r2 = d
						} else {
							p.i = save // x is read again on its own
						}
					}
					r = r2
				}
				out = utf8.AppendRune(out, r)
			default:
				return "", errSyntax
			}
		case c < utf8.RuneSelf:
			out = append(out, c)
			p.i++
		default:
			r, size := utf8.DecodeRune(p.b[p.i:])
			p.i += size
			out = utf8.AppendRune(out, r) // RuneError for invalid bytes
		}
	}
	return "", errSyntax
}

func (p *treeParser) hex4() (rune, bool) {
	if p.i+4 > len(p.b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(p.b[p.i:p.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	p.i += 4
	return rune(v), true
}
