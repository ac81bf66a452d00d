package chattemplate_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/streamgate/streamgate/gateway/chattemplate"
)

// FuzzTemplate checks that no template source makes Parse or Render
// panic or hang: each either renders or fails with an error.
func FuzzTemplate(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.jinja")
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(src))
	}
	for _, s := range []string{
		"{{ messages[::-1][0].content[1:-1] }}",
		"{%- set ns = namespace(a=1) -%}{{ ns.a ~ (1 if ns else 2) }}",
		"{% for k, v in {'a': [1, {'b': none}]}.items() %}{{ v | tojson(indent=2) }}{% endfor %}",
		"{# c #}{{- 'x' -}}{% macro m(a, b=2) %}{{ a ** b // 3 % 2 }}{% endmacro %}{{ m(3) }}",
	} {
		f.Add(s)
	}
	in := chattemplate.Input{
		Messages:            []chattemplate.Message{{Role: "system", Content: "s"}, {Role: "user", Content: "u"}, {Role: "assistant", Content: "<think>\nt\n</think>\n\na"}},
		BOSToken:            "<s>",
		EOSToken:            "</s>",
		AddGenerationPrompt: true,
	}
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := chattemplate.Parse(src)
		if err != nil {
			return
		}
		_, _ = tmpl.Render(in)
	})
}
