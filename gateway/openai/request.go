// Package openai implements the wire format of OpenAI's chat completions
// and completions APIs for the gateway: ParseChat and ParseCompletion
// validate a request body (a *RequestError names the offending field),
// Template renders chat messages into a model prompt, and Chunker builds
// the exact objects of a response: streamed chunks, whole completions, the
// usage chunk and error bodies.
//
// Supported: model, messages/prompt, stream, stream_options.include_usage,
// max_tokens, max_completion_tokens, temperature, top_p, seed, stop (string
// or list), n=1, user, frequency_penalty, presence_penalty, vLLM's top_k,
// min_p and repetition_penalty, function tools (tools, tool_choice auto or
// none, parallel_tool_calls, tool calls and tool messages in the history;
// ToolParser reads calls from a model's output), and the no-op values of
// other fields. Anything the gateway cannot honour (n>1, logit_bias,
// logprobs, ...) is refused.
package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/streamgate/streamgate/gateway/internal/jsonobj"
	"github.com/streamgate/streamgate/gateway/textmodel"
)

// RequestError is an invalid request (HTTP 400, type
// "invalid_request_error").
type RequestError struct {
	Message string
	Param   string // the field at fault, "" if none
	Code    string // e.g. "invalid_type", "unsupported_parameter"
}

func (e *RequestError) Error() string { return e.Message }

// ChatMessage is one message of a chat request, its content flattened to
// text.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	Name    string `json:"name,omitempty"`
	// ToolCalls are an assistant message's function calls, ToolCallID
	// the call a tool message answers.
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	// Ref is the id of an earlier response's message that a Responses
	// input item_reference names; the gateway fills in its text.
	Ref string `json:"-"`
}

// ChatRequest is a validated chat completions request.
type ChatRequest struct {
	Model        string
	Messages     []ChatMessage
	Stream       bool
	IncludeUsage bool
	Params       textmodel.Params
	// Tools are the function tools; ToolChoice is "auto" (the default),
	// "none", "required" or "function" (ToolChoiceName's).
	Tools             []Tool
	ToolChoice        string
	ToolChoiceName    string
	ParallelToolCalls bool
	// ResponseFormat is response_format's type (FormatText when absent);
	// Guided is the guided_decoding it asks for (nil for text).
	ResponseFormat string
	Guided         json.RawMessage
}

// CompletionRequest is a validated completions request.
type CompletionRequest struct {
	Model        string
	Prompt       string
	Stream       bool
	IncludeUsage bool
	Echo         bool
	Params       textmodel.Params
}

// DefaultCompletionMaxTokens is OpenAI's max_tokens default for completions.
const DefaultCompletionMaxTokens = 16

// common reads the fields chat and completions share.
func (f *fields) common(maxTokensNames ...string) (model string, stream, includeUsage bool, p textmodel.Params, err error) {
	if model, err = f.str("model", true); err != nil {
		return
	}
	if model == "" {
		err = valueError("model", "it must not be empty.")
		return
	}
	if stream, err = f.boolean("stream"); err != nil {
		return
	}
	if raw, ok := f.m["stream_options"]; ok && !isNull(raw) {
		var so map[string]json.RawMessage
		if e := json.Unmarshal(raw, &so); e != nil {
			err = typeError("stream_options", "an object", raw)
			return
		}
		if !stream {
			err = valueError("stream_options", "it is only allowed when 'stream' is true.")
			return
		}
		for k, v := range so {
			if k != "include_usage" {
				err = &RequestError{Message: fmt.Sprintf("Unrecognized request argument supplied: stream_options.%s", k), Param: "stream_options." + k, Code: "unknown_parameter"}
				return
			}
			b, ok := unmarshalBool(v)
			if !ok {
				err = typeError("stream_options.include_usage", "a boolean", v)
				return
			}
			includeUsage = b
		}
	}
	for _, name := range maxTokensNames {
		var v *int64
		if v, err = f.integer(name, 1, math.MaxInt32); err != nil {
			return
		}
		if v != nil {
			n := int(*v)
			p.MaxTokens = &n
		}
	}
	if p.Temperature, err = f.number("temperature", 0, 2); err != nil {
		return
	}
	if p.TopP, err = f.number("top_p", 0, 1); err != nil {
		return
	}
	if p.Seed, err = f.integer("seed", math.MinInt64, math.MaxInt64); err != nil {
		return
	}
	if p.DelayMs, err = f.integer("delay_ms", 0, MaxDelayMs); err != nil {
		return
	}
	if p.Stop, err = f.stop(); err != nil {
		return
	}
	if n, e := f.integer("n", 1, 128); e != nil {
		err = e
		return
	} else if n != nil && *n != 1 {
		err = unsupported("n", "must be 1: this server returns one choice per request.")
		return
	}
	if _, err = f.str("user", false); err != nil {
		return
	}
	if err = f.samplingExtras(&p); err != nil {
		return
	}
	if raw, ok := f.m["logit_bias"]; ok && !isNull(raw) && string(bytes.TrimSpace(raw)) != "{}" {
		err = unsupported("logit_bias", "is not supported by this server.")
	}
	return
}

