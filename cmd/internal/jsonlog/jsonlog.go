// Package jsonlog is the process's JSON log handler: the lines of
// slog.NewJSONHandler, byte for byte, with durations written as Go writes
// them ("1.5ms": DurationText). A record whose attributes are all
// strings, integers, booleans and durations, as every request's access
// line is, is formatted in one pass of appends; anything else (groups,
// handlers with attributes, other kinds) goes through slog's own handler.
//
// Why: the gateway writes an access line at the end of every request,
// and for a detached event stream that end runs on the upstream reader
// that relays every other stream on its connection. slog's generic path
// (a ReplaceAttr call per attribute, the level marshalled through
// encoding/json) cost about twice this one.
package jsonlog

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Handler writes JSON log lines to w. It is safe for concurrent use if w
// is (each line is one Write).
type Handler struct {
	w     io.Writer
	level slog.Leveler
	slow  slog.Handler // slog's, for the records the fast path does not take
}

// New returns a Handler writing records at level and above (nil:
// slog.LevelInfo) to w, which must take concurrent Writes.
func New(w io.Writer, level slog.Leveler) *Handler {
	return &Handler{w: w, level: level,
		slow: slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: DurationText})}
}

// DurationText writes a time.Duration as its String, not as nanoseconds
// (a slog.HandlerOptions.ReplaceAttr).
func DurationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// Enabled reports whether l is at the handler's level or above.
func (h *Handler) Enabled(_ context.Context, l slog.Level) bool {
	min := slog.LevelInfo
	if h.level != nil {
		min = h.level.Level()
	}
	return l >= min
}

// WithAttrs and WithGroup return slog's handler with them: such loggers
// write few lines.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler { return h.slow.WithAttrs(as) }
func (h *Handler) WithGroup(name string) slog.Handler    { return h.slow.WithGroup(name) }

// Handle writes r as one line.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	bp := bufs.Get().(*[]byte)
	defer bufs.Put(bp)
	b, ok := appendRecord((*bp)[:0], r)
	if cap(b) <= maxBuf {
		*bp = b
	}
	if !ok {
		return h.slow.Handle(ctx, r)
	}
	_, err := h.w.Write(b)
	return err
}

// maxBuf is the largest line buffer kept for the next line.
const maxBuf = 16 << 10

var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// appendRecord appends r's line as slog's JSON handler writes it and
// reports true, or reports false when r has what only slog's handler
// writes: a zero or out-of-range time, an attribute with no key, a group
// or a value of another kind.
func appendRecord(b []byte, r slog.Record) ([]byte, bool) {
	if r.Time.IsZero() {
		return b, false
	}
	t := r.Time.Round(0)
	if y := t.Year(); y < 0 || y >= 10000 {
		return b, false
	}
	b = append(b, `{"time":"`...)
	b = t.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","level":"`...)
	b = append(b, r.Level.String()...) // names and digits: nothing to escape
	b = append(b, `","msg":`...)
	b = appendString(b, r.Message)
	ok := true
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "" {
			ok = false
			return false
		}
		b = append(b, ',')
		b = appendString(b, a.Key)
		b = append(b, ':')
		switch v := a.Value; v.Kind() {
		case slog.KindString:
			b = appendString(b, v.String())
		case slog.KindInt64:
			b = strconv.AppendInt(b, v.Int64(), 10)
		case slog.KindUint64:
			b = strconv.AppendUint(b, v.Uint64(), 10)
		case slog.KindBool:
			b = strconv.AppendBool(b, v.Bool())
		case slog.KindDuration:
			b = appendString(b, v.Duration().String())
		default:
			ok = false
		}
		return ok
	})
	return append(b, '}', '\n'), ok
}

// appendString appends s quoted as slog's JSON handler quotes it: as
// encoding/json does but without escaping <, > and &.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

const hex = "0123456789abcdef"
