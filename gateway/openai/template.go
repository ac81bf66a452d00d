package openai

import (
	"fmt"
	"strings"
	"text/template"
)

// DefaultTemplate renders each message as "<role>: <content>" on its own
// line and ends with "assistant:", the generation prompt:
//
//	system: You are terse.
//	user: Hello
//	assistant:
const DefaultTemplate = `{{range .Messages}}{{.Role}}: {{.Content}}
{{end}}assistant:`

// RawTemplate concatenates the message contents, for completion-style
// models (a story model continues the user's text).
const RawTemplate = `{{range .Messages}}{{.Content}}{{end}}`

// Template turns chat messages into a model prompt. Its source is a Go
// text/template executed with {Messages []ChatMessage}, each message having
// .Role, .Content and .Name. A Template is safe for concurrent use.
type Template struct {
	t *template.Template
	// direct, set for DefaultTemplate and RawTemplate, has Render render
	// what t renders without text/template's reflection: the template of
	// every chat request that has no template of its own.
	direct string
}

// ParseTemplate compiles src; name is used in error messages.
func ParseTemplate(name, src string) (*Template, error) {
	t, err := template.New(name).Option("missingkey=error").Parse(src)
	if err != nil {
		return nil, fmt.Errorf("chat template %s: %w", name, err)
	}
	tp := &Template{t: t}
	if src == DefaultTemplate || src == RawTemplate {
		tp.direct = src
	}
	return tp, nil
}

// MustParseTemplate is ParseTemplate that panics, for wiring at startup.
func MustParseTemplate(name, src string) *Template {
	t, err := ParseTemplate(name, src)
	if err != nil {
		panic(err)
	}
	return t
}

// Render returns the prompt for messages.
func (t *Template) Render(messages []ChatMessage) (string, error) {
	var b strings.Builder
	switch t.direct {
	case DefaultTemplate:
		n := len("assistant:")
		for _, m := range messages {
			n += len(m.Role) + len(": \n") + len(m.Content)
		}
		b.Grow(n)
		for _, m := range messages {
			b.WriteString(m.Role)
			b.WriteString(": ")
			b.WriteString(m.Content)
			b.WriteByte('\n')
		}
		b.WriteString("assistant:")
		return b.String(), nil
	case RawTemplate:
		if len(messages) == 1 {
			return messages[0].Content, nil
		}
		for _, m := range messages {
			b.WriteString(m.Content)
		}
		return b.String(), nil
	}
	if err := t.t.Execute(&b, struct{ Messages []ChatMessage }{messages}); err != nil {
		return "", fmt.Errorf("chat template %s: %w", t.t.Name(), err)
	}
	return b.String(), nil
}
