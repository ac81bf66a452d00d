package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"

	"github.com/streamgate/streamgate/gateway/internal/jsonobj"
	"github.com/streamgate/streamgate/gateway/textmodel"
)

// The Responses API (POST /v1/responses) for text models: ParseResponses
// validates a request, Response is the object OpenAI documents, and
// Responder builds the stream's semantic events.

// ResponsesRequest is a validated Responses API request.
type ResponsesRequest struct {
	Model string
	// Input is the request's own input items as messages (a string input
	// is one user message).
	Input []ChatMessage
	// Instructions, if set, is a system message put before the input
	// (and not carried over to a response that continues this one).
	Instructions *string
	Stream       bool
	// Store keeps the response for GET /v1/responses/{id} and
	// previous_response_id; OpenAI's default is true.
	Store bool
	// Background runs the response on when its client leaves; it needs
	// Store.
	Background         bool
	Metadata           map[string]string
	PreviousResponseID string
	User               *string
	// Params hold max_output_tokens as MaxTokens (nil: no limit but the
	// model's context), and text.format's guided decoding as Guided.
	Params textmodel.Params
	// Format is text.format's type (FormatText when absent).
	Format string
	// Tools, ToolChoice, ToolChoiceName and ParallelToolCalls are the
	// function tools, as chat completions reads them (Tools[i].Raw in
	// chat's shape, {"type": "function", "function": {...}}).
	Tools             []Tool
	ToolChoice        string
	ToolChoiceName    string
	ParallelToolCalls bool
	// RawTools and RawToolChoice are tools and tool_choice as sent, for
	// the Response object.
	RawTools      []json.RawMessage
	RawToolChoice json.RawMessage
}

// Chat is the request's tool settings as a chat request's, whose
// ToolGuide and tool parsing the Responses API shares.
func (r *ResponsesRequest) Chat() *ChatRequest {
	return &ChatRequest{Model: r.Model, Tools: r.Tools, ToolChoice: r.ToolChoice, ToolChoiceName: r.ToolChoiceName,
		ParallelToolCalls: r.ParallelToolCalls}
}

// maxMetadata bounds metadata as OpenAI does: 16 pairs, keys of 64
// characters and values of 512.
const (
	maxMetadataPairs = 16
	maxMetadataKey   = 64
	maxMetadataValue = 512
)

var responsesFields = map[string]bool{}

func init() {
	for _, k := range []string{"model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "stream",
		"stream_options", "store", "metadata", "background", "previous_response_id", "text", "user", "service_tier",
		"include", "parallel_tool_calls", "tools", "tool_choice", "truncation", "prompt_cache_key", "safety_identifier",
		"top_logprobs", "reasoning", "max_tool_calls", "conversation", "prompt",
		"top_k", "min_p", "repetition_penalty", "frequency_penalty", "presence_penalty", "seed"} {
		responsesFields[k] = true
	}
}

var responsesRefused = map[string]string{
	"include":      "is not supported by this server: there is nothing to include.",
	"reasoning":    "is not supported by this server: its models do not reason.",
	"conversation": "is not supported by this server; continue a response with previous_response_id.",
	"prompt":       "is not supported by this server (no prompt templates); send input.",
	"top_logprobs": "is not supported by this server.",
}

