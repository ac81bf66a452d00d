package chattemplate_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/streamgate/streamgate/engine/llama2/tokenizer/hfref"
	"github.com/streamgate/streamgate/gateway/chattemplate"
)

type msg = chattemplate.Message

// conversations are rendered by every template, with and without the
// generation prompt.
var conversations = [][]msg{
	{{"user", "Hello!"}},
	{{"system", "You are a pirate."}, {"user", "Hi"}, {"assistant", "Arr!"}, {"user", "Where is the treasure?"}},
	{{"user", "  spaced content  \n"}, {"assistant", "  reply with spaces  "}, {"user", "\n\nnewlines first"}},
	{{"system", "Be brief."}, {"user", "q1"}, {"assistant", "<think>\nhmm, let me see\n</think>\n\nanswer one"}, {"user", "q2"}},
	{{"user", "Grüße 🤖 你好 <b>bold</b> \"quotes\" 'single' {{ not a tag }}"}, {"assistant", "Ça va? Ω≈ç√"}},
	{{"system", "sys"}, {"user", "first"}, {"assistant", "second"}},
	{{"user", "Write code:\n```go\nfunc main() {}\n```"}, {"assistant", "<think>\nplan\n</think>\n\nDone."}},
}

type templateCase struct {
	name       string
	src        string
	bos, eos   string
	vars       map[string]any
	nonHFNotes string
}

func templates(t *testing.T) []templateCase {
	var cases []templateCase
	for _, name := range []string{"llama3", "llama3_1", "qwen3"} {
		f := hfref.Load(t, name)
		cases = append(cases, templateCase{name: name, src: f.Config.ChatTemplate, bos: f.Config.BOSToken(), eos: f.Config.EOSToken()})
	}
	for _, c := range []struct{ file, bos, eos string }{
		{"qwen2.5.jinja", "", "<|im_end|>"},
		{"smollm2.jinja", "<|im_start|>", "<|im_end|>"},
		{"tinyllama.jinja", "<s>", "</s>"},
		{"llama3.2.jinja", "<|begin_of_text|>", "<|eot_id|>"},
	} {
		src, err := os.ReadFile("testdata/" + c.file)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, templateCase{name: c.file, src: string(src), bos: c.bos, eos: c.eos})
	}
	cases = append(cases,
		templateCase{name: "qwen3 no thinking", src: cases[2].src, eos: cases[2].eos, vars: map[string]any{"enable_thinking": false}},
		templateCase{name: "llama3.2 date", src: cases[6].src, bos: "<|begin_of_text|>", vars: map[string]any{"date_string": "01 Jan 2025"}},
	)
	return cases
}

// TestMatchesHuggingFace renders every conversation with every template,
// with and without the generation prompt, and compares each prompt with
// @huggingface/jinja's.
func TestMatchesHuggingFace(t *testing.T) {
	now := time.Date(2024, 7, 26, 12, 0, 0, 0, time.UTC)
	for _, tc := range templates(t) {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := chattemplate.Parse(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			var contexts []map[string]any
			var inputs []chattemplate.Input
			for _, conv := range conversations {
				for _, gen := range []bool{true, false} {
					in := chattemplate.Input{Messages: conv, BOSToken: tc.bos, EOSToken: tc.eos, AddGenerationPrompt: gen, Vars: tc.vars, Now: now}
					inputs = append(inputs, in)
					var ms []map[string]any
					for _, m := range conv {
						ms = append(ms, map[string]any{"role": m.Role, "content": m.Content})
					}
					ctx := map[string]any{"messages": ms, "bos_token": tc.bos, "eos_token": tc.eos, "add_generation_prompt": gen, "tools": nil}
					if _, ok := tc.vars["date_string"]; !ok {
						ctx["date_string"] = "26 Jul 2024" // @huggingface/jinja's strftime_now reads the clock
					}
					for k, v := range tc.vars {
						ctx[k] = v
					}
					contexts = append(contexts, ctx)
				}
			}
			want := hfref.Render(t, tc.src, contexts)
			for i, in := range inputs {
				if _, ok := tc.vars["date_string"]; !ok {
					in.Vars = map[string]any{"date_string": "26 Jul 2024"}
					for k, v := range tc.vars {
						in.Vars[k] = v
					}
				}
				got, err := tmpl.Render(in)
				if want[i].Error != "" {
					if err == nil {
						t.Errorf("conversation %d: rendered %q, want the error %q", i/2, got, want[i].Error)
					}
					continue
				}
				if err != nil {
					t.Errorf("conversation %d (generation prompt %v): %v", i/2, in.AddGenerationPrompt, err)
					continue
				}
				if got != want[i].Prompt {
					t.Errorf("conversation %d (generation prompt %v):\n got %q\nwant %q", i/2, in.AddGenerationPrompt, got, want[i].Prompt)
				}
			}
		})
	}
}

