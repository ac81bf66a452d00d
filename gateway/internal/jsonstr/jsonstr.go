// Package jsonstr appends JSON strings exactly as encoding/json writes them,
// without its reflection and allocation: the hot path of every relayed
// response.
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
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
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
