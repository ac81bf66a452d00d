package openai

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// ToolFormat is how a model family writes tool calls in its output.
type ToolFormat string

// The tool-call formats ToolParser reads.
const (
	// ToolFormatHermes is Hermes' and Qwen's: each call a JSON object
	// {"name", "arguments"} between <tool_call> and </tool_call>, text
	// around them.
	ToolFormatHermes ToolFormat = "hermes"
	// ToolFormatLlama3 is Llama 3.1+'s: the whole answer is a JSON object
	// {"name", "parameters"} (or several, separated by ';'), optionally
	// after <|python_tag|>.
	ToolFormatLlama3 ToolFormat = "llama3"
	// ToolFormatMistral is Mistral's: the answer starts with [TOOL_CALLS],
	// then a JSON array of {"name", "arguments"} (v3 tokenizers) or, per
	// call, name[ARGS]{...} (v11 on; [TOOL_CALLS] before each call, and
	// [CALL_ID]id before [ARGS] in some).
	ToolFormatMistral ToolFormat = "mistral"
)

// ParseToolFormat reads a per-model tool_parser option.
func ParseToolFormat(s string) (ToolFormat, bool) {
	switch f := ToolFormat(s); f {
	case ToolFormatHermes, ToolFormatLlama3, ToolFormatMistral:
		return f, true
	}
	return "", false
}

// TemplateToolFormat guesses the format from a chat template's source:
// one that mentions <tool_call> is Hermes', one that mentions
// "parameters" with tools (Llama 3.1+'s) is Llama 3's, one that mentions
// [TOOL_CALLS] Mistral's; otherwise Hermes'.
func TemplateToolFormat(src string) ToolFormat {
	if strings.Contains(src, mistralTag) {
		return ToolFormatMistral
	}
	if strings.Contains(src, "<tool_call>") {
		return ToolFormatHermes
	}
	if strings.Contains(src, "python_tag") || strings.Contains(src, `"parameters"`) {
		return ToolFormatLlama3
	}
	return ToolFormatHermes
}

const (
	hermesOpen  = "<tool_call>"
	hermesClose = "</tool_call>"
	pythonTag   = "<|python_tag|>"
	mistralTag  = "[TOOL_CALLS]"
	mistralArgs = "[ARGS]"
	mistralID   = "[CALL_ID]"
)

// ToolParser splits a model's streamed output into content and tool
// calls. Feed it each piece of text; it returns the content that is safe
// to show (never part of a tool call, whole or half) and the calls
// completed so far. Finish returns what remains. A call that does not
// parse, or names no declared tool, is given back as content.
type ToolParser struct {
	Format ToolFormat
	// Tools are the names of the declared functions.
	Tools []string
	// IDPrefix prefixes the calls' ids: IDPrefix + index.
	IDPrefix string
	// Single keeps only the first call (parallel_tool_calls false).
	Single bool
	// Live keeps, in ToolFormatGuided, the pieces of each call as they
	// arrive for Deltas (for a caller that streams them).
	Live bool

	buf     []byte // text held back: a possible call, or trailing space
	inCall  bool   // Hermes: buf holds a call after <tool_call>
	decided bool   // Llama 3: whether the answer is a call is known
	whole   bool   // Llama 3: the answer is a call, buf holds it
	calls   int
	g       guided // ToolFormatGuided's scanner
}

// Feed takes the next piece of output.
func (p *ToolParser) Feed(text []byte) (content []byte, calls []ToolCall) {
	if p.Format == ToolFormatGuided {
		return nil, p.feedGuided(text)
	}
	p.buf = append(p.buf, text...)
	switch p.Format {
	case ToolFormatLlama3:
		return p.feedWhole('{', pythonTag)
	case ToolFormatMistral:
		return p.feedWhole(0, mistralTag)
	}
	for {
		if !p.inCall {
			i := bytes.Index(p.buf, []byte(hermesOpen))
			if i < 0 {
				keep := partialSuffix(p.buf, hermesOpen)
				content = append(content, p.buf[:len(p.buf)-keep]...)
				p.buf = append(p.buf[:0], p.buf[len(p.buf)-keep:]...)
				return p.holdSpace(content), calls
			}
			content = append(content, bytes.TrimRight(p.buf[:i], " \t\r\n")...)
			p.buf = append(p.buf[:0], p.buf[i+len(hermesOpen):]...)
			p.inCall = true
		}
		j := bytes.Index(p.buf, []byte(hermesClose))
		if j < 0 {
			return p.holdSpace(content), calls
		}
		body := p.buf[:j]
		if c, ok := p.call(body, "arguments"); ok {
			calls = p.keep(calls, c)
		} else {
			content = append(append(append(content, hermesOpen...), body...), hermesClose...)
		}
		p.buf = append(p.buf[:0], p.buf[j+len(hermesClose):]...)
		p.inCall = false
	}
}

// holdSpace moves content's trailing white space back into the buffer's
// front: white space between calls is not content.
func (p *ToolParser) holdSpace(content []byte) []byte {
	if p.inCall {
		return bytes.TrimRight(content, " \t\r\n")
	}
	trimmed := bytes.TrimRight(content, " \t\r\n")
	if len(trimmed) < len(content) {
		p.buf = append(append([]byte{}, content[len(trimmed):]...), p.buf...)
	}
	return trimmed
}

