package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/streamgate/streamgate/gateway/internal/jsonobj"
)

// Tool is a function tool of a chat request. Raw is its JSON, as the
// request sent it, for the chat template.
type Tool struct {
	Name string
	Raw  json.RawMessage
}

// ToolCall is a function call: of an assistant message in a request, or
// parsed from a model's output. Arguments is a JSON text (OpenAI sends and
// returns it as a string).
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
	// Partial marks a call the token limit cut off: Arguments is the
	// part written.
	Partial bool
}

// Tool choices: ToolChoice is one of these or "function" (a named
// function, ToolChoiceName).
const (
	ToolChoiceAuto     = "auto"
	ToolChoiceNone     = "none"
	ToolChoiceRequired = "required"
)

// tools reads tools, tool_choice and parallel_tool_calls into r.
func (f *fields) tools(r *ChatRequest) error {
	if raw, ok := f.m["tools"]; ok && !isNull(raw) {
		list, ok := jsonobj.Array(raw)
		if !ok {
			return typeError("tools", "an array", raw)
		}
		seen := map[string]bool{}
		for i, t := range list {
			param := "tools[" + strconv.Itoa(i) + "]"
			var tool struct {
				Type     *string                    `json:"type"`
				Function map[string]json.RawMessage `json:"function"`
			}
			if json.Unmarshal(t, &tool) != nil {
				return typeError(param, "an object with 'type' and 'function'", t)
			}
			if tool.Type == nil {
				return &RequestError{Message: fmt.Sprintf("Missing required parameter: '%s.type'.", param), Param: param + ".type", Code: "missing_required_parameter"}
			}
			if *tool.Type != "function" {
				return unsupported(param+".type", fmt.Sprintf("'%s' is not supported by this server: only function tools are.", *tool.Type))
			}
			if tool.Function == nil {
				return &RequestError{Message: fmt.Sprintf("Missing required parameter: '%s.function'.", param), Param: param + ".function", Code: "missing_required_parameter"}
			}
			name, err := (&fields{m: tool.Function}).str("name", true)
			if err != nil {
				return &RequestError{Message: fmt.Sprintf("Missing or invalid '%s.function.name': a function tool needs a name (a string).", param), Param: param + ".function.name", Code: "invalid_value"}
			}
			if !validFunctionName(name) {
				return valueError(param+".function.name", fmt.Sprintf("'%s' does not match '^[a-zA-Z0-9_-]{1,64}$'.", name))
			}
			if seen[name] {
				return valueError(param+".function.name", fmt.Sprintf("the function '%s' is declared twice.", name))
			}
			seen[name] = true
			if p, ok := tool.Function["parameters"]; ok && !isNull(p) {
				if c := bytes.TrimSpace(p); len(c) == 0 || c[0] != '{' {
					return typeError(param+".function.parameters", "an object (a JSON schema)", p)
				}
			}
			r.Tools = append(r.Tools, Tool{Name: name, Raw: t})
		}
	}
	r.ToolChoice = ToolChoiceAuto
	if raw, ok := f.m["tool_choice"]; ok && !isNull(raw) {
		if s, ok := unquote(raw); ok {
			switch s {
			case ToolChoiceAuto, ToolChoiceNone, ToolChoiceRequired:
				r.ToolChoice = s
			default:
				return valueError("tool_choice", fmt.Sprintf("'%s' is not one of 'none', 'auto', 'required' or a named function.", s))
			}
		} else {
			var named struct {
				Type     string `json:"type"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if json.Unmarshal(raw, &named) != nil || named.Type != "function" || named.Function.Name == "" {
				return typeError("tool_choice", "'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}", raw)
			}
			r.ToolChoice, r.ToolChoiceName = "function", named.Function.Name
		}
		if len(r.Tools) == 0 && r.ToolChoice != ToolChoiceNone && r.ToolChoice != ToolChoiceAuto {
			return valueError("tool_choice", "it is only allowed when 'tools' are given.")
		}
		if r.ToolChoiceName != "" && !r.hasTool(r.ToolChoiceName) {
			return valueError("tool_choice", fmt.Sprintf("the function '%s' is not among the tools.", r.ToolChoiceName))
		}
	}
	r.ParallelToolCalls = true
	if raw, ok := f.m["parallel_tool_calls"]; ok && !isNull(raw) {
		b, ok := unmarshalBool(raw)
		if !ok {
			return typeError("parallel_tool_calls", "a boolean", raw)
		}
		r.ParallelToolCalls = b
	}
	return nil
}

func (r *ChatRequest) hasTool(name string) bool {
	for _, t := range r.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

func validFunctionName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// toolCalls reads an assistant message's tool_calls.
func toolCalls(param string, raw json.RawMessage) ([]ToolCall, error) {
	if isNull(raw) {
		return nil, nil
	}
	list, ok := jsonobj.Array(raw)
	if !ok {
		return nil, typeError(param, "an array", raw)
	}
	out := make([]ToolCall, 0, len(list))
	for i, c := range list {
		p := param + "[" + strconv.Itoa(i) + "]"
		var call struct {
			ID       *string `json:"id"`
			Type     *string `json:"type"`
			Function *struct {
				Name      *string `json:"name"`
				Arguments *string `json:"arguments"`
			} `json:"function"`
		}
		if json.Unmarshal(c, &call) != nil {
			return nil, typeError(p, "a tool call object (id, type, function with name and arguments strings)", c)
		}
		switch {
		case call.ID == nil:
			return nil, &RequestError{Message: fmt.Sprintf("Missing required parameter: '%s.id'.", p), Param: p + ".id", Code: "missing_required_parameter"}
		case call.Type == nil || *call.Type != "function":
			return nil, valueError(p+".type", "it must be 'function'.")
		case call.Function == nil || call.Function.Name == nil:
			return nil, &RequestError{Message: fmt.Sprintf("Missing required parameter: '%s.function.name'.", p), Param: p + ".function.name", Code: "missing_required_parameter"}
		case call.Function.Arguments == nil:
			return nil, &RequestError{Message: fmt.Sprintf("Missing required parameter: '%s.function.arguments'.", p), Param: p + ".function.arguments", Code: "missing_required_parameter"}
		}
		if !json.Valid([]byte(*call.Function.Arguments)) {
			return nil, valueError(p+".function.arguments", "it must be a JSON text (the function's arguments, encoded).")
		}
		out = append(out, ToolCall{ID: *call.ID, Name: *call.Function.Name, Arguments: *call.Function.Arguments})
	}
	return out, nil
}