// samplingExtras reads the sampling parameters vLLM-compatible clients
// send beyond OpenAI's: top_k, min_p, repetition_penalty, and OpenAI's own
// frequency and presence penalties. Their off values (top_k 0 or -1,
// min_p 0, repetition_penalty 1, penalties 0) are left unset, so that a
// model that cannot honour them is only refused when asked to.
func (f *fields) samplingExtras(p *textmodel.Params) error {
	k, err := f.integer("top_k", -1, math.MaxInt32)
	if err != nil {
		return err
	}
	if k != nil && *k > 0 {
		p.TopK = k
	}
	if p.MinP, err = f.extra("min_p", 0, 1, 0, false); err != nil {
		return err
	}
	if p.RepetitionPenalty, err = f.extra("repetition_penalty", 0, 10, 1, true); err != nil {
		return err
	}
	if p.FrequencyPenalty, err = f.extra("frequency_penalty", -2, 2, 0, false); err != nil {
		return err
	}
	p.PresencePenalty, err = f.extra("presence_penalty", -2, 2, 0, false)
	return err
}

// extra reads a sampling extra between lo and hi (above lo with
// openLow); its off value is nil.
func (f *fields) extra(name string, lo, hi, off float64, openLow bool) (*float64, error) {
	v, err := f.number(name, lo, hi)
	if err != nil || v == nil {
		return nil, err
	}
	if openLow && *v == lo {
		return nil, valueError(name, fmt.Sprintf("%g is out of range; it must be greater than %g and at most %g.", *v, lo, hi))
	}
	if *v == off {
		return nil, nil
	}
	return v, nil
}

func (f *fields) stop() ([]string, error) {
	raw, ok := f.m["stop"]
	if !ok || isNull(raw) {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, typeError("stop", "a string or an array of strings", raw)
	}
	if len(list) > 4 {
		return nil, valueError("stop", "at most 4 stop sequences are allowed.")
	}
	return list, nil
}

// refuse answers an unsupported error for the first named field, in
// sorted order, that is set to something other than null or an allowed
// no-op value.
func (f *fields) refuse(names map[string]string) error {
	first := ""
	for k := range names {
		raw, ok := f.m[k]
		if !ok || isNull(raw) || (first != "" && k > first) {
			continue
		}
		v := string(bytes.TrimSpace(raw))
		if v == "false" || v == "[]" || v == "{}" || v == `"none"` || v == `"auto"` && k != "tools" {
			continue
		}
		first = k
	}
	if first != "" {
		return unsupported(first, names[first])
	}
	return nil
}

var commonFields = []string{"model", "stream", "stream_options", "max_tokens", "temperature", "top_p", "seed", "stop",
	"n", "user", "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "metadata", "store", "service_tier",
	"top_k", "min_p", "repetition_penalty", "delay_ms"}

// MaxDelayMs is the largest delay_ms, streamgate's extension that paces a
// model that honours it (echo, the llama2 engine's text models) so that its
// stream can be watched.
const MaxDelayMs = 10_000

func accepted(extra ...string) map[string]bool {
	m := map[string]bool{}
	for _, k := range append(commonFields, extra...) {
		m[k] = true
	}
	return m
}

var chatFields = accepted("messages", "max_completion_tokens", "tools", "tool_choice", "functions", "function_call",
	"parallel_tool_calls", "response_format", "modalities", "audio", "prediction", "reasoning_effort", "web_search_options")

var chatRefused = map[string]string{
	"functions":          "is not supported by this server (no function calling).",
	"function_call":      "is not supported by this server (no function calling).",
	"logprobs":           "is not supported by this server.",
	"top_logprobs":       "is not supported by this server.",
	"modalities":         "is not supported by this server (text only).",
	"audio":              "is not supported by this server (text only).",
	"prediction":         "is not supported by this server.",
	"reasoning_effort":   "is not supported by this server.",
	"web_search_options": "is not supported by this server.",
}

