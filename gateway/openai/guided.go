package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Structured outputs: response_format json_object and json_schema, and a
// required or named tool_choice, become vLLM's guided_decoding parameter
// (textmodel.Params.Guided), which a model that can constrain its sampling
// enforces. The gateway checks the request's shape; the model checks the
// schema (it answers which keywords it cannot enforce).

// Response formats: ChatRequest.ResponseFormat is one of these.
const (
	FormatText       = "text"
	FormatJSONObject = "json_object"
	FormatJSONSchema = "json_schema"
)

// responseFormat reads response_format into r.
func (f *fields) responseFormat(r *ChatRequest) error {
	r.ResponseFormat = FormatText
	raw, ok := f.m["response_format"]
	if !ok || isNull(raw) {
		return nil
	}
	var rf struct {
		Type       *string                    `json:"type"`
		JSONSchema map[string]json.RawMessage `json:"json_schema"`
	}
	if json.Unmarshal(raw, &rf) != nil {
		return typeError("response_format", "an object with a 'type'", raw)
	}
	if rf.Type == nil {
		return &RequestError{Message: "Missing required parameter: 'response_format.type'.", Param: "response_format.type", Code: "missing_required_parameter"}
	}
	switch *rf.Type {
	case FormatText:
	case FormatJSONObject:
		r.Guided = json.RawMessage(`{"json_object":true}`)
	case FormatJSONSchema:
		if rf.JSONSchema == nil {
			return &RequestError{Message: "Missing required parameter: 'response_format.json_schema'.", Param: "response_format.json_schema", Code: "missing_required_parameter"}
		}
		if err := jsonSchemaFormat(rf.JSONSchema, "response_format.json_schema", &r.Guided); err != nil {
			return err
		}
	default:
		return valueError("response_format.type", fmt.Sprintf("'%s' is not one of 'text', 'json_object' or 'json_schema'.", *rf.Type))
	}
	r.ResponseFormat = *rf.Type
	return nil
}

// jsonSchemaFormat reads a json_schema format's name, strict and schema
// (chat's response_format.json_schema, the Responses API's text.format)
// into guided; param names the object.
func jsonSchemaFormat(m map[string]json.RawMessage, param string, guided *json.RawMessage) error {
	name, err := (&fields{m: m}).str("name", true)
	if err != nil || !validFunctionName(name) {
		return valueError(param+".name", "a name matching '^[a-zA-Z0-9_-]{1,64}$' is required.")
	}
	if s, ok := m["strict"]; ok && !isNull(s) {
		if _, ok := unmarshalBool(s); !ok {
			return typeError(param+".strict", "a boolean", s)
		}
	}
	schema := json.RawMessage("{}")
	if s, ok := m["schema"]; ok && !isNull(s) {
		if c := bytes.TrimSpace(s); len(c) == 0 || c[0] != '{' {
			return typeError(param+".schema", "an object (a JSON schema)", s)
		}
		schema = s
	}
	*guided = append(append(json.RawMessage(`{"json":`), schema...), '}')
	return nil
}

// ToolGuide returns the guided_decoding of a required or named
// tool_choice: one call, a JSON object {"name": ..., "arguments": ...}
// whose arguments follow the function's parameters (for "required", any
// declared function's); for "required" with parallel_tool_calls, a JSON
// array of one or more such calls. ToolFormatGuided parses what it
// guides. It returns nil for other choices.
func (r *ChatRequest) ToolGuide() (json.RawMessage, error) {
	if r.ToolChoice != ToolChoiceRequired && r.ToolChoice != "function" {
		return nil, nil
	}
	var calls []json.RawMessage
	for i, t := range r.Tools {
		if r.ToolChoice == "function" && t.Name != r.ToolChoiceName {
			continue
		}
		var tool struct {
			Function struct {
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if err := json.Unmarshal(t.Raw, &tool); err != nil {
			return nil, err
		}
		at := "#/properties/arguments"
		if r.ToolChoice == ToolChoiceRequired {
			at = "#/anyOf/" + strconv.Itoa(len(calls)) + "/properties/arguments"
			if r.ParallelToolCalls {
				at = "#/items" + at[1:]
			}
		}
		params := json.RawMessage(`{"type":"object"}`)
		if !isNull(tool.Function.Parameters) {
			var v any
			if err := json.Unmarshal(tool.Function.Parameters, &v); err != nil {
				return nil, err
			}
			b, err := json.Marshal(rebaseRefs(v, at))
			if err != nil {
				return nil, valueError("tools["+strconv.Itoa(i)+"].function.parameters", err.Error())
			}
			params = b
		}
		name, _ := json.Marshal(t.Name)
		calls = append(calls, json.RawMessage(`{"type":"object","properties":{"name":{"const":`+string(name)+
			`},"arguments":`+string(params)+`},"required":["name","arguments"],"additionalProperties":false}`))
	}
	schema := calls[0]
	if r.ToolChoice == ToolChoiceRequired {
		schema = json.RawMessage(`{"anyOf":[`)
		for i, c := range calls {
			if i > 0 {
				schema = append(schema, ',')
			}
			schema = append(schema, c...)
		}
		schema = append(schema, ']', '}')
		if r.ParallelToolCalls {
			schema = append(append(json.RawMessage(`{"type":"array","minItems":1,"items":`), schema...), '}')
		}
	}
	return append(append(json.RawMessage(`{"json":`), schema...), '}'), nil
}

// rebaseRefs rewrites the local references of a schema (#/...) that is
// moved under the pointer at of a larger schema.
func rebaseRefs(v any, at string) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "$ref" && strings.HasPrefix(s, "#") {
				x[k] = at + strings.TrimPrefix(s, "#")
				continue
			}
			x[k] = rebaseRefs(e, at)
		}
	case []any:
		for i, e := range x {
			x[i] = rebaseRefs(e, at)
		}
	}
	return v
}
