package chattemplate

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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