// ParseResponses validates a Responses API body.
func ParseResponses(body []byte) (*ResponsesRequest, error) {
	f, err := parseObject(body)
	if err != nil {
		return nil, err
	}
	if err := f.checkKnown(responsesFields); err != nil {
		return nil, err
	}
	if raw, ok := f.m["top_logprobs"]; ok && string(bytes.TrimSpace(raw)) == "0" {
		delete(f.m, "top_logprobs")
	}
	if raw, ok := f.m["reasoning"]; ok && allNull(raw) {
		delete(f.m, "reasoning")
	}
	if err := f.refuse(responsesRefused); err != nil {
		return nil, err
	}
	r := &ResponsesRequest{Store: true, Format: FormatText}
	if r.Model, err = f.str("model", true); err != nil {
		return nil, err
	}
	if r.Model == "" {
		return nil, valueError("model", "it must not be empty.")
	}
	if r.Stream, err = f.boolean("stream"); err != nil {
		return nil, err
	}
	if raw, ok := f.m["stream_options"]; ok && !isNull(raw) {
		if !r.Stream {
			return nil, valueError("stream_options", "it is only allowed when 'stream' is true.")
		}
		var so struct {
			IncludeObfuscation *bool `json:"include_obfuscation"`
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if dec.Decode(&so) != nil {
			return nil, typeError("stream_options", "an object with the optional boolean include_obfuscation", raw)
		}
	}
	if raw, ok := f.m["store"]; ok && !isNull(raw) {
		if r.Store, err = f.boolean("store"); err != nil {
			return nil, err
		}
	}
	if r.Background, err = f.boolean("background"); err != nil {
		return nil, err
	}
	if r.Background && !r.Store {
		return nil, valueError("background", "a background response must be stored: 'store' cannot be false.")
	}
	if mt, err := f.integer("max_output_tokens", 1, math.MaxInt32); err != nil {
		return nil, err
	} else if mt != nil {
		n := int(*mt)
		r.Params.MaxTokens = &n
	}
	if r.Params.Temperature, err = f.number("temperature", 0, 2); err != nil {
		return nil, err
	}
	if r.Params.TopP, err = f.number("top_p", 0, 1); err != nil {
		return nil, err
	}
	if err := f.samplingExtras(&r.Params); err != nil {
		return nil, err
	}
	// seed, beyond OpenAI's Responses API as vLLM's takes it: reproducible
	// sampling, as on chat completions.
	if r.Params.Seed, err = f.integer("seed", math.MinInt64, math.MaxInt64); err != nil {
		return nil, err
	}
	if raw, ok := f.m["instructions"]; ok && !isNull(raw) {
		s, err := f.str("instructions", false)
		if err != nil {
			return nil, err
		}
		r.Instructions = &s
	}
	if r.PreviousResponseID, err = f.str("previous_response_id", false); err != nil {
		return nil, err
	}
	if raw, ok := f.m["user"]; ok && !isNull(raw) {
		s, err := f.str("user", false)
		if err != nil {
			return nil, err
		}
		r.User = &s
	}
	for _, name := range []string{"service_tier", "prompt_cache_key", "safety_identifier"} {
		if _, err := f.str(name, false); err != nil {
			return nil, err
		}
	}
	if err := f.responsesTools(r); err != nil {
		return nil, err
	}
	if _, err := f.integer("max_tool_calls", 1, math.MaxInt32); err != nil {
		return nil, err
	}
	if t, err := f.str("truncation", false); err != nil {
		return nil, err
	} else if t != "" && t != "disabled" {
		return nil, unsupported("truncation", "must be 'disabled': this server does not drop input to fit the context.")
	}
	if err := f.textFormat(r); err != nil {
		return nil, err
	}
	if r.Metadata, err = f.metadata(); err != nil {
		return nil, err
	}
	if r.Input, err = f.input(); err != nil {
		return nil, err
	}
	return r, nil
}

// allNull reports whether raw is null or an object whose members are all
// null ({"effort":null}: no reasoning asked for).
func allNull(raw json.RawMessage) bool {
	if isNull(raw) {
		return true
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return false
	}
	for _, v := range m {
		if !isNull(v) {
			return false
		}
	}
	return true
}

// textFormat reads text.format (text, the default; json_object; or
// json_schema, which become Guided) and accepts text.verbosity "medium"
// (the default).
func (f *fields) textFormat(r *ResponsesRequest) error {
	raw, ok := f.m["text"]
	if !ok || isNull(raw) {
		return nil
	}
	var text map[string]json.RawMessage
	if json.Unmarshal(raw, &text) != nil {
		return typeError("text", "an object", raw)
	}
	keys := make([]string, 0, len(text))
	for k := range text {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := text[k]
		switch k {
		case "format":
			if isNull(v) {
				continue
			}
			if err := r.textFormatType(v); err != nil {
				return err
			}
		case "verbosity":
			var s *string
			if json.Unmarshal(v, &s) != nil {
				return typeError("text.verbosity", "a string", v)
			}
			if s != nil && *s != "medium" {
				return unsupported("text.verbosity", "must be 'medium': this server cannot change its models' verbosity.")
			}
		default:
			return &RequestError{Message: "Unrecognized request argument supplied: text." + k, Param: "text." + k, Code: "unknown_parameter"}
		}
	}
	return nil
}

// textFormatType reads text.format: the Responses API's json_schema has
// name, schema and strict beside its type (no json_schema member).
func (r *ResponsesRequest) textFormatType(v json.RawMessage) error {
	var format map[string]json.RawMessage
	if json.Unmarshal(v, &format) != nil || format == nil {
		return typeError("text.format", "an object", v)
	}
	typ, err := (&fields{m: format}).str("type", true)
	if err != nil {
		return &RequestError{Message: "Missing required parameter: 'text.format.type'.", Param: "text.format.type", Code: "missing_required_parameter"}
	}
	switch typ {
	case FormatText:
	case FormatJSONObject:
		r.Params.Guided = json.RawMessage(`{"json_object":true}`)
	case FormatJSONSchema:
		if err := jsonSchemaFormat(format, "text.format", &r.Params.Guided); err != nil {
			return err
		}
	default:
		return valueError("text.format.type", fmt.Sprintf("'%s' is not one of 'text', 'json_object' or 'json_schema'.", typ))
	}
	r.Format = typ
	return nil
}

func (f *fields) metadata() (map[string]string, error) {
	raw, ok := f.m["metadata"]
	if !ok || isNull(raw) {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil, typeError("metadata", "an object", raw)
	}
	if len(m) > maxMetadataPairs {
		return nil, valueError("metadata", fmt.Sprintf("it has %d pairs; at most %d are allowed.", len(m), maxMetadataPairs))
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		var s string
		if json.Unmarshal(v, &s) != nil {
			return nil, typeError("metadata."+k, "a string", v)
		}
		if len(k) > maxMetadataKey || len(s) > maxMetadataValue {
			return nil, valueError("metadata", fmt.Sprintf("keys may be %d characters long and values %d.", maxMetadataKey, maxMetadataValue))
		}
		out[k] = s
	}
	return out, nil
}

// input reads input: a string (one user message) or a list of message
// items whose content is a string or a list of input_text and output_text
// parts.
func (f *fields) input() ([]ChatMessage, error) {
	raw, ok := f.m["input"]
	if !ok || isNull(raw) {
		return nil, &RequestError{Message: "Missing required parameter: 'input'.", Param: "input", Code: "missing_required_parameter"}
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []ChatMessage{{Role: "user", Content: s}}, nil
	}
	list, ok := jsonobj.Array(raw)
	if !ok {
		return nil, typeError("input", "a string or an array of input items", raw)
	}
	if len(list) == 0 {
		return nil, valueError("input", "it must contain at least one item.")
	}
	out := make([]ChatMessage, 0, len(list))
	for i, item := range list {
		m, err := inputItem(fmt.Sprintf("input[%d]", i), item)
		if err != nil {
			return nil, err
		}
		if n := len(out); n > 0 && len(m.ToolCalls) > 0 && len(out[n-1].ToolCalls) > 0 && out[n-1].Content == "" {
			out[n-1].ToolCalls = append(out[n-1].ToolCalls, m.ToolCalls...) // parallel calls: one assistant turn
			continue
		}
		out = append(out, m)
	}
	return out, nil
}

func inputItem(param string, raw json.RawMessage) (ChatMessage, error) {
	obj, ok := objectMap(raw)
	if !ok || obj == nil {
		return ChatMessage{}, typeError(param, "an object", raw)
	}
	f := &fields{m: obj}
	typ, err := f.str("type", false)
	if err != nil {
		return ChatMessage{}, typeError(param+".type", "a string", obj["type"])
	}
	switch typ {
	case "", "message":
	case "function_call", "function_call_output":
		return functionItem(param, typ, f)
	case "item_reference":
		return referenceItem(param, f)
	default:
		return ChatMessage{}, unsupported(param+".type", fmt.Sprintf("'%s' is not supported by this server: input items are messages, function_call, function_call_output and item_reference (no files).", typ))
	}
	for k := range obj {
		switch k {
		case "type", "role", "content", "id", "status":
		default:
			return ChatMessage{}, &RequestError{Message: fmt.Sprintf("Unrecognized request argument supplied: %s.%s", param, k), Param: param + "." + k, Code: "unknown_parameter"}
		}
	}
	role, err := f.str("role", true)
	if err != nil {
		return ChatMessage{}, &RequestError{Message: fmt.Sprintf("Missing required parameter: '%s.role'.", param), Param: param + ".role", Code: "missing_required_parameter"}
	}
	switch role {
	case "user", "system", "developer", "assistant":
	default:
		return ChatMessage{}, valueError(param+".role", fmt.Sprintf("'%s' is not one of 'user', 'system', 'developer', 'assistant'.", role))
	}
	content, err := itemContent(param+".content", obj["content"])
	if err != nil {
		return ChatMessage{}, err
	}
	return ChatMessage{Role: role, Content: content}, nil
}

// referenceItem reads an item_reference: the id of an assistant message
// of an earlier stored response (the gateway resolves it), as SDKs send
// a stored turn back instead of its text.
func referenceItem(param string, f *fields) (ChatMessage, error) {
	for k := range f.m {
		if k != "type" && k != "id" {
			return ChatMessage{}, &RequestError{Message: fmt.Sprintf("Unrecognized request argument supplied: %s.%s", param, k), Param: param + "." + k, Code: "unknown_parameter"}
		}
	}
	id, err := f.str("id", false)
	if err != nil {
		return ChatMessage{}, typeError(param+".id", "a string", f.m["id"])
	}
	if id == "" {
		return ChatMessage{}, &RequestError{Message: fmt.Sprintf("Missing required parameter: '%s.id'.", param), Param: param + ".id", Code: "missing_required_parameter"}
	}
	return ChatMessage{Role: "assistant", Ref: id}, nil
}

func itemContent(param string, raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", &RequestError{Message: fmt.Sprintf("Missing required parameter: '%s'.", param), Param: param, Code: "missing_required_parameter"}
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []map[string]json.RawMessage
	if json.Unmarshal(raw, &parts) != nil {
		return "", typeError(param, "a string or an array of content parts", raw)
	}
	var b bytes.Buffer
	for i, p := range parts {
		pp := fmt.Sprintf("%s[%d]", param, i)
		var typ, text string
		if json.Unmarshal(p["type"], &typ) != nil {
			return "", typeError(pp+".type", "a string", p["type"])
		}
		switch typ {
		case "input_text", "output_text":
		case "refusal":
			continue
		default:
			return "", unsupported(pp+".type", fmt.Sprintf("'%s' is not supported by this server (text only: input_text, output_text).", typ))
		}
		if json.Unmarshal(p["text"], &text) != nil {
			return "", typeError(pp+".text", "a string", p["text"])
		}
		b.WriteString(text)
	}
	return b.String(), nil
}

// Messages is the conversation a response answers: the instructions (as
// a system message), the conversation of the response it continues
// (history), then its own input.
func (r *ResponsesRequest) Messages(history []ChatMessage) []ChatMessage {
	out := make([]ChatMessage, 0, 1+len(history)+len(r.Input))
	if r.Instructions != nil && *r.Instructions != "" {
		out = append(out, ChatMessage{Role: "system", Content: *r.Instructions})
	}
	out = append(out, history...)
	return append(out, r.Input...)
}