// feedWhole reads a format whose answer is either all calls or all
// content, decided by its start: the byte first (0: none) or tag.
func (p *ToolParser) feedWhole(first byte, tag string) (content []byte, calls []ToolCall) {
	if !p.decided {
		rest := bytes.TrimLeft(p.buf, " \t\r\n")
		if len(rest) == 0 {
			return nil, nil
		}
		if first != 0 && rest[0] == first || bytes.HasPrefix(rest, []byte(tag)) {
			p.decided, p.whole = true, true
		} else if partialSuffix(rest, tag) == len(rest) {
			return nil, nil // maybe the tag
		} else {
			p.decided = true
		}
	}
	if p.whole {
		return nil, nil
	}
	n := len(bytes.TrimRight(p.buf, " \t\r\n"))
	content = append([]byte{}, p.buf[:n]...)
	p.buf = append(p.buf[:0], p.buf[n:]...)
	return content, nil
}

// Finish returns the content and calls still held back, at the end of
// the output.
func (p *ToolParser) Finish() (content []byte, calls []ToolCall) {
	if p.Format == ToolFormatGuided {
		return p.finishGuided()
	}
	defer func() { p.buf = p.buf[:0] }()
	switch {
	case p.Format == ToolFormatLlama3 && p.whole:
		body := bytes.TrimSpace(p.buf)
		body = bytes.TrimPrefix(body, []byte(pythonTag))
		var out []ToolCall
		for _, part := range bytes.Split(body, []byte(";")) {
			c, ok := p.call(part, "parameters")
			if !ok {
				return append([]byte{}, p.buf...), nil
			}
			out = p.keep(out, c)
		}
		return nil, out
	case p.Format == ToolFormatMistral && p.whole:
		if out, ok := p.mistralCalls(bytes.TrimSpace(p.buf)); ok {
			return nil, out
		}
		return append([]byte{}, p.buf...), nil
	case p.inCall: // an unclosed <tool_call>: a call if its JSON is whole
		if c, ok := p.call(p.buf, "arguments"); ok {
			return nil, p.keep(nil, c)
		}
		return append([]byte(hermesOpen), p.buf...), nil
	}
	if p.calls > 0 {
		return nil, nil // the space after the calls
	}
	return append([]byte{}, p.buf...), nil
}

// mistralCalls parses the calls after each [TOOL_CALLS] of body.
func (p *ToolParser) mistralCalls(body []byte) ([]ToolCall, bool) {
	var out []ToolCall
	for _, part := range bytes.Split(body, []byte(mistralTag)) {
		part = bytes.TrimSpace(part)
		switch {
		case len(part) == 0:
			continue
		case part[0] == '[': // a JSON array of calls
			var list []json.RawMessage
			if json.Unmarshal(part, &list) != nil || len(list) == 0 {
				return nil, false
			}
			for _, raw := range list {
				c, ok := p.call(raw, "arguments")
				if !ok {
					return nil, false
				}
				out = p.keep(out, c)
			}
		default: // name[ARGS]{...}, maybe name[CALL_ID]id[ARGS]{...}
			head, args, ok := bytes.Cut(part, []byte(mistralArgs))
			if !ok {
				return nil, false
			}
			name, _, _ := bytes.Cut(head, []byte(mistralID))
			obj, err := json.Marshal(map[string]json.RawMessage{"name": jsonString(string(bytes.TrimSpace(name))), "arguments": args})
			if err != nil {
				return nil, false
			}
			c, ok := p.call(obj, "arguments")
			if !ok {
				return nil, false
			}
			out = p.keep(out, c)
		}
	}
	return out, len(out) > 0
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

func (p *ToolParser) keep(calls []ToolCall, c ToolCall) []ToolCall {
	if p.Single && p.calls > 0 {
		return calls
	}
	c.ID = p.IDPrefix + strconv.Itoa(p.calls)
	p.calls++
	return append(calls, c)
}

// call parses one call's JSON: {"name": ..., argsKey: {...}} ("arguments"
// also read where argsKey is "parameters").
func (p *ToolParser) call(body []byte, argsKey string) (ToolCall, bool) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(bytes.TrimSpace(body), &obj) != nil {
		return ToolCall{}, false
	}
	var name string
	if json.Unmarshal(obj["name"], &name) != nil || !p.declared(name) {
		return ToolCall{}, false
	}
	args, ok := obj[argsKey]
	if !ok {
		args, ok = obj["arguments"]
	}
	if !ok || isNull(args) {
		args = json.RawMessage("{}")
	}
	var s string
	if json.Unmarshal(args, &s) == nil && json.Valid([]byte(s)) { // arguments sent as an encoded string
		args = json.RawMessage(s)
	}
	if c := bytes.TrimSpace(args); len(c) == 0 || c[0] != '{' {
		return ToolCall{}, false
	}
	var b bytes.Buffer
	if json.Compact(&b, args) != nil {
		return ToolCall{}, false
	}
	return ToolCall{Name: name, Arguments: b.String()}, true
}

func (p *ToolParser) declared(name string) bool {
	for _, t := range p.Tools {
		if t == name {
			return true
		}
	}
	return false
}

// partialSuffix is the length of the longest suffix of b that is a proper
// prefix of tag.
func partialSuffix(b []byte, tag string) int {
	for n := min(len(b), len(tag)-1); n > 0; n-- {
		if bytes.HasSuffix(b, []byte(tag[:n])) {
			return n
		}
	}
	return 0
}
