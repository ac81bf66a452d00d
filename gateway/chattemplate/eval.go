package chattemplate

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Values: undefined{}, nil (none), bool, int64, float64, string, []any,
// *Dict, *macro and builtin.
type (
	undefined struct{}
	builtin   func(args []any, kwargs map[string]any) (any, error)
	macro     struct {
		n    *macroNode
		defs *scope
	}
)

// Dict is a mapping that keeps its keys' order (as the JSON objects and
// Python dicts that templates see do).
type Dict struct {
	keys []string
	m    map[string]any
	ns   bool // a namespace(): its attributes can be set
}

// NewDict returns an empty Dict.
func NewDict() *Dict { return &Dict{m: map[string]any{}} }

// Set sets key to v, appending key when new.
func (d *Dict) Set(key string, v any) *Dict {
	if _, ok := d.m[key]; !ok {
		d.keys = append(d.keys, key)
	}
	d.m[key] = v
	return d
}

// Get returns key's value.
func (d *Dict) Get(key string) (any, bool) {
	v, ok := d.m[key]
	return v, ok
}

// errRaised is an error the template raised itself (raise_exception).
type errRaised struct{ msg string }

func (e *errRaised) Error() string { return e.msg }

// IsRaised reports whether err was raised by the template itself with
// raise_exception (a refusal of its input, not a template bug).
func IsRaised(err error) bool {
	var r *errRaised
	return errors.As(err, &r)
}

type scope struct {
	vars   map[string]any
	parent *scope
	limits *limits // one per render
}

// child returns a new scope inside s.
func (s *scope) child() *scope { return &scope{vars: map[string]any{}, parent: s, limits: s.limits} }

// limits bound one render's work, so a runaway template fails instead of
// hanging or crashing the process.
type limits struct {
	steps int // loop iterations and macro calls so far
	depth int // macro calls in progress
}

const (
	maxSteps = 1 << 18
	maxDepth = 64
)

// loopInfo is a for loop's "loop" variable.
type loopInfo struct {
	items []any
	i     int
}

func (l *loopInfo) attr(n string) any {
	i, n64 := l.i, int64(len(l.items))
	switch n {
	case "index0":
		return int64(i)
	case "index":
		return int64(i + 1)
	case "first":
		return i == 0
	case "last":
		return i == len(l.items)-1
	case "length":
		return n64
	case "revindex":
		return n64 - int64(i)
	case "revindex0":
		return n64 - int64(i) - 1
	case "previtem":
		if i > 0 {
			return l.items[i-1]
		}
	case "nextitem":
		if i+1 < len(l.items) {
			return l.items[i+1]
		}
	}
	return undefined{}
}

func (l *limits) step() error {
	if l.steps++; l.steps > maxSteps {
		return fmt.Errorf("template runs over %d loop iterations and macro calls", maxSteps)
	}
	return nil
}

func (s *scope) lookup(n string) (any, bool) {
	for ; s != nil; s = s.parent {
		if v, ok := s.vars[n]; ok {
			return v, true
		}
	}
	return nil, false
}

type loopSignal int

const (
	sigNone loopSignal = iota
	sigBreak
	sigContinue
)

// maxOutput bounds what one render may write, so a looping template fails
// rather than eats memory.
const maxOutput = 16 << 20

type renderer struct {
	out strings.Builder
}

func (r *renderer) exec(nodes []node, s *scope) (loopSignal, error) {
	for _, n := range nodes {
		if r.out.Len() > maxOutput {
			return sigNone, fmt.Errorf("rendered prompt is over %d bytes", maxOutput)
		}
		switch n := n.(type) {
		case *textNode:
			r.out.WriteString(n.s)
		case *outputNode:
			v, err := eval(n.e, s)
			if err != nil {
				return sigNone, err
			}
			r.out.WriteString(str(v))
		case *ifNode:
			body := n.orElse
			for i, c := range n.conds {
				v, err := eval(c, s)
				if err != nil {
					return sigNone, err
				}
				if truthy(v) {
					body = n.bodies[i]
					break
				}
			}
			if sig, err := r.exec(body, s); sig != sigNone || err != nil {
				return sig, err
			}
		case *forNode:
			if err := r.loop(n, s); err != nil {
				return sigNone, err
			}
		case *setNode:
			v, err := eval(n.value, s)
			if err != nil {
				return sigNone, err
			}
			if n.attr == "" {
				s.vars[n.name] = v
				continue
			}
			obj, _ := s.lookup(n.name)
			d, ok := obj.(*Dict)
			if !ok || !d.ns {
				return sigNone, fmt.Errorf("cannot set attribute %s of %s: it is not a namespace", n.attr, n.name)
			}
			d.Set(n.attr, v)
		case *macroNode:
			s.vars[n.name] = &macro{n: n, defs: s}
		case *loopCtlNode:
			if n.brk {
				return sigBreak, nil
			}
			return sigContinue, nil
		}
	}
	return sigNone, nil
}