// TestStrftimeNow checks strftime_now against a fixed clock (the Llama
// 3.2 template's date line).
func TestStrftimeNow(t *testing.T) {
	src, err := os.ReadFile("testdata/llama3.2.jinja")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chattemplate.Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(chattemplate.Input{Messages: []msg{{"user", "hi"}}, Now: time.Date(2025, 3, 9, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "Today Date: 09 Mar 2025\n") {
		t.Errorf("prompt %q lacks the date", got)
	}
}

// TestErrors checks that what the subset lacks, and broken templates, fail
// with an error naming the problem, and that raise_exception is told
// apart.
func TestErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"{% include 'x' %}", "unsupported statement {% include %}"},
		{"{% filter upper %}x{% endfilter %}", "unsupported statement {% filter %}"},
		{"{{ x | wordcount }}", `unsupported filter "wordcount"`},
		{"{{ x is divisibleby(3) }}", `unsupported test "divisibleby"`},
		{"{% if x %}", "missing {% endif %}"},
		{"{{ 'abc }}", "not closed"},
		{"{{ messages[0].content.zfill(3) }}", "zfill is not a function"},
		{"{{ undefined_thing.x }}", "attribute x of an undefined value"},
		{"{% set a, b = 1, 2 %}", "multiple targets"},
		{"{{ 1 + 'a' }}", "unsupported operand types for +: integer and string"},
		{"{{ @ }}", "unexpected character"},
		{"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "calls nest over 64 deep"},
		{"{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", "over 262144 loop iterations"},
	} {
		tmpl, err := chattemplate.Parse(tc.src)
		if err == nil {
			_, err = tmpl.Render(chattemplate.Input{Messages: []msg{{"user", "hi"}}})
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one with %q", tc.src, err, tc.want)
		}
		if chattemplate.IsRaised(err) {
			t.Errorf("%s: %v counts as raised by the template", tc.src, err)
		}
	}
	tmpl, err := chattemplate.Parse("{% if messages[0].role != 'system' %}{{ raise_exception('first message must be system') }}{% endif %}")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(chattemplate.Input{Messages: []msg{{"user", "hi"}}})
	if !chattemplate.IsRaised(err) || err.Error() != "first message must be system" {
		t.Errorf("raise_exception gave %v", err)
	}
}

// TestPythonStrip checks that strip, lstrip and rstrip with an argument
// strip those characters only, as Python (and so transformers) does;
// @huggingface/jinja strips whitespace whatever the argument.
func TestPythonStrip(t *testing.T) {
	tmpl, err := chattemplate.Parse("{{ 'xxhi x'.strip('x') }}|{{ '\\n hi'.lstrip('\\n') }}|{{ 'hi \\n'.rstrip('\\n') }}|{{ ' a '.strip() }}")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(chattemplate.Input{})
	if want := "hi |" + " hi|hi |a"; got != want || err != nil {
		t.Errorf("got %q, %v; want %q", got, err, want)
	}
}