// ParseChat validates a chat completions body. Without max_tokens or
// max_completion_tokens, Params.MaxTokens is nil: the answer may run to the
// end of the model's context, as OpenAI's chat completions do (unlike
// completions, see ParseCompletion).
func ParseChat(body []byte) (*ChatRequest, error) {
	f, err := parseObject(body)
	if err != nil {
		return nil, err
	}
	if err := f.checkKnown(chatFields); err != nil {
		return nil, err
	}
	if err := f.refuse(chatRefused); err != nil {
		return nil, err
	}
	r := &ChatRequest{}
	if r.Model, r.Stream, r.IncludeUsage, r.Params, err = f.common("max_tokens", "max_completion_tokens"); err != nil {
		return nil, err
	}
	if err = f.responseFormat(r); err != nil {
		return nil, err
	}
	if err = f.tools(r); err != nil {
		return nil, err
	}
	if r.Messages, err = f.messages(); err != nil {
		return nil, err
	}
	return r, nil
}

func (f *fields) messages() ([]ChatMessage, error) {
	raw, ok := f.m["messages"]
	if !ok || isNull(raw) {
		return nil, &RequestError{Message: "Missing required parameter: 'messages'.", Param: "messages", Code: "missing_required_parameter"}
	}
	list, ok := jsonobj.Array(raw)
	if !ok {
		return nil, typeError("messages", "an array", raw)
	}
	if len(list) == 0 {
		return nil, valueError("messages", "it must contain at least one message.")
	}
	out := make([]ChatMessage, 0, len(list))
	for i, m := range list {
		// param names the message in errors.
		param := func() string { return "messages[" + strconv.Itoa(i) + "]" }
		obj, ok := objectMap(m)
		if !ok {
			return nil, typeError(param(), "an object", m)
		}
		mf := fields{m: obj}
		role, err := mf.str("role", true)
		if err != nil {
			return nil, &RequestError{Message: strings.Replace(err.Error(), "'role'", "'"+param()+".role'", 1), Param: param() + ".role", Code: err.(*RequestError).Code}
		}
		switch role {
		case "system", "developer", "user", "assistant", "tool":
		case "function":
			return nil, unsupported(param()+".role", "'function' is not supported by this server (use 'tool').")
		default:
			return nil, valueError(param()+".role", fmt.Sprintf("'%s' is not one of 'system', 'developer', 'user', 'assistant', 'tool'.", role))
		}
		msg := ChatMessage{Role: role}
		for k := range obj {
			switch k {
			case "role", "content", "name", "refusal":
			case "parsed": // what the SDK's stream and parse helpers add to a message
				if role != "assistant" {
					return nil, &RequestError{Message: fmt.Sprintf("Unrecognized request argument supplied: %s.%s", param(), k), Param: param() + "." + k, Code: "unknown_parameter"}
				}
			case "tool_calls":
				if role != "assistant" {
					return nil, &RequestError{Message: fmt.Sprintf("Unrecognized request argument supplied: %s.%s (only assistant messages carry tool calls)", param(), k), Param: param() + "." + k, Code: "unknown_parameter"}
				}
				if msg.ToolCalls, err = toolCalls(param()+".tool_calls", obj[k]); err != nil {
					return nil, err
				}
			case "tool_call_id":
				if role != "tool" {
					return nil, &RequestError{Message: fmt.Sprintf("Unrecognized request argument supplied: %s.%s (only tool messages answer a tool call)", param(), k), Param: param() + "." + k, Code: "unknown_parameter"}
				}
				if msg.ToolCallID, err = mf.str("tool_call_id", false); err != nil {
					return nil, typeError(param()+".tool_call_id", "a string", obj[k])
				}
			case "function_call", "audio":
				if !isNull(obj[k]) && string(bytes.TrimSpace(obj[k])) != "[]" {
					return nil, unsupported(param()+"."+k, "is not supported by this server.")
				}
			default:
				return nil, &RequestError{Message: fmt.Sprintf("Unrecognized request argument supplied: %s.%s", param(), k), Param: param() + "." + k, Code: "unknown_parameter"}
			}
		}
		if role == "tool" && msg.ToolCallID == "" {
			return nil, &RequestError{Message: fmt.Sprintf("Missing required parameter: '%s.tool_call_id'.", param()), Param: param() + ".tool_call_id", Code: "missing_required_parameter"}
		}
		if c := obj["content"]; len(c) > 0 && c[0] == '"' { // plain text: the common case
			if msg.Content, ok = unquote(c); !ok {
				return nil, typeError(param()+".content", "a string or an array of content parts", c)
			}
		} else if msg.Content, err = messageContent(param()+".content", c, role); err != nil {
			return nil, err
		}
		if msg.Name, err = mf.str("name", false); err != nil {
			return nil, typeError(param()+".name", "a string", obj["name"])
		}
		out = append(out, msg)
	}
	return out, nil
}