func (r *renderer) loop(n *forNode, s *scope) error {
	it, err := eval(n.iter, s)
	if err != nil {
		return err
	}
	items, err := iterate(it)
	if err != nil {
		return err
	}
	bind := func(sc *scope, item any) error {
		if len(n.vars) == 1 {
			sc.vars[n.vars[0]] = item
			return nil
		}
		tuple, ok := item.([]any)
		if !ok || len(tuple) != len(n.vars) {
			return fmt.Errorf("cannot unpack %s into %d loop variables", typeName(item), len(n.vars))
		}
		for i, v := range n.vars {
			sc.vars[v] = tuple[i]
		}
		return nil
	}
	if n.filter != nil {
		var kept []any
		for _, item := range items {
			if err := s.limits.step(); err != nil {
				return err
			}
			sc := s.child()
			if err := bind(sc, item); err != nil {
				return err
			}
			v, err := eval(n.filter, sc)
			if err != nil {
				return err
			}
			if truthy(v) {
				kept = append(kept, item)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		_, err := r.exec(n.orElse, s)
		return err
	}
	for i, item := range items {
		if err := s.limits.step(); err != nil {
			return err
		}
		sc := s.child()
		if err := bind(sc, item); err != nil {
			return err
		}
		sc.vars["loop"] = &loopInfo{items: items, i: i}
		sig, err := r.exec(n.body, sc)
		if err != nil {
			return err
		}
		if sig == sigBreak {
			break
		}
	}
	return nil
}

// iterate returns the items a for loop walks: a list's items, a dict's keys,
// a string's characters.
func iterate(v any) ([]any, error) {
	switch v := v.(type) {
	case []any:
		return v, nil
	case *Dict:
		out := make([]any, len(v.keys))
		for i, k := range v.keys {
			out[i] = k
		}
		return out, nil
	case string:
		var out []any
		for _, r := range v {
			out = append(out, string(r))
		}
		return out, nil
	case undefined, nil:
		return nil, nil
	}
	return nil, fmt.Errorf("cannot iterate over %s", typeName(v))
}

func typeName(v any) string {
	switch v.(type) {
	case undefined:
		return "undefined"
	case nil:
		return "none"
	case bool:
		return "boolean"
	case int64:
		return "integer"
	case float64:
		return "float"
	case string:
		return "string"
	case []any:
		return "list"
	case *Dict:
		return "dict"
	case *macro, builtin:
		return "function"
	case *loopInfo:
		return "loop"
	}
	return fmt.Sprintf("%T", v)
}

func truthy(v any) bool {
	switch v := v.(type) {
	case undefined, nil:
		return false
	case bool:
		return v
	case int64:
		return v != 0
	case float64:
		return v != 0
	case string:
		return v != ""
	case []any:
		return len(v) > 0
	case *Dict:
		return len(v.keys) > 0
	}
	return true
}

// str is how {{ }} prints a value (Python's str()).
func str(v any) string {
	switch v := v.(type) {
	case undefined:
		return ""
	case nil:
		return "None"
	case bool:
		if v {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1e16 {
			return strconv.FormatFloat(v, 'f', 1, 64)
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	case string:
		return v
	case []any, *Dict:
		return toJSON(v, "", 0, false)
	}
	return typeName(v)
}

func eval(e expr, s *scope) (any, error) {
	switch e := e.(type) {
	case *literal:
		return e.v, nil
	case *name:
		if v, ok := s.lookup(e.n); ok {
			return v, nil
		}
		return undefined{}, nil
	case *listExpr:
		out := make([]any, len(e.items))
		for i, it := range e.items {
			v, err := eval(it, s)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case *dictExpr:
		d := NewDict()
		for i := range e.keys {
			k, err := eval(e.keys[i], s)
			if err != nil {
				return nil, err
			}
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("dict keys must be strings, not %s", typeName(k))
			}
			v, err := eval(e.vals[i], s)
			if err != nil {
				return nil, err
			}
			d.Set(ks, v)
		}
		return d, nil
	case *attr:
		obj, err := eval(e.obj, s)
		if err != nil {
			return nil, err
		}
		return member(obj, e.n)
	case *index:
		obj, err := eval(e.obj, s)
		if err != nil {
			return nil, err
		}
		idx, err := eval(e.idx, s)
		if err != nil {
			return nil, err
		}
		return subscript(obj, idx)
	case *slice:
		return evalSlice(e, s)
	case *call:
		return evalCall(e, s)
	case *filter:
		return applyFilter(e, s)
	case *test:
		return applyTest(e, s)
	case *unary:
		x, err := eval(e.x, s)
		if err != nil {
			return nil, err
		}
		switch e.op {
		case "not":
			return !truthy(x), nil
		case "-":
			switch x := x.(type) {
			case int64:
				return -x, nil
			case float64:
				return -x, nil
			}
			return nil, fmt.Errorf("cannot negate %s", typeName(x))
		}
		return x, nil
	case *binary:
		return evalBinary(e, s)
	case *cond:
		t, err := eval(e.test, s)
		if err != nil {
			return nil, err
		}
		if truthy(t) {
			return eval(e.yes, s)
		}
		return eval(e.no, s)
	}
	return nil, fmt.Errorf("unknown expression %T", e)
}

// member is obj.n: a dict's key, or a method of a string, list or dict.
func member(obj any, n string) (any, error) {
	switch o := obj.(type) {
	case *Dict:
		if v, ok := o.m[n]; ok {
			return v, nil
		}
		if !o.ns {
			if m := dictMethod(o, n); m != nil {
				return m, nil
			}
		}
		return undefined{}, nil
	case string:
		if m := stringMethod(o, n); m != nil {
			return m, nil
		}
		return undefined{}, nil
	case *loopInfo:
		return o.attr(n), nil
	case []any:
		return undefined{}, nil
	case undefined:
		return nil, fmt.Errorf("cannot read attribute %s of an undefined value", n)
	case nil:
		return nil, fmt.Errorf("cannot read attribute %s of none", n)
	}
	return undefined{}, nil
}

func subscript(obj, idx any) (any, error) {
	switch o := obj.(type) {
	case *Dict, *loopInfo:
		k, ok := idx.(string)
		if !ok {
			return undefined{}, nil
		}
		return member(o, k)
	case []any:
		i, ok := idx.(int64)
		if !ok {
			return nil, fmt.Errorf("list indices must be integers, not %s", typeName(idx))
		}
		if i < 0 {
			i += int64(len(o))
		}
		if i < 0 || i >= int64(len(o)) {
			return undefined{}, nil
		}
		return o[i], nil
	case string:
		i, ok := idx.(int64)
		if !ok {
			return nil, fmt.Errorf("string indices must be integers, not %s", typeName(idx))
		}
		rs := []rune(o)
		if i < 0 {
			i += int64(len(rs))
		}
		if i < 0 || i >= int64(len(rs)) {
			return undefined{}, nil
		}
		return string(rs[i]), nil
	case undefined:
		return nil, fmt.Errorf("cannot index an undefined value")
	case nil:
		return nil, fmt.Errorf("cannot index none")
	}
	return nil, fmt.Errorf("cannot index %s", typeName(obj))
}

func evalSlice(e *slice, s *scope) (any, error) {
	obj, err := eval(e.obj, s)
	if err != nil {
		return nil, err
	}
	var bounds [3]*int64
	for i, b := range []expr{e.start, e.end, e.step} {
		if b == nil {
			continue
		}
		v, err := eval(b, s)
		if err != nil {
			return nil, err
		}
		if v == nil {
			continue
		}
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("slice bounds must be integers, not %s", typeName(v))
		}
		bounds[i] = &n
	}
	var items []any
	var rs []rune
	switch o := obj.(type) {
	case []any:
		items = o
	case string:
		rs = []rune(o)
		items = make([]any, len(rs))
		for i, r := range rs {
			items[i] = r
		}
	default:
		return nil, fmt.Errorf("cannot slice %s", typeName(obj))
	}
	idx, err := sliceIndices(len(items), bounds)
	if err != nil {
		return nil, err
	}
	if rs != nil {
		out := make([]rune, len(idx))
		for i, j := range idx {
			out[i] = rs[j]
		}
		return string(out), nil
	}
	out := make([]any, len(idx))
	for i, j := range idx {
		out[i] = items[j]
	}
	return out, nil
}

// sliceIndices is Python's slice.indices, as a list of the indices picked.
func sliceIndices(n int, b [3]*int64) ([]int, error) {
	step := 1
	if b[2] != nil {
		step = int(*b[2])
	}
	if step == 0 {
		return nil, fmt.Errorf("slice step cannot be zero")
	}
	clamp := func(p *int64, def, lo, hi int) int {
		if p == nil {
			return def
		}
		v := int(*p)
		if v < 0 {
			v += n
		}
		return min(max(v, lo), hi)
	}
	var out []int
	if step > 0 {
		start, end := clamp(b[0], 0, 0, n), clamp(b[1], n, 0, n)
		for i := start; i < end; i += step {
			out = append(out, i)
		}
	} else {
		start, end := clamp(b[0], n-1, -1, n-1), clamp(b[1], -1, -1, n-1)
		if b[1] != nil && *b[1] < 0 && int(*b[1])+n < 0 {
			end = -1
		}
		for i := start; i > end; i += step {
			out = append(out, i)
		}
	}
	return out, nil
}

func evalArgs(args []expr, kwargs map[string]expr, s *scope) ([]any, map[string]any, error) {
	vals := make([]any, len(args))
	for i, a := range args {
		v, err := eval(a, s)
		if err != nil {
			return nil, nil, err
		}
		vals[i] = v
	}
	var kw map[string]any
	for k, a := range kwargs {
		v, err := eval(a, s)
		if err != nil {
			return nil, nil, err
		}
		if kw == nil {
			kw = map[string]any{}
		}
		kw[k] = v
	}
	return vals, kw, nil
}

func evalCall(e *call, s *scope) (any, error) {
	fn, err := eval(e.fn, s)
	if err != nil {
		return nil, err
	}
	args, kwargs, err := evalArgs(e.args, e.kwargs, s)
	if err != nil {
		return nil, err
	}
	switch f := fn.(type) {
	case builtin:
		return f(args, kwargs)
	case *macro:
		if err := s.limits.step(); err != nil {
			return nil, err
		}
		if s.limits.depth >= maxDepth {
			return nil, fmt.Errorf("macro %s: calls nest over %d deep", f.n.name, maxDepth)
		}
		s.limits.depth++
		defer func() { s.limits.depth-- }()
		sc := &scope{vars: map[string]any{}, parent: f.defs, limits: s.limits}
		for i, prm := range f.n.params {
			switch {
			case i < len(args):
				sc.vars[prm] = args[i]
			case kwargs[prm] != nil:
				sc.vars[prm] = kwargs[prm]
			case f.n.defaults[i] != nil:
				v, err := eval(f.n.defaults[i], f.defs)
				if err != nil {
					return nil, err
				}
				sc.vars[prm] = v
			default:
				sc.vars[prm] = undefined{}
			}
		}
		var r renderer
		if _, err := r.exec(f.n.body, sc); err != nil {
			return nil, err
		}
		return r.out.String(), nil
	}
	what := "value"
	switch c := e.fn.(type) {
	case *name:
		what = c.n
	case *attr:
		what = c.n
	}
	return nil, fmt.Errorf("unsupported: %s is not a function (%s)", what, typeName(fn))
}

func evalBinary(e *binary, s *scope) (any, error) {
	l, err := eval(e.l, s)
	if err != nil {
		return nil, err
	}
	switch e.op { // short-circuit, returning an operand as Python does
	case "and":
		if !truthy(l) {
			return l, nil
		}
		return eval(e.r, s)
	case "or":
		if truthy(l) {
			return l, nil
		}
		return eval(e.r, s)
	}
	r, err := eval(e.r, s)
	if err != nil {
		return nil, err
	}
	switch e.op {
	case "~":
		return str(l) + str(r), nil
	case "==":
		return equal(l, r), nil
	case "!=":
		return !equal(l, r), nil
	case "in", "not in":
		in, err := contains(r, l)
		if err != nil {
			return nil, err
		}
		return in == (e.op == "in"), nil
	case "+":
		switch a := l.(type) {
		case string:
			if b, ok := r.(string); ok {
				return a + b, nil
			}
		case []any:
			if b, ok := r.([]any); ok {
				return append(slices.Clip(a), b...), nil
			}
		}
	}
	if ls, ok := l.(string); ok {
		if rs, ok := r.(string); ok {
			switch e.op {
			case "<":
				return ls < rs, nil
			case ">":
				return ls > rs, nil
			case "<=":
				return ls <= rs, nil
			case ">=":
				return ls >= rs, nil
			}
		}
	}
	return arith(e.op, l, r)
}

func number(v any) (float64, bool, bool) {
	switch v := v.(type) {
	case int64:
		return float64(v), true, true
	case float64:
		return v, false, true
	case bool:
		if v {
			return 1, true, true
		}
		return 0, true, true
	}
	return 0, false, false
}

func arith(op string, l, r any) (any, error) {
	a, ai, ok1 := number(l)
	b, bi, ok2 := number(r)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("unsupported operand types for %s: %s and %s", op, typeName(l), typeName(r))
	}
	ints := ai && bi
	switch op {
	case "<":
		return a < b, nil
	case ">":
		return a > b, nil
	case "<=":
		return a <= b, nil
	case ">=":
		return a >= b, nil
	case "/":
		if b == 0 {
			return nil, fmt.Errorf("division by zero")
		}
		return a / b, nil
	case "//", "%":
		if b == 0 {
			return nil, fmt.Errorf("division by zero")
		}
		q := math.Floor(a / b)
		if op == "%" {
			q = a - b*q
		}
		if ints {
			return int64(q), nil
		}
		return q, nil
	}
	var v float64
	switch op {
	case "+":
		v = a + b
	case "-":
		v = a - b
	case "*":
		v = a * b
	case "**":
		v = math.Pow(a, b)
		if ints && b < 0 {
			return v, nil
		}
	default:
		return nil, fmt.Errorf("unsupported operator %s", op)
	}
	if ints {
		return int64(v), nil
	}
	return v, nil
}

func equal(a, b any) bool {
	if x, _, ok := number(a); ok {
		if _, isBool := a.(bool); !isBool {
			if y, _, ok := number(b); ok {
				if _, isBool := b.(bool); !isBool {
					return x == y
				}
			}
		}
	}
	switch x := a.(type) {
	case []any:
		y, ok := b.([]any)
		return ok && slices.EqualFunc(x, y, equal)
	case *Dict:
		y, ok := b.(*Dict)
		if !ok || len(x.keys) != len(y.keys) {
			return false
		}
		for k, v := range x.m {
			if w, ok := y.m[k]; !ok || !equal(v, w) {
				return false
			}
		}
		return true
	case *macro, builtin:
		return false
	}
	return a == b
}

// contains is "needle in hay".
func contains(hay, needle any) (bool, error) {
	switch h := hay.(type) {
	case string:
		n, ok := needle.(string)
		if !ok {
			return false, fmt.Errorf("'in <string>' needs a string, not %s", typeName(needle))
		}
		return strings.Contains(h, n), nil
	case []any:
		return slices.ContainsFunc(h, func(v any) bool { return equal(v, needle) }), nil
	case *Dict:
		n, ok := needle.(string)
		if !ok {
			return false, nil
		}
		_, in := h.m[n]
		return in, nil
	case undefined, nil:
		return false, nil
	}
	return false, fmt.Errorf("cannot test membership in %s", typeName(hay))
}

func stringArg(args []any, i int, fn string) (string, bool, error) {
	if i >= len(args) || args[i] == nil {
		return "", false, nil
	}
	s, ok := args[i].(string)
	if !ok {
		return "", false, fmt.Errorf("%s: argument %d must be a string, not %s", fn, i+1, typeName(args[i]))
	}
	return s, true, nil
}

// stringMethod returns the Python str method n bound to s.
func stringMethod(s, n string) builtin {
	strip := func(trim func(string, string) string, trimSpace func(string, func(rune) bool) string) builtin {
		return func(args []any, _ map[string]any) (any, error) {
			chars, ok, err := stringArg(args, 0, n)
			if err != nil {
				return nil, err
			}
			if !ok {
				return trimSpace(s, unicode.IsSpace), nil
			}
			return trim(s, chars), nil
		}
	}
	switch n {
	case "strip":
		return strip(strings.Trim, strings.TrimFunc)
	case "lstrip":
		return strip(strings.TrimLeft, strings.TrimLeftFunc)
	case "rstrip":
		return strip(strings.TrimRight, strings.TrimRightFunc)
	case "startswith", "endswith":
		return func(args []any, _ map[string]any) (any, error) {
			has := strings.HasPrefix
			if n == "endswith" {
				has = strings.HasSuffix
			}
			var pats []any
			switch a := first(args).(type) {
			case string:
				pats = []any{a}
			case []any:
				pats = a
			default:
				return nil, fmt.Errorf("%s() needs a string or a tuple of strings", n)
			}
			for _, p := range pats {
				ps, ok := p.(string)
				if !ok {
					return nil, fmt.Errorf("%s() needs strings", n)
				}
				if has(s, ps) {
					return true, nil
				}
			}
			return false, nil
		}
	case "split":
		return func(args []any, kwargs map[string]any) (any, error) {
			sep, ok, err := stringArg(args, 0, n)
			if err != nil {
				return nil, err
			}
			limit := -1
			if len(args) > 1 {
				m, ok := args[1].(int64)
				if !ok {
					return nil, fmt.Errorf("split(): maxsplit must be an integer")
				}
				if m >= 0 {
					limit = int(m) + 1
				}
			}
			var parts []string
			switch {
			case !ok:
				parts = strings.Fields(s)
				if limit > 0 && len(parts) > limit {
					return nil, fmt.Errorf("unsupported: split() on whitespace with maxsplit")
				}
			case sep == "":
				return nil, fmt.Errorf("split(): empty separator")
			default:
				parts = strings.SplitN(s, sep, limit)
			}
			out := make([]any, len(parts))
			for i, p := range parts {
				out[i] = p
			}
			return out, nil
		}
	case "replace":
		return func(args []any, _ map[string]any) (any, error) {
			old, ok1, err1 := stringArg(args, 0, n)
			repl, ok2, err2 := stringArg(args, 1, n)
			if err := errors.Join(err1, err2); err != nil {
				return nil, err
			}
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("replace() needs two strings")
			}
			count := -1
			if len(args) > 2 {
				c, ok := args[2].(int64)
				if !ok {
					return nil, fmt.Errorf("replace(): count must be an integer")
				}
				count = int(c)
			}
			return strings.Replace(s, old, repl, count), nil
		}
	case "upper":
		return func([]any, map[string]any) (any, error) { return strings.ToUpper(s), nil }
	case "lower":
		return func([]any, map[string]any) (any, error) { return strings.ToLower(s), nil }
	case "title":
		return func([]any, map[string]any) (any, error) { return title(s), nil }
	case "capitalize":
		return func([]any, map[string]any) (any, error) { return capitalize(s), nil }
	}
	return nil
}

func first(args []any) any {
	if len(args) == 0 {
		return undefined{}
	}
	return args[0]
}

func title(s string) string {
	var b strings.Builder
	prevLetter := false
	for _, r := range s {
		if unicode.IsLetter(r) {
			if prevLetter {
				r = unicode.ToLower(r)
			} else {
				r = unicode.ToUpper(r)
			}
		}
		prevLetter = unicode.IsLetter(r) || unicode.IsDigit(r)
		b.WriteRune(r)
	}
	return b.String()
}

func capitalize(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	if n == 0 {
		return s
	}
	return string(unicode.ToUpper(r)) + strings.ToLower(s[n:])
}

// dictMethod returns the dict method n bound to d.
func dictMethod(d *Dict, n string) builtin {
	switch n {
	case "items":
		return func([]any, map[string]any) (any, error) {
			out := make([]any, len(d.keys))
			for i, k := range d.keys {
				out[i] = []any{k, d.m[k]}
			}
			return out, nil
		}
	case "keys":
		return func([]any, map[string]any) (any, error) { return iterate(d) }
	case "values":
		return func([]any, map[string]any) (any, error) {
			out := make([]any, len(d.keys))
			for i, k := range d.keys {
				out[i] = d.m[k]
			}
			return out, nil
		}
	case "get":
		return func(args []any, _ map[string]any) (any, error) {
			k, _ := first(args).(string)
			if v, ok := d.m[k]; ok {
				return v, nil
			}
			if len(args) > 1 {
				return args[1], nil
			}
			return nil, nil
		}
	}
	return nil
}
