package chattemplate

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

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
