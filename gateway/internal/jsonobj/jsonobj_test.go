package jsonobj

import (
	"errors"
	"testing"
)

func TestMembers(t *testing.T) {
	ms, err := Members([]byte(` {"b":[1, 2],"a":{"x":null},"b":"again"} `))
	if err != nil || len(ms) != 3 || ms[0].Key != "b" || string(ms[0].Value) != `[1, 2]` ||
		ms[1].Key != "a" || string(ms[1].Value) != `{"x":null}` || ms[2].Key != "b" {
		t.Fatalf("members %q %v", ms, err)
	}
	if ms, err := Members([]byte(" \n")); err != nil || ms != nil {
		t.Fatalf("empty body: %v %v", ms, err)
	}
	for _, body := range []string{`[]`, `"x"`, `1`, `null`} {
		if _, err := Members([]byte(body)); err != ErrNotObject {
			t.Errorf("%s: %v, want ErrNotObject", body, err)
		}
	}
	for _, tc := range []struct {
		body      string
		line, col int
		offset    int64
	}{
		{"{\n  \"a\": [1,,2]\n}", 2, 11, 12},
		{`{"a":`, 1, 6, 5},
		{`{} x`, 1, 4, 3},
		{`{"a":1 "b":2}`, 1, 8, 7},
	} {
		_, err := Members([]byte(tc.body))
		var se *SyntaxError
		if !errors.As(err, &se) || se.Line != tc.line || se.Column != tc.col || se.Offset != tc.offset {
			t.Errorf("%q: %+v (%v), want line %d column %d offset %d", tc.body, se, err, tc.line, tc.col, tc.offset)
		}
	}
}
