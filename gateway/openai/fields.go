package openai

// The request object as the parsers read it: its fields, each read once
// and checked for its type and range, with errors that name the field.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"unicode/utf8"

	"github.com/streamgate/streamgate/gateway/internal/jsonobj"
	"github.com/streamgate/streamgate/gateway/internal/nearest"
)

// fields is a decoded request object with a record of what was used.
type fields struct {
	m map[string]json.RawMessage
}

func parseObject(body []byte) (*fields, error) {
	f := &fields{m: make(map[string]json.RawMessage, 8)}
	err := jsonobj.Each(body, func(k []byte, v json.RawMessage) { f.m[key(k)] = v })
	if err != nil {
		if se, ok := err.(*jsonobj.SyntaxError); ok {
			return nil, &RequestError{Message: fmt.Sprintf("We could not parse the JSON body of your request: %s at line %d, column %d (offset %d).", se.Msg, se.Line, se.Column, se.Offset), Code: "invalid_json"}
		}
		return nil, &RequestError{Message: "The request body must be a JSON object.", Code: "invalid_json"}
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, &RequestError{Message: "The request body must be a JSON object.", Code: "invalid_json"}
	}
	return f, nil
}

// keys are the member names the parsers know, each its own value: key
// gives a request's fields these strings rather than a new one per
// member and request.
var keys = func() map[string]string {
	m := map[string]string{}
	for _, set := range []map[string]bool{chatFields, completionFields} {
		for k := range set {
			m[k] = k
		}
	}
	for _, k := range []string{"role", "content", "name", "refusal", "parsed", "tool_calls", "tool_call_id", "function_call", "audio", "type", "text"} {
		m[k] = k
	}
	return m
}()

// key is the member name b as a string: one of keys when it is known.
func key(b []byte) string {
	if k, ok := keys[string(b)]; ok {
		return k
	}
	return string(b)
}

// checkKnown refuses fields that are neither accepted nor known.
func (f *fields) checkKnown(accepted map[string]bool) error {
	var unknown []string
	for k := range f.m {
		if !accepted[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	msg := "Unrecognized request argument supplied: " + unknown[0]
	names := make([]string, 0, len(accepted))
	for k, ok := range accepted {
		if ok {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	if alt := nearest.Name(unknown[0], names); alt != "" {
		msg += "; did you mean '" + alt + "'?"
	}
	return &RequestError{Message: msg, Param: unknown[0], Code: "unknown_parameter"}
}

func isNull(raw json.RawMessage) bool { return raw == nil || string(bytes.TrimSpace(raw)) == "null" }

func typeError(param, want string, raw json.RawMessage) error {
	got := "a string"
	switch c := bytes.TrimSpace(raw); {
	case len(c) == 0:
		got = "nothing"
	case c[0] == '{':
		got = "an object"
	case c[0] == '[':
		got = "an array"
	case c[0] == 't' || c[0] == 'f':
		got = "a boolean"
	case c[0] == 'n':
		got = "null"
	case c[0] != '"':
		got = "a number"
	}
	return &RequestError{Message: fmt.Sprintf("Invalid type for '%s': expected %s, but got %s instead.", param, want, got), Param: param, Code: "invalid_type"}
}

func valueError(param, msg string) error {
	return &RequestError{Message: fmt.Sprintf("Invalid value for '%s': %s", param, msg), Param: param, Code: "invalid_value"}
}

func unsupported(param, why string) error {
	return &RequestError{Message: fmt.Sprintf("Unsupported parameter: '%s' %s", param, why), Param: param, Code: "unsupported_parameter"}
}

// The values of a request are read as encoding/json reads them, with
// direct paths for their common forms: every request has a model, most
// a max_tokens, a stream flag and plain-text messages.

// unquote is json.Unmarshal of raw into a string; ok is false where that
// fails. A string without escapes, control characters or invalid UTF-8 is
// taken as it is.
func unquote(raw []byte) (s string, ok bool) {
	if n := len(raw); n >= 2 && raw[0] == '"' && raw[n-1] == '"' && plain(raw[1:n-1]) {
		return string(raw[1 : n-1]), true
	}
	return decode[string](raw)
}

// decode is json.Unmarshal of raw into a T; ok is false where that
// fails. (Apart from its callers' direct paths, whose values then need
// not live on the heap.)
func decode[T any](raw []byte) (v T, ok bool) {
	return v, json.Unmarshal(raw, &v) == nil
}

// plain reports whether b is the inside of a JSON string that means
// itself: no quote, backslash or control character, valid UTF-8.
func plain(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return utf8.Valid(b)
}

// unmarshalBool is json.Unmarshal of raw into a bool; ok is false where
// that fails.
func unmarshalBool(raw []byte) (b, ok bool) {
	switch string(raw) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return decode[bool](raw)
}

// smallInt is raw as an integer when it is a plain JSON integer of at most
// 18 digits (which no int64 overflows); ok is false for anything else.
func smallInt(raw []byte) (v int64, ok bool) {
	digits := raw
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 18 || (digits[0] == '0' && len(digits) > 1) {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	if len(digits) < len(raw) {
		v = -v
	}
	return v, true
}

func (f *fields) str(name string, required bool) (string, error) {
	raw, ok := f.m[name]
	if !ok || isNull(raw) {
		if required {
			return "", &RequestError{Message: fmt.Sprintf("Missing required parameter: '%s'.", name), Param: name, Code: "missing_required_parameter"}
		}
		return "", nil
	}
	s, ok := unquote(raw)
	if !ok {
		return "", typeError(name, "a string", raw)
	}
	return s, nil
}

func (f *fields) boolean(name string) (bool, error) {
	raw, ok := f.m[name]
	if !ok || isNull(raw) {
		return false, nil
	}
	b, ok := unmarshalBool(raw)
	if !ok {
		return false, typeError(name, "a boolean", raw)
	}
	return b, nil
}

func (f *fields) number(name string, lo, hi float64) (*float64, error) {
	raw, ok := f.m[name]
	if !ok || isNull(raw) {
		return nil, nil
	}
	var v float64
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, typeError(name, "a decimal", raw)
	}
	if v < lo || v > hi || math.IsNaN(v) {
		return nil, valueError(name, fmt.Sprintf("%g is out of range; it must be between %g and %g.", v, lo, hi))
	}
	return &v, nil
}

func (f *fields) integer(name string, lo, hi int64) (*int64, error) {
	raw, ok := f.m[name]
	if !ok || isNull(raw) {
		return nil, nil
	}
	if v, ok := smallInt(raw); ok {
		if v < lo || v > hi {
			return nil, valueError(name, fmt.Sprintf("%d is out of range; it must be between %d and %d.", v, lo, hi))
		}
		return &v, nil
	}
	var n json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if c := bytes.TrimSpace(raw); len(c) > 0 && c[0] == '"' { // json.Number accepts "5"
		return nil, typeError(name, "an integer", raw)
	}
	if err := dec.Decode(&n); err != nil {
		return nil, typeError(name, "an integer", raw)
	}
	v, err := n.Int64()
	if err != nil {
		return nil, typeError(name, "an integer", raw)
	}
	if v < lo || v > hi {
		return nil, valueError(name, fmt.Sprintf("%d is out of range; it must be between %d and %d.", v, lo, hi))
	}
	return &v, nil
}
