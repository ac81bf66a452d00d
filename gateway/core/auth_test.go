package core

import (
	"strings"
	"testing"
)

func TestBearerKey(t *testing.T) {
	for h, want := range map[string]string{
		"Bearer sg-abc":   "sg-abc",
		"bearer sg-abc":   "sg-abc",
		"BEARER   sg-abc": "sg-abc",
		"Bearer":          "",
		"Bearer ":         "",
		"Basic sg-abc":    "",
		"Bearer a b":      "",
		"Bearer a\tb":     "",
		"sg-abc":          "",
		"":                "",
	} {
		got, ok := BearerKey(h)
		if got != want || ok != (want != "") {
			t.Errorf("BearerKey(%q) = %q, %v; want %q", h, got, ok, want)
		}
	}
}

func TestSubprotocolKey(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   string
	}{
		{[]string{"streamgate.v1, streamgate.key.sg-abc"}, "sg-abc"},
		{[]string{"streamgate.v1", "streamgate.key.sg-abc"}, "sg-abc"},
		{[]string{"streamgate.key.sg-abc,streamgate.v1"}, "sg-abc"},
		{[]string{"streamgate.v1, streamgate.key."}, ""},
		{[]string{"streamgate.v1"}, ""},
		{nil, ""},
	} {
		got, ok := subprotocolKey(tc.values)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("subprotocolKey(%q) = %q, %v; want %q", tc.values, got, ok, tc.want)
		}
	}
}

func FuzzBearerKey(f *testing.F) {
	for _, s := range []string{"Bearer sg-abc", "bearer  x", "Basic x", "Bearer", "Bearer a b", "\x00Bearer x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		key, ok := BearerKey(h)
		if !ok {
			if key != "" {
				t.Fatalf("%q: key %q without ok", h, key)
			}
			return
		}
		if !validKey(key) || !strings.HasSuffix(h, key) {
			t.Fatalf("%q: key %q", h, key)
		}
		if again, ok := BearerKey("Bearer " + key); !ok || again != key {
			t.Fatalf("%q: key %q does not round-trip (%q)", h, key, again)
		}
	})
}

func FuzzSubprotocolKey(f *testing.F) {
	for _, s := range []string{"streamgate.v1, streamgate.key.sg-abc", "streamgate.key.", ",,", "streamgate.key.a,streamgate.key.b", " streamgate.key.x ", "streamgate.key. 0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, ok := subprotocolKey([]string{v})
		if !ok {
			if key != "" {
				t.Fatalf("%q: key %q without ok", v, key)
			}
			return
		}
		if !validKey(key) || !strings.Contains(v, keyProtocol+key) {
			t.Fatalf("%q: key %q", v, key)
		}
	})
}
