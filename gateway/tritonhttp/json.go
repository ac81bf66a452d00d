package tritonhttp

import (
	"bytes"
	"math"
	"strconv"
	"strings"

	"github.com/streamgate/streamgate/gateway/internal/jsonstr"
)

// Reading: the accessors of Triton's JSON library (triton_json.h), with its
// texts, over the nodes of parseTree.

// find returns the first member of object n named key, as rapidjson's
// FindMember does; nothing when n is no object (Triton's Find on a
// non-object finds nothing).
func (n node) find(key string) (node, bool) {
	if n.kind != '{' {
		return node{}, false
	}
	for i := 0; i+1 < len(n.kids); i += 2 {
		if n.kids[i].s == key {
			return n.kids[i+1], true
		}
	}
	return node{}, false
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

func asString(n node) (string, *Error) {
	if n.kind == '"' {
		return n.s, nil
	}
	return "", errNotString
}

func asBool(n node) (bool, *Error) {
	switch n.kind {
	case 't':
		return true, nil
	case 'f':
		return false, nil
	}
	return false, errNotBool
}

// isInteger reports whether a number literal is an integer, which
// rapidjson keeps as an integer (a fraction or exponent makes a double).
func isInteger(lit string) bool { return !strings.ContainsAny(lit, ".eE") }

func asInt(n node) (int64, *Error) {
	if n.kind == '0' && isInteger(n.s) {
		if i, err := strconv.ParseInt(n.s, 10, 64); err == nil {
			return i, nil
		}
	}
	return 0, errNotInt
}

func asUint(n node) (uint64, *Error) {
	if n.kind == '0' && isInteger(n.s) {
		s := n.s
		if s == "-0" {
			s = "0"
		}
		if u, err := strconv.ParseUint(s, 10, 64); err == nil {
			return u, nil
		}
	}
	return 0, errNotUint
}

func asDouble(n node) (float64, *Error) {
	if n.kind != '0' {
		return 0, errNotNumber
	}
	f, err := strconv.ParseFloat(n.s, 64)
	if err != nil { // only range errors: the syntax was checked
		return 0, invalid("Number too big to be stored in double.")
	}
	return f, nil
}

// memberAsArray is Triton's MemberAsArray: the member's elements.
func (n node) memberAsArray(name string) ([]node, *Error) {
	v, ok := n.find(name)
	if !ok {
		return nil, notMember(name)
	}
	if v.kind != '[' {
		return nil, errNotArray
	}
	return v.kids, nil
}

// memberAsString is Triton's MemberAsString.
func (n node) memberAsString(name string) (string, *Error) {
	v, ok := n.find(name)
	if !ok {
		return "", notMember(name)
	}
	return asString(v)
}

// Writing: what rapidjson's Writer produces.

// appendString appends s as rapidjson writes a string
// (jsonstr.AppendMinimal).
func appendString(dst []byte, s string) []byte { return jsonstr.AppendMinimal(dst, s) }

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
