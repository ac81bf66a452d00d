// Package chattemplate renders chat templates: the Jinja templates that
// Hugging Face tokenizer_config.json files and GGUF metadata
// (tokenizer.chat_template) carry to turn a conversation into a prompt.
//
// It implements the subset of Jinja that real chat templates use (Llama
// 3.x, Qwen 2.5/3, SmolLM2, TinyLlama and the like) with the whitespace
// rules Hugging Face renders them with (trim_blocks, lstrip_blocks):
// text, {{ }}, comments, whitespace control; if/elif/else, for (with
// loop.*, else, an if filter, break and continue), set (also of a
// namespace's attribute), macro; literals, lists, dicts, arithmetic,
// comparisons, and/or/not, in, conditional expressions, subscripts and
// slices (also [::-1]); the filters trim, length, tojson, string, upper,
// lower, title, capitalize, replace, default, first, last, join, list,
// reverse, items, int, safe; the tests defined, undefined, none, string,
// number, integer, float, boolean, true, false, mapping, iterable,
// sequence, callable, odd, even, eq, ne, in; the string methods strip,
// lstrip, rstrip, startswith, endswith, split, replace, upper, lower,
// title, capitalize, and the dict methods items, keys, values, get; the
// globals raise_exception, strftime_now, namespace and range. Anything
// else fails to parse or render with an error that names it.
//
// Start with Parse, then Template.Render.
package chattemplate

import (
	"fmt"
	"time"
)

// Template is a parsed chat template. It is immutable and safe for
// concurrent use.
type Template struct {
	nodes []node
}

// Parse parses a chat template.
func Parse(src string) (*Template, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	p := &parser{toks: toks}
	nodes, _, err := p.body()
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	return &Template{nodes: nodes}, nil
}

// Message is one turn of a conversation.
type Message struct {
	Role    string
	Content string
}

// Input is what a template renders: the conversation and the variables
// Hugging Face passes to chat templates.
type Input struct {
	Messages            []Message
	BOSToken, EOSToken  string
	AddGenerationPrompt bool
	// Vars are further variables (enable_thinking, date_string, ...):
	// strings, bools, int64s, float64s, nil, []any and *Dict values.
	Vars map[string]any
	// Now is the time strftime_now formats; the zero value means the
	// current time.
	Now time.Time
}

// Render renders the template. A template that raises an exception
// (raise_exception) fails with an error for which IsRaised is true.
func (t *Template) Render(in Input) (string, error) {
	msgs := make([]any, len(in.Messages))
	for i, m := range in.Messages {
		msgs[i] = NewDict().Set("role", m.Role).Set("content", m.Content)
	}
	now := in.Now
	if now.IsZero() {
		now = time.Now()
	}
	globals := map[string]any{
		"messages":              msgs,
		"bos_token":             in.BOSToken,
		"eos_token":             in.EOSToken,
		"add_generation_prompt": in.AddGenerationPrompt,
		"tools":                 nil,
		"raise_exception": builtin(func(args []any, _ map[string]any) (any, error) {
			return nil, &errRaised{msg: str(first(args))}
		}),
		"strftime_now": builtin(func(args []any, _ map[string]any) (any, error) {
			f, ok := first(args).(string)
			if !ok {
				return nil, fmt.Errorf("strftime_now() needs a format string")
			}
			return strftime(now, f)
		}),
		"namespace": builtin(func(args []any, kwargs map[string]any) (any, error) {
			d := NewDict()
			d.ns = true
			if len(args) > 0 {
				return nil, fmt.Errorf("unsupported: namespace() with positional arguments")
			}
			for _, k := range sortedKeys(kwargs) {
				d.Set(k, kwargs[k])
			}
			return d, nil
		}),
		"range": builtin(rangeFn),
	}
	for k, v := range in.Vars {
		globals[k] = v
	}
	var r renderer
	s := (&scope{vars: globals, limits: &limits{}}).child()
	if _, err := r.exec(t.nodes, s); err != nil {
		if IsRaised(err) {
			return "", err
		}
		return "", fmt.Errorf("chat template: %w", err)
	}
	return r.out.String(), nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

func rangeFn(args []any, _ map[string]any) (any, error) {
	var n [3]int64
	n[2] = 1
	for i, a := range args {
		v, ok := a.(int64)
		if !ok || i > 2 {
			return nil, fmt.Errorf("range() needs up to three integers")
		}
		n[i] = v
	}
	start, stop, step := n[0], n[1], n[2]
	if len(args) == 1 {
		start, stop = 0, n[0]
	}
	if step == 0 {
		return nil, fmt.Errorf("range() step cannot be zero")
	}
	var out []any
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		out = append(out, i)
		if len(out) > 1<<20 {
			return nil, fmt.Errorf("range() of over %d items", 1<<20)
		}
	}
	return out, nil
}

// strftimeLayouts are the strftime directives chat templates use, as Go
// time layouts.
var strftimeLayouts = map[byte]string{'Y': "2006", 'm': "01", 'd': "02", 'b': "Jan", 'B': "January", 'H': "15", 'M': "04", 'S': "05"}

// strftime formats t with the directives chat templates use.
func strftime(t time.Time, f string) (string, error) {
	var out []byte
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 == len(f) {
			out = append(out, f[i])
			continue
		}
		i++
		switch layout, ok := strftimeLayouts[f[i]]; {
		case ok:
			out = t.AppendFormat(out, layout)
		case f[i] == '%':
			out = append(out, '%')
		default:
			return "", fmt.Errorf("unsupported strftime directive %%%c", f[i])
		}
	}
	return string(out), nil
}
