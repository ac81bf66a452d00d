package constrain

import (
	"fmt"
	"regexp/syntax"
	"slices"
	"strings"
)

// A string's pattern (or format) compiles to a DFA over the bytes of the
// string's characters. The output matches the whole pattern (as if it
// were anchored at both ends: such strings also match it unanchored, as
// JSON Schema reads it) and uses printable ASCII without escapes only: a
// pattern that needs other characters matches nothing here and is
// refused.

// maxDFA bounds the states of a pattern's automaton.
const maxDFA = 1024

// dfa is a pattern's automaton: next[state][byte] is the state after
// byte (-1: refused), accept the states where the string may end. From
// every state an accepting one is reachable.
type dfa struct {
	next   [][128]int16
	accept []bool
}

// formats are the string formats Compile enforces, as patterns whose
// matches every validator accepts in that format.
var formats = map[string]string{
	"date":      `\d{4}-(0[1-9]|1[0-2])-(0[1-9]|1\d|2[0-8])`,
	"time":      `([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,3})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)`,
	"date-time": `\d{4}-(0[1-9]|1[0-2])-(0[1-9]|1\d|2[0-8])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,3})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)`,
	"uuid":      `[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}`,
	"email":     `[a-z0-9]{1,16}@[a-z0-9]{1,16}\.[a-z]{2,8}`,
}

// allowedByte reports whether b may appear in a patterned string: the
// printable ASCII characters a JSON string holds without escaping.
func allowedByte(b byte) bool { return b >= 0x20 && b < 0x7F && b != '"' && b != '\\' }

// compilePattern compiles pattern (ECMA-262 syntax, the subset Go's
// regexp/syntax reads the same way) into a DFA; path names it in errors.
func compilePattern(pattern, path string) (*dfa, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil, &SchemaError{Path: path, Msg: fmt.Sprintf("not a supported regular expression: %v", err)}
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return nil, &SchemaError{Path: path, Msg: fmt.Sprintf("not a supported regular expression: %v", err)}
	}
	for _, in := range prog.Inst {
		if in.Op == syntax.InstEmptyWidth && syntax.EmptyOp(in.Arg)&(syntax.EmptyWordBoundary|syntax.EmptyNoWordBoundary) != 0 {
			return nil, &SchemaError{Path: path, Msg: "word boundaries (\\b, \\B) are not supported"}
		}
	}
	d := &dfa{}
	var sets [][]int // the NFA threads of each DFA state
	index := map[string]int{}
	add := func(threads []int) (int, error) {
		k := fmt.Sprint(threads)
		if i, ok := index[k]; ok {
			return i, nil
		}
		if len(sets) >= maxDFA {
			return 0, &SchemaError{Path: path, Msg: fmt.Sprintf("needs more than %d automaton states", maxDFA)}
		}
		index[k] = len(sets)
		sets = append(sets, threads)
		var row [128]int16
		for i := range row {
			row[i] = -1
		}
		d.next = append(d.next, row)
		d.accept = append(d.accept, endsMatch(prog, threads))
		return len(sets) - 1, nil
	}
	if _, err := add(closure(prog, []int{prog.Start}, true)); err != nil {
		return nil, err
	}
	for s := 0; s < len(sets); s++ {
		for b := range 128 {
			if !allowedByte(byte(b)) {
				continue
			}
			var next []int
			for _, pc := range sets[s] {
				if in := &prog.Inst[pc]; consumes(in, rune(b)) {
					next = append(next, int(in.Out))
				}
			}
			if next == nil {
				continue
			}
			t, err := add(closure(prog, next, false))
			if err != nil {
				return nil, err
			}
			d.next[s][b] = int16(t)
		}
	}
	return d.prune(path)
}

// prune drops the transitions into states from which the string cannot
// end, refusing a pattern that cannot end at all.
func (d *dfa) prune(path string) (*dfa, error) {
	live := slices.Clone(d.accept)
	for changed := true; changed; {
		changed = false
		for s := range d.next {
			for _, t := range d.next[s] {
				if t >= 0 && live[t] && !live[s] {
					live[s], changed = true, true
				}
			}
		}
	}
	if !live[0] {
		return nil, &SchemaError{Path: path, Msg: "matches no string of printable ASCII characters without escapes, which is what patterned strings are limited to"}
	}
	for s := range d.next {
		for b, t := range d.next[s] {
			if t >= 0 && !live[t] {
				d.next[s][b] = -1
			}
		}
	}
	return d, nil
}

// consumes reports whether instruction in reads r.
func consumes(in *syntax.Inst, r rune) bool {
	switch in.Op {
	case syntax.InstRune, syntax.InstRune1:
		return in.MatchRune(r)
	case syntax.InstRuneAny:
		return true
	case syntax.InstRuneAnyNotNL:
		return r != '\n'
	}
	return false
}