// TestSubset checks parts of the subset the real templates above do not
// reach, against @huggingface/jinja.
func TestSubset(t *testing.T) {
	srcs := []string{
		"{% for m in messages[::-1] %}{{ loop.index }}{{ m.role[:2] }}{{ m.content[-2:] }}|{% endfor %}",
		"{%- macro show(m, sep='; ') -%}{{ m.role | upper }}={{ m.content | length }}{{ sep }}{%- endmacro -%}{% for m in messages %}{{ show(m) }}{% endfor %}{{ show(messages[0], sep='!') }}",
		"{% set ns = namespace(n=0) %}{% for m in messages if m.role == 'user' %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }} {{ (messages | length) // 2 }} {{ 7 % 3 }} {{ 2 ** 3 }}",
		"{{ 'a,b,,c'.split(',') | join('-') }} {{ '  x  '.strip() }}|{{ '\\n\\nhi\\n'.strip('\\n') }} {{ 'hello'.replace('l', 'L') }} {{ 'Hi' ~ 1 ~ 2.5 }}",
		"{{ {'b': 1, 'a': [1, 'x', none, true]} | tojson }}\n{{ {'k': {'n': [1, 2]}} | tojson(indent=2) }}",
		"{% for k, v in {'one': 1, 'two': 2}.items() %}{{ k }}={{ v }}{% if not loop.last %}, {% endif %}{% endfor %}",
		"{% for i in range(3) %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}{% for i in range(5) %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}",
		"{{ 'yes' if add_generation_prompt else 'no' }} {{ 1 if 'x' in 'xyz' }} {{ 2 if 3 not in [1, 2] }} {{ 3 if messages[0].missing is defined }} {{ 4 if none is none }} {{ 5 if 1 < 2 and 2 >= 2.0 }}",
		"  {% if true %}\n    kept\n  {% endif %}\n{# a comment #}\nafter {{- '  trimmed' }}   {#- c -#}   x",
		"{% for m in [] %}x{% else %}empty{% endfor %} {{ messages[0]['content'] | default('d') }} {{ nothing | default('d') }}",
	}
	contexts := make([]map[string]any, len(srcs))
	var want []hfref.Rendered
	for i, src := range srcs {
		contexts[i] = map[string]any{"messages": []map[string]any{{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"}}, "add_generation_prompt": true}
		want = append(want, hfref.Render(t, src, contexts[i:i+1])...)
	}
	for i, src := range srcs {
		tmpl, err := chattemplate.Parse(src)
		if err != nil {
			t.Errorf("%s: %v", src, err)
			continue
		}
		got, err := tmpl.Render(chattemplate.Input{Messages: []msg{{"system", "sys"}, {"user", "hello"}}, AddGenerationPrompt: true})
		if err != nil {
			t.Errorf("%s: %v", src, err)
			continue
		}
		if want[i].Error != "" || got != want[i].Prompt {
			t.Errorf("%s:\n got %q\nwant %q %s", src, got, want[i].Prompt, want[i].Error)
		}
	}
}

// BenchmarkRender renders Qwen2.5's template for a ten-turn conversation.
func BenchmarkRender(b *testing.B) {
	src, err := os.ReadFile("testdata/qwen2.5.jinja")
	if err != nil {
		b.Fatal(err)
	}
	tmpl, err := chattemplate.Parse(string(src))
	if err != nil {
		b.Fatal(err)
	}
	in := chattemplate.Input{EOSToken: "<|im_end|>", AddGenerationPrompt: true}
	for i := range 10 {
		in.Messages = append(in.Messages, msg{"user", strings.Repeat("question ", i+1)}, msg{"assistant", strings.Repeat("answer ", i+1)})
	}
	for b.Loop() {
		if _, err := tmpl.Render(in); err != nil {
			b.Fatal(err)
		}
	}
}