// objectMap is json.Unmarshal of raw, a valid JSON value, into a
// map[string]json.RawMessage: nil for null, ok false for what is not an
// object.
func objectMap(raw json.RawMessage) (m map[string]json.RawMessage, ok bool) {
	if isNull(raw) {
		return nil, true
	}
	m = make(map[string]json.RawMessage, 4)
	if !jsonobj.EachMember(raw, func(k []byte, v json.RawMessage) { m[key(k)] = v }) {
		return nil, false
	}
	return m, true
}

func messageContent(param string, raw json.RawMessage, role string) (string, error) {
	if isNull(raw) {
		if role == "assistant" {
			return "", nil
		}
		return "", &RequestError{Message: fmt.Sprintf("Missing required parameter: '%s'.", param), Param: param, Code: "missing_required_parameter"}
	}
	if s, ok := unquote(raw); ok {
		return s, nil
	}
	var parts []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", typeError(param, "a string or an array of content parts", raw)
	}
	var b strings.Builder
	for i, p := range parts {
		pp := fmt.Sprintf("%s[%d]", param, i)
		var typ, text string
		if json.Unmarshal(p["type"], &typ) != nil {
			return "", typeError(pp+".type", "a string", p["type"])
		}
		if typ != "text" {
			return "", unsupported(pp+".type", fmt.Sprintf("'%s' is not supported by this server (text only).", typ))
		}
		if json.Unmarshal(p["text"], &text) != nil {
			return "", typeError(pp+".text", "a string", p["text"])
		}
		b.WriteString(text)
	}
	return b.String(), nil
}

var completionFields = accepted("prompt", "echo", "best_of", "suffix")

var completionRefused = map[string]string{
	"logprobs": "is not supported by this server.",
	"suffix":   "is not supported by this server.",
}

// ParseCompletion validates a completions body. max_tokens defaults to
// DefaultCompletionMaxTokens, as OpenAI's does.
func ParseCompletion(body []byte) (*CompletionRequest, error) {
	f, err := parseObject(body)
	if err != nil {
		return nil, err
	}
	if err := f.checkKnown(completionFields); err != nil {
		return nil, err
	}
	if raw, ok := f.m["suffix"]; ok && string(bytes.TrimSpace(raw)) == `""` {
		delete(f.m, "suffix")
	}
	if raw, ok := f.m["logprobs"]; ok && string(bytes.TrimSpace(raw)) == "0" {
		delete(f.m, "logprobs")
	}
	if err := f.refuse(completionRefused); err != nil {
		return nil, err
	}
	r := &CompletionRequest{}
	if r.Model, r.Stream, r.IncludeUsage, r.Params, err = f.common("max_tokens"); err != nil {
		return nil, err
	}
	if r.Params.MaxTokens == nil {
		n := DefaultCompletionMaxTokens
		r.Params.MaxTokens = &n
	}
	if r.Echo, err = f.boolean("echo"); err != nil {
		return nil, err
	}
	if b, err := f.integer("best_of", 1, 20); err != nil {
		return nil, err
	} else if b != nil && *b != 1 {
		return nil, unsupported("best_of", "must be 1: this server returns one choice per request.")
	}
	raw, ok := f.m["prompt"]
	if !ok || isNull(raw) {
		return nil, &RequestError{Message: "Missing required parameter: 'prompt'.", Param: "prompt", Code: "missing_required_parameter"}
	}
	if err := json.Unmarshal(raw, &r.Prompt); err != nil {
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) != nil {
			return nil, typeError("prompt", "a string or an array of one string", raw)
		}
		if len(list) != 1 || json.Unmarshal(list[0], &r.Prompt) != nil {
			return nil, unsupported("prompt", "must be a string or an array of exactly one string (batches and token arrays are not supported).")
		}
	}
	return r, nil
}
