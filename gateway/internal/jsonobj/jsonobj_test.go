package jsonobj

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
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

var membersCorpus = []string{
	`{}`, ` { } `, "\t{\"a\" :\n1 ,\"b\":\"x\"}\r\n", `{"a":{"b":[1,{"c":"]}\\"{"}],"d":null},"e":[]}`,
	`{"k\u00e9y":"v\"al\\","":true,"a":false,"a":-1.5e+3}`, "{\"\xff\":\"\xfe\"}", `{"x":"\\\\"}`,
	`[]`, `"x"`, `1`, `null`, `{"a":1}{`, `{"a":}`, `{"a":1,}`, `{"a" 1}`, `{"a":[1,2}`, `{"a":"\x"}`,
	`{"a":0123}`, `{"a":tru}`, " ", `{"a":{"b":{"c":[[[]]]}},"z":"{[\"]}"}`,
	` [ 1 , "a]" ,{"b":[2]},[],null, -0.5e1 ] `, `[1]`, `["\"",{"}":"]"}]`, `[[],{}]`,
}

// validMembers finds what the decoder finds, in every body json.Valid
// accepts.
func TestValidMembersMatchDecoder(t *testing.T) {
	for _, body := range membersCorpus {
		checkMembers(t, []byte(body))
	}
}

func FuzzMembers(f *testing.F) {
	for _, body := range membersCorpus {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkMembers(t, body)
		checkArray(t, body)
	})
}

// Array finds what json.Unmarshal finds in every valid array, and
// refuses every other valid value.
func TestArrayMatchesUnmarshal(t *testing.T) {
	for _, body := range membersCorpus {
		checkArray(t, []byte(body))
	}
}

func checkArray(t *testing.T, body []byte) {
	t.Helper()
	if !json.Valid(body) {
		return // Array's input must be valid JSON
	}
	got, ok := Array(body)
	var want []json.RawMessage
	werr := json.Unmarshal(body, &want)
	if isArray := werr == nil && want != nil; ok != isArray || len(got) != len(want) {
		t.Fatalf("%q: %q %v, json.Unmarshal %q %v", body, got, ok, want, werr)
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) || cap(got[i]) != len(got[i]) {
			t.Fatalf("%q: element %d %q (cap %d), json.Unmarshal %q", body, i, got[i], cap(got[i]), want[i])
		}
	}
}

func checkMembers(t *testing.T, body []byte) {
	t.Helper()
	got, err := Members(body)
	if len(bytes.TrimSpace(body)) == 0 {
		return
	}
	want, werr := decoderMembers(body)
	if !reflect.DeepEqual(err, werr) || len(got) != len(want) || (got == nil) != (want == nil) {
		t.Fatalf("%q: %q %v, decoder %q %v", body, got, err, want, werr)
	}
	for i := range got {
		if got[i].Key != want[i].Key || !bytes.Equal(got[i].Value, want[i].Value) || cap(got[i].Value) != len(got[i].Value) {
			t.Fatalf("%q: member %d %q=%q (cap %d), decoder %q=%q", body, i, got[i].Key, got[i].Value, cap(got[i].Value), want[i].Key, want[i].Value)
		}
	}
	// Each gives the members Members gives, with the same error.
	var each []Member
	eerr := Each(body, func(k []byte, v json.RawMessage) { each = append(each, Member{Key: string(k), Value: v}) })
	if !reflect.DeepEqual(eerr, err) || !reflect.DeepEqual(each, got) {
		t.Fatalf("%q: Each %q %v, Members %q %v", body, each, eerr, got, err)
	}
}
