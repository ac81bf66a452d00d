// Package jsonobj decodes a JSON object into its members, in order and
// each value left undecoded, with the position of the first bad byte when
// the input is not JSON: the first step of reading every request body and
// WebSocket frame. Start with Members.
package jsonobj

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// ErrNotObject is valid JSON that is not an object.
var ErrNotObject = errors.New("not a JSON object")

// Member is one key of a JSON object with its undecoded value.
type Member struct {
	Key   string
	Value json.RawMessage
}

// Members decodes a JSON object into its members in order. An empty or
// all-whitespace body is an empty object. Decoding errors are
// *SyntaxError; valid JSON that is not an object gives ErrNotObject.
func Members(body []byte) ([]Member, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, nil
	}
	if json.Valid(body) {
		return validMembers(body)
	}
	return decoderMembers(body)
}

// decoderMembers is Members through a json.Decoder, which places the
// first bad byte of an invalid body.
func decoderMembers(body []byte) ([]Member, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, syntaxError(body, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		if !json.Valid(body) {
			return nil, syntaxError(body, json.Unmarshal(body, new(any)))
		}
		return nil, ErrNotObject
	}
	var out []Member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, syntaxError(body, err)
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, syntaxError(body, err)
		}
		out = append(out, Member{Key: key, Value: raw})
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, syntaxError(body, err)
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		if err != nil {
			return nil, syntaxError(body, err)
		}
		rest := body[end:]
		skip := len(rest) - len(bytes.TrimLeft(rest, " \t\r\n"))
		return nil, syntaxError(body, &json.SyntaxError{Offset: end + int64(skip) + 1})
	}
	return out, nil
}

// validMembers is Members for a body json.Valid accepts: its members are
// found in one pass, without a decoder's tokens and copies (the second
// pass of every valid request body, where the decoder cost more than the
// validation). The values share one copy of body, each capped so that
// appending to it copies.
func validMembers(body []byte) ([]Member, error) {
	out, ok := Object(bytes.Clone(body))
	if !ok {
		return nil, ErrNotObject
	}
	return out, nil
}

// Object is the members of obj, in order, found in one pass without
// validating: obj must be valid JSON, such as a value Members returned.
// The values are slices of obj (not copies), each capped so that
// appending to it copies. ok is false when obj is not an object.
func Object(obj []byte) (members []Member, ok bool) {
	ok = EachMember(obj, func(key []byte, value json.RawMessage) {
		members = append(members, Member{Key: string(key), Value: value})
	})
	return members, ok
}

// EachMember calls fn with each member of obj, in order, as Object finds
// them, for a caller that keeps no list of them and need not allocate
// the keys: key is the member's name, decoded (a slice of obj where it
// has no escapes), and fn must not keep it; value is a capped slice of
// obj. ok is false when obj is not an object.
func EachMember(obj []byte, fn func(key []byte, value json.RawMessage)) (ok bool) {
	i := skipSpace(obj, 0)
	if i == len(obj) || obj[i] != '{' {
		return false
	}
	for i = skipSpace(obj, i+1); obj[i] != '}'; {
		end := stringEnd(obj, i)
		key := obj[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 || !utf8.Valid(key) {
			if key, ok = unquote(obj[i:end]); !ok {
				return false // not reached: obj is valid
			}
		}
		i = skipSpace(obj, skipSpace(obj, end)+1) // past the colon
		end = valueEnd(obj, i)
		fn(key, obj[i:end:end])
		if i = skipSpace(obj, end); obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
	return true
}

// Each is Members for a caller that keeps no list of the members: fn
// gets each, as EachMember gives them, of a copy of body.
func Each(body []byte, fn func(key []byte, value json.RawMessage)) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if json.Valid(body) {
		if !EachMember(bytes.Clone(body), fn) {
			return ErrNotObject
		}
		return nil
	}
	members, err := decoderMembers(body)
	for _, m := range members {
		fn([]byte(m.Key), m.Value)
	}
	return err
}

// unquote decodes the JSON string s, which has escapes or invalid UTF-8,
// as encoding/json does.
func unquote(s []byte) ([]byte, bool) {
	var k string
	if json.Unmarshal(s, &k) != nil {
		return nil, false
	}
	return []byte(k), true
}

// Array is the elements of arr, in order, found as Object finds members:
// arr must be valid JSON, and the elements are capped slices of it. ok is
// false when arr is not an array.
func Array(arr []byte) (elems []json.RawMessage, ok bool) {
	i := skipSpace(arr, 0)
	if i == len(arr) || arr[i] != '[' {
		return nil, false
	}
	out := []json.RawMessage{}
	for i = skipSpace(arr, i+1); arr[i] != ']'; {
		end := valueEnd(arr, i)
		out = append(out, arr[i:end:end])
		if i = skipSpace(arr, end); arr[i] == ',' {
			i = skipSpace(arr, i+1)
		}
	}
	return out, true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd is the index after the valid JSON string starting at b[i].
func stringEnd(b []byte, i int) int {
	for i++; ; i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
}

// valueEnd is the index after the valid JSON value starting at b[i].
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for {
			switch b[i] {
			case '"':
				i = stringEnd(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
	}
	for ; i < len(b); i++ { // a number, true, false or null
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return i
		}
	}
	return i
}

// SyntaxError is a body that is not valid JSON, with where it went wrong.
type SyntaxError struct {
	Offset       int64 // 0-based byte offset of the first bad byte, len(body) if truncated
	Line, Column int   // 1-based, column counted in bytes
	Msg          string
}

// Error is the message Triton gives for a body that is not JSON, with the
// position.
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("failed to parse the request JSON buffer: %s at line %d, column %d (offset %d)", e.Msg, e.Line, e.Column, e.Offset)
}

// syntaxError describes why body is not valid JSON: where the first bad
// byte is (or the end, for truncated input). err is the decoding error seen,
// used only when body turns out to be valid JSON after all (trailing data
// found by a streaming decoder, or a type error).
func syntaxError(body []byte, err error) *SyntaxError {
	idx := int64(len(body))
	msg := "unexpected end of JSON input"
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	if uerr := json.Unmarshal(body, new(any)); errors.As(uerr, &se) {
		err = uerr
	}
	switch {
	case errors.As(err, &se):
		msg = strings.TrimPrefix(se.Error(), "json: ")
		if se.Offset == int64(len(body)) && strings.HasPrefix(msg, "invalid character ' '") && !bytes.HasSuffix(body, []byte(" ")) {
			// encoding/json reports truncation inside a literal as a space
			// fed at the end of input.
			msg = "unexpected end of JSON input"
		}
		if msg != "unexpected end of JSON input" && se.Offset > 0 {
			idx = se.Offset - 1 // Offset counts the offending byte
		}
		if msg == "" {
			msg = "unexpected data after the top-level value"
		}
	case errors.As(err, &te):
		idx, msg = te.Offset, strings.TrimPrefix(te.Error(), "json: ")
	}
	idx = min(max(idx, 0), int64(len(body)))
	line := 1 + bytes.Count(body[:idx], []byte{'\n'})
	col := int(idx) - bytes.LastIndexByte(body[:idx], '\n')
	return &SyntaxError{Offset: idx, Line: line, Column: col, Msg: msg}
}