// closure returns the threads pcs lead to without reading: the sorted
// consuming instructions and matches; start says whether no byte was read
// yet (where ^ holds).
func closure(prog *syntax.Prog, pcs []int, start bool) []int {
	seen := map[int]bool{}
	var out []int
	var visit func(pc int)
	visit = func(pc int) {
		if seen[pc] {
			return
		}
		seen[pc] = true
		in := prog.Inst[pc]
		switch in.Op {
		case syntax.InstAlt, syntax.InstAltMatch:
			visit(int(in.Out))
			visit(int(in.Arg))
		case syntax.InstCapture, syntax.InstNop:
			visit(int(in.Out))
		case syntax.InstEmptyWidth:
			op := syntax.EmptyOp(in.Arg)
			if op&(syntax.EmptyBeginText|syntax.EmptyBeginLine) != 0 && !start {
				return
			}
			if op&(syntax.EmptyEndText|syntax.EmptyEndLine) != 0 {
				out = append(out, pc) // holds only at the end: see matches
				return
			}
			visit(int(in.Out))
		case syntax.InstFail:
		default: // runes and matches
			out = append(out, pc)
		}
	}
	for _, pc := range pcs {
		visit(pc)
	}
	slices.Sort(out)
	return out
}

// endsMatch reports whether the threads reach a match at the end of the
// string (where $ holds).
func endsMatch(prog *syntax.Prog, threads []int) bool {
	seen := map[int]bool{}
	var ok func(pc int) bool
	ok = func(pc int) bool {
		if seen[pc] {
			return false
		}
		seen[pc] = true
		in := prog.Inst[pc]
		switch in.Op {
		case syntax.InstMatch:
			return true
		case syntax.InstAlt, syntax.InstAltMatch:
			return ok(int(in.Out)) || ok(int(in.Arg))
		case syntax.InstCapture, syntax.InstNop:
			return ok(int(in.Out))
		case syntax.InstEmptyWidth:
			if syntax.EmptyOp(in.Arg)&(syntax.EmptyBeginText|syntax.EmptyBeginLine) != 0 {
				return false
			}
			return ok(int(in.Out))
		}
		return false
	}
	return slices.ContainsFunc(threads, ok)
}

// stringPattern reads a string schema's pattern and format into n.
func stringPattern(n *node, s map[string]any, path string) error {
	var src, at string
	if p, ok := s["pattern"]; ok {
		ps, ok := p.(string)
		if !ok {
			return &SchemaError{Path: path + "/pattern", Msg: "must be a string"}
		}
		src, at = ps, path+"/pattern"
	}
	if f, ok := s["format"]; ok {
		fs, _ := f.(string)
		re, ok := formats[fs]
		if !ok {
			names := make([]string, 0, len(formats))
			for k := range formats {
				names = append(names, k)
			}
			slices.Sort(names)
			return &SchemaError{Path: path + "/format", Msg: fmt.Sprintf("the format %v is not supported (supported: %s)", f, strings.Join(names, ", "))}
		}
		if src == "" {
			src, at = re, path+"/format"
		} else { // both: the strings that match the two
			if err := noLength(s, path); err != nil {
				return err
			}
			f, err := compilePattern(re, path+"/format")
			if err != nil {
				return err
			}
			p, err := compilePattern(src, at)
			if err != nil {
				return err
			}
			n.pattern, err = intersect(p, f, path)
			return err
		}
	}
	if at == "" {
		return nil
	}
	if err := noLength(s, path); err != nil {
		return err
	}
	d, err := compilePattern(src, at)
	if err != nil {
		return err
	}
	n.pattern = d
	return nil
}

// intersect is the automaton of the strings both a and b accept.
func intersect(a, b *dfa, path string) (*dfa, error) {
	d := &dfa{}
	index := map[[2]int16]int16{}
	pairs := [][2]int16{{0, 0}}
	index[pairs[0]] = 0
	for i := 0; i < len(pairs); i++ {
		p := pairs[i]
		var row [128]int16
		for c := range row {
			row[c] = -1
			x, y := a.next[p[0]][c], b.next[p[1]][c]
			if x < 0 || y < 0 {
				continue
			}
			q := [2]int16{x, y}
			j, ok := index[q]
			if !ok {
				if len(pairs) >= maxDFA {
					return nil, &SchemaError{Path: path + "/pattern", Msg: fmt.Sprintf("pattern and format together need more than %d automaton states", maxDFA)}
				}
				j = int16(len(pairs))
				index[q] = j
				pairs = append(pairs, q)
			}
			row[c] = j
		}
		d.next = append(d.next, row)
		d.accept = append(d.accept, a.accept[p[0]] && b.accept[p[1]])
	}
	return d.prune(path + "/pattern")
}

// noLength refuses minLength and maxLength beside a pattern or format.
func noLength(s map[string]any, path string) error {
	if _, ok := s["minLength"]; ok {
		return &SchemaError{Path: path + "/minLength", Msg: "minLength beside pattern or format is not supported"}
	}
	if _, ok := s["maxLength"]; ok {
		return &SchemaError{Path: path + "/maxLength", Msg: "maxLength beside pattern or format is not supported"}
	}
	return nil
}
