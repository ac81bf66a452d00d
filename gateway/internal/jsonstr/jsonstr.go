// Package jsonstr is the gateway's one JSON string escaper: Append writes
// strings exactly as encoding/json does, AppendMinimal as Triton's
// rapidjson does, both without reflection or allocation (the hot path of
// every relayed response).
package jsonstr

import (
	"unicode/utf8"
	"unsafe"
)

// Append appends s as a JSON string, byte for byte what
// encoding/json.Marshal gives for a Go string: HTML-sensitive <, > and &
// escaped as \u003c, \u003e, \u0026, control characters as \b \f \n \r \t
// or \u00XX, invalid UTF-8 replaced by \ufffd, and U+2028/U+2029 escaped.
// It does not allocate beyond growing dst.
func Append(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if htmlSafe[b] {
				i++
				continue
			}
			dst = appendEscaped(append(dst, s[start:i]...), b, hexDigits)
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendBytes is Append for text held in a byte slice (a
// BYTES tensor element), without copying it into a string first.
func AppendBytes(dst, b []byte) []byte {
	// The string view does not outlive this call and b is not modified
	// during it.
	return Append(dst, unsafe.String(unsafe.SliceData(b), len(b)))
}

const hexDigits = "0123456789abcdef"

// htmlSafe[b] is true for the ASCII bytes encoding/json writes unescaped
// (with its default HTML escaping).
var htmlSafe = func() (t [utf8.RuneSelf]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		switch b {
		case '"', '\\', '<', '>', '&':
		default:
			t[b] = true
		}
	}
	return t
}()

// AppendMinimal appends s as a JSON string escaped as little as JSON
// allows, as rapidjson's Writer (Triton's HTTP server) writes strings:
// '"' and '\\' escaped, control characters as \b \t \n \f \r or \u00XX
// (upper-case hex), every other byte as it is (UTF-8 is not checked). It
// is for answers that must match Triton's byte for byte; Append is for
// everything else.
func AppendMinimal(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = appendEscaped(append(dst, s[start:i]...), c, "0123456789ABCDEF")
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendEscaped appends the escape of b, a quote, a backslash or a control
// character: its short form where JSON has one, else \u00XX in digits.
func appendEscaped(dst []byte, b byte, digits string) []byte {
	switch b {
	case '\\', '"':
		return append(dst, '\\', b)
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	return append(dst, '\\', 'u', '0', '0', digits[b>>4], digits[b&0xF])
}
