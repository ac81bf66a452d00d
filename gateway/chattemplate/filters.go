package chattemplate

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

func applyFilter(f *filter, s *scope) (any, error) {
	v, err := eval(f.arg, s)
	if err != nil {
		return nil, err
	}
	args, kwargs, err := evalArgs(f.args, f.kwargs, s)
	if err != nil {
		return nil, err
	}
	switch f.n {
	case "trim":
		if str, ok := v.(string); ok {
			return strings.TrimFunc(str, unicode.IsSpace), nil
		}
	case "length", "count":
		switch x := v.(type) {
		case string:
			return int64(len([]rune(x))), nil
		case []any:
			return int64(len(x)), nil
		case *Dict:
			return int64(len(x.keys)), nil
		}
	case "tojson":
		indent := ""
		if n, ok := kwargs["indent"].(int64); ok && n > 0 {
			indent = strings.Repeat(" ", int(n))
		} else if n, ok := first(args).(int64); ok && n > 0 {
			indent = strings.Repeat(" ", int(n))
		}
		return toJSON(v, indent, 0, true), nil
	case "string":
		return str(v), nil
	case "upper", "lower", "title", "capitalize":
		if x, ok := v.(string); ok {
			return stringMethod(x, f.n)(nil, nil)
		}
	case "replace":
		if x, ok := v.(string); ok {
			return stringMethod(x, "replace")(args, nil)
		}
	case "default", "d":
		if _, undef := v.(undefined); undef || len(args) > 1 && args[1] == true && !truthy(v) {
			if len(args) > 0 {
				return args[0], nil
			}
			return "", nil
		}
		return v, nil
	case "first", "last":
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return undefined{}, nil
		}
		if f.n == "first" {
			return items[0], nil
		}
		return items[len(items)-1], nil
	case "join":
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		sep, _ := first(args).(string)
		parts := make([]string, len(items))
		for i, it := range items {
			parts[i] = str(it)
		}
		return strings.Join(parts, sep), nil
	case "list":
		return iterate(v)
	case "reverse":
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		out := make([]any, len(items))
		for i, it := range items {
			out[len(items)-1-i] = it
		}
		if x, ok := v.(string); ok {
			_ = x
			return strings.Join(strs(out), ""), nil
		}
		return out, nil
	case "items":
		if d, ok := v.(*Dict); ok {
			return dictMethod(d, "items")(nil, nil)
		}
	case "int":
		switch x := v.(type) {
		case int64:
			return x, nil
		case float64:
			return int64(x), nil
		case string:
			n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
			if err != nil {
				return int64(0), nil
			}
			return n, nil
		}
	case "safe", "e", "escape":
		if f.n == "safe" {
			return v, nil
		}
		return nil, fmt.Errorf("unsupported filter %q", f.n)
	default:
		return nil, fmt.Errorf("unsupported filter %q", f.n)
	}
	return nil, fmt.Errorf("filter %s cannot apply to %s", f.n, typeName(v))
}

func strs(items []any) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = str(it)
	}
	return out
}

func applyTest(t *test, s *scope) (any, error) {
	v, err := eval(t.arg, s)
	if err != nil {
		return nil, err
	}
	args, _, err := evalArgs(t.args, nil, s)
	if err != nil {
		return nil, err
	}
	var ok bool
	switch t.n {
	case "defined":
		_, undef := v.(undefined)
		ok = !undef
	case "undefined":
		_, ok = v.(undefined)
	case "none":
		ok = v == nil
	case "string":
		_, ok = v.(string)
	case "number":
		switch v.(type) {
		case int64, float64:
			ok = true
		}
	case "integer":
		_, ok = v.(int64)
	case "float":
		_, ok = v.(float64)
	case "boolean":
		_, ok = v.(bool)
	case "true":
		ok = v == true
	case "false":
		ok = v == false
	case "mapping":
		_, ok = v.(*Dict)
	case "iterable", "sequence":
		switch v.(type) {
		case string, []any, *Dict:
			ok = true
		}
	case "callable":
		switch v.(type) {
		case builtin, *macro:
			ok = true
		}
	case "odd", "even":
		n, isInt := v.(int64)
		if !isInt {
			return nil, fmt.Errorf("test %s needs an integer, not %s", t.n, typeName(v))
		}
		ok = (n%2 != 0) == (t.n == "odd")
	case "eq", "equalto", "==":
		ok = equal(v, first(args))
	case "ne", "!=":
		ok = !equal(v, first(args))
	case "in":
		in, err := contains(first(args), v)
		if err != nil {
			return nil, err
		}
		ok = in
	default:
		return nil, fmt.Errorf("unsupported test %q", t.n)
	}
	return ok != t.negate, nil
}

// toJSON writes v as Python's json.dumps does in Hugging Face's chat
// templates (ensure_ascii off, keys in order): ", " and ": " between
// items, or with indent, one item a line and "," at line ends.
func toJSON(v any, indent string, depth int, undefinedAsNull bool) string {
	itemSep := ", "
	if indent != "" {
		itemSep = ","
	}
	switch x := v.(type) {
	case undefined:
		if undefinedAsNull {
			return "null"
		}
		return "undefined"
	case nil:
		return "null"
	case bool, int64:
		b, _ := json.Marshal(x)
		return string(b)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(x)
		return strings.TrimSuffix(b.String(), "\n")
	case []any, *Dict:
		pad := "\n" + strings.Repeat(indent, depth)
		childPad := pad + indent
		var parts []string
		open, close := "[", "]"
		if d, ok := x.(*Dict); ok {
			open, close = "{", "}"
			for _, k := range d.keys {
				parts = append(parts, toJSON(k, indent, depth+1, undefinedAsNull)+": "+toJSON(d.m[k], indent, depth+1, undefinedAsNull))
			}
		} else {
			for _, it := range x.([]any) {
				parts = append(parts, toJSON(it, indent, depth+1, undefinedAsNull))
			}
		}
		if indent != "" && len(parts) > 0 {
			return open + childPad + strings.Join(parts, itemSep+childPad) + pad + close
		}
		return open + strings.Join(parts, itemSep) + close
	}
	return "null"
}
