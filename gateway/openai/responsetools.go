package openai

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/streamgate/streamgate/gateway/internal/jsonobj"
)

// Function tools on the Responses API: its tools are flat ({"type":
// "function", "name", "parameters", ...}), its tool_choice names a
// function as {"type": "function", "name"}, and the conversation carries
// function_call and function_call_output items.

// responsesTools reads tools, tool_choice and parallel_tool_calls into r,
// rewriting each tool into chat's shape for the chat template and the
// tool parser.
func (f *fields) responsesTools(r *ResponsesRequest) error {
	chat := map[string]json.RawMessage{}
	if raw, ok := f.m["tools"]; ok && !isNull(raw) {
		list, ok := jsonobj.Array(raw)
		if !ok {
			return typeError("tools", "an array", raw)
		}
		wrapped := make([]json.RawMessage, len(list))
		for i, t := range list {
			param := "tools[" + strconv.Itoa(i) + "]"
			var tool map[string]json.RawMessage
			if json.Unmarshal(t, &tool) != nil || tool == nil {
				return typeError(param, "an object", t)
			}
			var typ string
			if json.Unmarshal(tool["type"], &typ) != nil {
				return &RequestError{Message: fmt.Sprintf("Missing required parameter: '%s.type'.", param), Param: param + ".type", Code: "missing_required_parameter"}
			}
			if typ != "function" {
				return unsupported(param+".type", fmt.Sprintf("'%s' is not supported by this server: only function tools are.", typ))
			}
			fn := map[string]json.RawMessage{}
			for k, v := range tool {
				switch k {
				case "type":
				case "name", "description", "parameters", "strict":
					fn[k] = v
				default:
					return &RequestError{Message: fmt.Sprintf("Unrecognized request argument supplied: %s.%s", param, k), Param: param + "." + k, Code: "unknown_parameter"}
				}
			}
			b, err := json.Marshal(map[string]any{"type": "function", "function": fn})
			if err != nil {
				return typeError(param, "a function tool", t)
			}
			wrapped[i] = b
			r.RawTools = append(r.RawTools, t)
		}
		chat["tools"], _ = json.Marshal(wrapped)
	}
	if raw, ok := f.m["tool_choice"]; ok && !isNull(raw) {
		r.RawToolChoice = raw
		var named struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		if _, isString := unquote(raw); !isString && json.Unmarshal(raw, &named) == nil && named.Type == "function" && named.Name != "" {
			raw, _ = json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": named.Name}})
		}
		chat["tool_choice"] = raw
	}
	if raw, ok := f.m["parallel_tool_calls"]; ok {
		chat["parallel_tool_calls"] = raw
	}
	var cr ChatRequest
	if err := (&fields{m: chat}).tools(&cr); err != nil {
		if e, ok := err.(*RequestError); ok && e.Param != "" {
			e.Message = responsesParam(e.Message)
			e.Param = responsesParam(e.Param)
		}
		return err
	}
	r.Tools, r.ToolChoice, r.ToolChoiceName, r.ParallelToolCalls = cr.Tools, cr.ToolChoice, cr.ToolChoiceName, cr.ParallelToolCalls
	return nil
}

// responsesParam turns a chat tool parameter's path into the Responses
// API's (tools[0].function.name is tools[0].name there).
func responsesParam(s string) string {
	out := []byte{}
	for i := 0; i < len(s); i++ {
		if len(s)-i >= len(".function") && s[i:i+len(".function")] == ".function" && (i+len(".function") == len(s) || s[i+len(".function")] == '.') {
			i += len(".function") - 1
			continue
		}
		out = append(out, s[i])
	}
	return string(out)
}

// functionItem reads a function_call or function_call_output input item:
// an assistant turn with that call, or a tool message with its output.
func functionItem(param, typ string, f *fields) (ChatMessage, error) {
	allowed := map[string]bool{"type": true, "id": true, "status": true, "call_id": true}
	if typ == "function_call" {
		allowed["name"], allowed["arguments"] = true, true
		// what the SDK's stream and parse helpers add to the call items
		// of a response an agent sends back as input
		allowed["parsed_arguments"] = true
	} else {
		allowed["output"] = true
	}
	for k := range f.m {
		if !allowed[k] {
			return ChatMessage{}, &RequestError{Message: fmt.Sprintf("Unrecognized request argument supplied: %s.%s", param, k), Param: param + "." + k, Code: "unknown_parameter"}
		}
	}
	callID, err := f.str("call_id", true)
	if err != nil || callID == "" {
		return ChatMessage{}, &RequestError{Message: fmt.Sprintf("Missing required parameter: '%s.call_id'.", param), Param: param + ".call_id", Code: "missing_required_parameter"}
	}
	if typ == "function_call_output" {
		out, err := f.str("output", true)
		if err != nil {
			return ChatMessage{}, &RequestError{Message: fmt.Sprintf("Missing or invalid '%s.output': a string is required.", param), Param: param + ".output", Code: "invalid_value"}
		}
		return ChatMessage{Role: "tool", Content: out, ToolCallID: callID}, nil
	}
	name, err := f.str("name", true)
	if err != nil || name == "" {
		return ChatMessage{}, &RequestError{Message: fmt.Sprintf("Missing required parameter: '%s.name'.", param), Param: param + ".name", Code: "missing_required_parameter"}
	}
	args, err := f.str("arguments", true)
	if err != nil || !json.Valid([]byte(args)) {
		return ChatMessage{}, valueError(param+".arguments", "it must be a JSON text (the function's arguments, encoded).")
	}
	return ChatMessage{Role: "assistant", ToolCalls: []ToolCall{{ID: callID, Name: name, Arguments: args}}}, nil
}
