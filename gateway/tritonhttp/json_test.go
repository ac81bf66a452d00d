package tritonhttp

import (
	"math"
	"testing"
)

// The layouts rapidjson's dtoa gives (internal/dtoa.h Prettify).
func TestAppendDouble(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		want string
	}{
		{0, "0.0"},
		{math.Copysign(0, -1), "-0.0"},
		{1, "1.0"},
		{-2.5, "-2.5"},
		{100, "100.0"},
		{123456.789, "123456.789"},
		{float64(float32(0.1)), "0.10000000149011612"},
		{0.1, "0.1"},
		{1e20, "100000000000000000000.0"},
		{1e21, "1e21"},
		{1.5e21, "1.5e21"},
		{1.5e300, "1.5e300"},
		{0.001234, "0.001234"},
		{1e-6, "0.000001"},
		{1e-7, "1e-7"},
		{1.25e-7, "1.25e-7"},
		{math.MaxFloat32, "3.4028234663852886e38"},
		{5e-324, "5e-324"},
		{math.MaxFloat64, "1.7976931348623157e308"},
	} {
		if got := string(appendDouble(nil, tc.f)); got != tc.want {
			t.Errorf("appendDouble(%g) = %s, want %s", tc.f, got, tc.want)
		}
	}
}

// rapidjson escapes only what JSON requires and copies other bytes, even
// invalid UTF-8.
func TestAppendString(t *testing.T) {
	in := "a\"b\\c/<>&\x00\x01\x1f\b\t\n\f\r\x7fé\xff"
	want := `"a\"b\\c/<>&\u0000\u0001\u001F\b\t\n\f\r` + "\x7fé\xff\""
	if got := string(appendString(nil, in)); got != want {
		t.Errorf("appendString = %q, want %q", got, want)
	}
}
