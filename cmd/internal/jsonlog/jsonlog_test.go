package jsonlog

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// slogLine is what slog's own JSON handler, with durations as text,
// writes for r.
func slogLine(t testing.TB, r slog.Record) string {
	t.Helper()
	var out bytes.Buffer
	h := slog.NewJSONHandler(&out, &slog.HandlerOptions{ReplaceAttr: DurationText, Level: slog.LevelDebug})
	if err := h.Handle(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// line is what New's handler writes for r, and whether its fast path
// wrote it.
func line(t testing.TB, r slog.Record) (string, bool) {
	t.Helper()
	var out bytes.Buffer
	h := New(&out, slog.LevelDebug)
	if err := h.Handle(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	_, fast := appendRecord(nil, r)
	return out.String(), fast
}

func record(at time.Time, level slog.Level, msg string, as ...slog.Attr) slog.Record {
	r := slog.NewRecord(at, level, msg, 0)
	r.AddAttrs(as...)
	return r
}

var (
	now = time.Now()
	utc = time.Date(2026, 11, 28, 16, 30, 0, 120_000_000, time.UTC)
)

// TestSameAsSlog: every line, fast or not, is slog's byte for byte.
func TestSameAsSlog(t *testing.T) {
	type logValuer struct{ slog.LogValuer }
	cases := []struct {
		name string
		r    slog.Record
		fast bool
	}{
		{"access line", record(now, slog.LevelInfo, "request",
			slog.String("method", "POST"), slog.String("path", "/v2/models/repeat_int32/generate_stream"),
			slog.String("route", "/v2/models/{model}/generate_stream"), slog.Int("status", 200),
			slog.String("model", "repeat_int32"), slog.Int("tokens", 20), slog.Duration("duration", 1003*time.Millisecond+7*time.Microsecond),
			slog.String("request_id", "req_1x"), slog.String("trace_id", "0af7651916cd43dd8448eb211c80319c"), slog.String("span_id", "b7ad6b7169203331")), true},
		{"no attributes", record(utc, slog.LevelWarn, "draining"), true},
		{"whole seconds", record(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), slog.LevelError, "x"), true},
		{"levels between", record(now, slog.LevelInfo+2, "m", slog.Bool("ok", true), slog.Bool("no", false)), true},
		{"debug minus", record(now, slog.LevelDebug-4, "m", slog.Uint64("n", 1<<63), slog.Int64("neg", -5)), true},
		{"escapes", record(now, slog.LevelInfo, "a\"b\\c\nd\re\tf\x00g\x1fh<i>&j\x7f",
			slog.String("k\"ey\u2028", "bad \xff utf8, \u2029, é, 日本, 😀, \b\f")), true},
		{"micro and zero durations", record(now, slog.LevelInfo, "m", slog.Duration("d", 1500*time.Nanosecond), slog.Duration("z", 0)), true},
		{"zero time", record(time.Time{}, slog.LevelInfo, "m", slog.String("a", "b")), false},
		{"year 10000", record(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), slog.LevelInfo, "m"), false},
		{"float", record(now, slog.LevelInfo, "m", slog.Float64("f", 0.5)), false},
		{"time value", record(now, slog.LevelInfo, "m", slog.Time("t", utc)), false},
		{"any", record(now, slog.LevelInfo, "m", slog.Any("err", context.Canceled)), false},
		{"group", record(now, slog.LevelInfo, "m", slog.Group("g", slog.Int("a", 1))), false},
		{"empty group", record(now, slog.LevelInfo, "m", slog.Group("g")), true},
		{"empty key", record(now, slog.LevelInfo, "m", slog.Int("", 1)), false},
		{"log valuer", record(now, slog.LevelInfo, "m", slog.Any("v", logValuer{})), false},
		{"many attributes", record(now, slog.LevelInfo, "m", slog.Int("a", 1), slog.Int("b", 2), slog.Int("c", 3),
			slog.Int("d", 4), slog.Int("e", 5), slog.Int("f", 6), slog.Int("g", 7)), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := slogLine(t, c.r)
			got, fast := line(t, c.r)
			if got != want {
				t.Errorf("got  %q\nwant %q", got, want)
			}
			if fast != c.fast {
				t.Errorf("fast path: %v, want %v", fast, c.fast)
			}
		})
	}
}

// TestWithAttrsAndGroups: derived handlers write what slog's do, and
// the level is the handler's.
func TestWithAttrsAndGroups(t *testing.T) {
	var got, want bytes.Buffer
	h := New(&got, nil)
	s := slog.NewJSONHandler(&want, &slog.HandlerOptions{ReplaceAttr: DurationText})
	ctx := context.Background()
	for _, h := range []slog.Handler{h, s} {
		_ = h.WithAttrs([]slog.Attr{slog.String("component", "gateway")}).Handle(ctx, record(utc, slog.LevelInfo, "up", slog.Duration("took", time.Second)))
		_ = h.WithGroup("g").Handle(ctx, record(utc, slog.LevelInfo, "grouped", slog.Int("a", 1)))
		if h.Enabled(ctx, slog.LevelDebug) || !h.Enabled(ctx, slog.LevelInfo) {
			t.Errorf("%T: debug enabled or info not", h)
		}
	}
	if got.String() != want.String() {
		t.Errorf("got  %q\nwant %q", got.String(), want.String())
	}
	if strings.Count(got.String(), "\n") != 2 {
		t.Errorf("want 2 lines: %q", got.String())
	}
}

// FuzzSameAsSlog: any message, key and string value is written as slog
// writes it.
func FuzzSameAsSlog(f *testing.F) {
	f.Add("request", "path", "/v1/chat/completions")
	f.Add("\xed\xa0\x80", "\u2028", "\x00<>&\"\\")
	f.Fuzz(func(t *testing.T, msg, key, val string) {
		if key == "" {
			key = "k"
		}
		r := record(utc, slog.LevelInfo, msg, slog.String(key, val), slog.Int("n", len(val)))
		if got, want := func() string { s, _ := line(t, r); return s }(), slogLine(t, r); got != want {
			t.Errorf("got  %q\nwant %q", got, want)
		}
	})
}

// BenchmarkAccessLine: the access line of a request, through this
// handler and through slog's.
func BenchmarkAccessLine(b *testing.B) {
	r := record(now, slog.LevelInfo, "request",
		slog.String("method", "POST"), slog.String("path", "/v2/models/repeat_int32/generate_stream"),
		slog.String("route", "/v2/models/{model}/generate_stream"), slog.Int("status", 200),
		slog.Duration("duration", 1003*time.Millisecond), slog.String("request_id", "req_1x"))
	for _, c := range []struct {
		name string
		h    slog.Handler
	}{
		{"jsonlog", New(discard{}, nil)},
		{"slog", slog.NewJSONHandler(discard{}, &slog.HandlerOptions{ReplaceAttr: DurationText})},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = c.h.Handle(context.Background(), r)
			}
		})
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
