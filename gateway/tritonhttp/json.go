package tritonhttp

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/streamgate/streamgate/gateway/internal/jsonobj"
)

// Reading: the accessors of Triton's JSON library (triton_json.h), with its
// texts, over values decoded with json.Number.

// decode decodes one JSON value (already known to be valid) with numbers
// kept as json.Number.
func decode(raw json.RawMessage) any {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil
	}
	return v
}

// object is a JSON object's members in order.
type object []jsonobj.Member

// asObject returns v's members; nil when v is no object (Triton's Find on a
// non-object finds nothing).
func asObject(v json.RawMessage) object {
	ms, err := jsonobj.Members(v)
	if err != nil || len(bytes.TrimSpace(v)) == 0 {
		return nil
	}
	return ms
}

// find returns the first member named key, as rapidjson's FindMember does.
func (o object) find(key string) (json.RawMessage, bool) {
	for _, m := range o {
		if m.Key == key {
			return m.Value, true
		}
	}
	return nil, false
}

func notMember(name string) *Error {
	return invalid("attempt to access non-existing object member '%s'", name)
}

var (
	errNotString = invalid("attempt to access JSON non-string as string")
	errNotBool   = invalid("attempt to access JSON non-boolean as boolean")
	errNotInt    = invalid("attempt to access JSON non-signed-integer as signed-integer")
	errNotUint   = invalid("attempt to access JSON non-unsigned-integer as unsigned-integer")
	errNotNumber = invalid("attempt to access JSON non-number as double")
	errNotArray  = invalid("attempt to access JSON non-array as array")
)

func asString(v any) (string, *Error) {
	if s, ok := v.(string); ok {
		return s, nil
	}
	return "", errNotString
}

func asBool(v any) (bool, *Error) {
	if b, ok := v.(bool); ok {
		return b, nil
	}
	return false, errNotBool
}

// isInteger reports whether n is an integer literal, which rapidjson keeps
// as an integer (a fraction or exponent makes it a double).
func isInteger(n json.Number) bool { return !strings.ContainsAny(string(n), ".eE") }

func asInt(v any) (int64, *Error) {
	if n, ok := v.(json.Number); ok && isInteger(n) {
		if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
			return i, nil
		}
	}
	return 0, errNotInt
}

func asUint(v any) (uint64, *Error) {
	if n, ok := v.(json.Number); ok && isInteger(n) {
		s := string(n)
		if s == "-0" {
			s = "0"
		}
		if u, err := strconv.ParseUint(s, 10, 64); err == nil {
			return u, nil
		}
	}
	return 0, errNotUint
}

func asDouble(v any) (float64, *Error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, errNotNumber
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil { // only range errors: the syntax was checked
		return 0, invalid("Number too big to be stored in double.")
	}
	return f, nil
}

// memberAsArray is Triton's MemberAsArray: the member's elements, undecoded.
func (o object) memberAsArray(name string) ([]json.RawMessage, *Error) {
	raw, ok := o.find(name)
	if !ok {
		return nil, notMember(name)
	}
	var elems []json.RawMessage
	if json.Unmarshal(raw, &elems) != nil {
		return nil, errNotArray
	}
	return elems, nil
}

// memberAsString is Triton's MemberAsString.
func (o object) memberAsString(name string) (string, *Error) {
	raw, ok := o.find(name)
	if !ok {
		return "", notMember(name)
	}
	return asString(decode(raw))
}

// Writing: what rapidjson's Writer produces.

// appendString appends s as rapidjson writes a string: '"' and '\\'
// escaped, control characters as \b \t \n \f \r or \u00XX (upper-case
// hex), every other byte as it is (UTF-8 is not checked).
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			const hex = "0123456789ABCDEF"
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendDouble appends f as rapidjson's Writer does (its dtoa with the
// default 324 decimal places): the shortest digits that read back as f,
// laid out as 123.0, 0.001, 1.5e-7 or 1e30. f must be finite.
func appendDouble(dst []byte, f float64) []byte {
	if f == 0 {
		if math.Signbit(f) {
			dst = append(dst, '-')
		}
		return append(dst, "0.0"...)
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// Shortest digits d1.d2d3...e±X: digits "d1d2d3...", k = X - (len-1)
	// so that f = digits × 10^k.
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	mant, exp, _ := bytes.Cut(e, []byte{'e'})
	x, _ := strconv.Atoi(string(exp))
	digits := make([]byte, 0, len(mant))
	for _, c := range mant {
		if c != '.' {
			digits = append(digits, c)
		}
	}
	length := len(digits)
	k := x - (length - 1)
	kk := length + k // 10^(kk-1) <= f < 10^kk
	switch {
	case k >= 0 && kk <= 21: // 1234e7 -> 12340000000.0
		dst = append(dst, digits...)
		for range k {
			dst = append(dst, '0')
		}
		return append(dst, '.', '0')
	case kk > 0 && kk <= 21: // 1234e-2 -> 12.34
		dst = append(dst, digits[:kk]...)
		dst = append(dst, '.')
		return append(dst, digits[kk:]...)
	case kk > -6 && kk <= 0: // 1234e-6 -> 0.001234
		dst = append(dst, '0', '.')
		for range -kk {
			dst = append(dst, '0')
		}
		return append(dst, digits...)
	case length == 1: // 1e30
		dst = append(dst, digits[0], 'e')
		return strconv.AppendInt(dst, int64(kk-1), 10)
	}
	// 1234e30 -> 1.234e33
	dst = append(dst, digits[0], '.')
	dst = append(dst, digits[1:]...)
	dst = append(dst, 'e')
	return strconv.AppendInt(dst, int64(kk-1), 10)
}
