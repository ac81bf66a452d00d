package chattemplate

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

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
