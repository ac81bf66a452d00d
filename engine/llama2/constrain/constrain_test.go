package constrain

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// matches feeds text through a fresh matcher of g.
func matches(g *Grammar, text string) bool {
	m := g.Matcher(NewVocab(nil, func(int) bool { return false }))
	return m.Advance(text) && m.Accepting()
}

const person = `{"type":"object","properties":{
	"name":{"type":"string","maxLength":8},
	"age":{"type":"integer"},
	"tags":{"type":"array","items":{"enum":["a","bc",1,null]},"maxItems":3},
	"pet":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/pet"}]}},
	"required":["name","age"],"additionalProperties":false,
	"$defs":{"pet":{"type":"object","properties":{"kind":{"const":"cat"},"w":{"type":"number"}},"required":["kind"]}}}`

func TestMatcherTable(t *testing.T) {
	for _, tc := range []struct {
		schema string
		ok     []string
		bad    []string
	}{{
		schema: person,
		ok: []string{
			`{"name":"ann","age":3}`,
			`{"name":"ünï", "age":-12}`,
			`{ "name": "a\"\u00e9", "age": 0, "tags": ["a", 1, null] }`,
			`{"name":"","age":1,"pet":null}`,
			`{"name":"x","age":1,"pet":{"kind":"cat","w":1.5e-3}}`,
			`{"name":"12345678","age":7}`,
		},
		bad: []string{
			`{"name":"ann"}`,                        // age missing
			`{"age":-12, "name":"ünï"}`,             // not in declared order
			`{"name":"a","pet":null,"age":1}`,       // not in declared order
			`{"name":"ann","age":3,"x":1}`,          // undeclared
			`{"name":"ann","age":3.5}`,              // integer
			`{"name":"123456789","age":1}`,          // maxLength
			`{"name":"a","age":1,"tags":["b"]}`,     // enum
			`{"name":"a","age":1,"tags":[1,1,1,1]}`, // maxItems
			`{"name":"a","age":01}`,                 // leading zero
			`{"name":"a","age":1,"name":"b"}`,       // twice
			`{"name":"a","age":1,"pet":{"w":1}}`,    // kind required
			`{"name":"a","age":1}x`,                 // trailing
			`{"name":"a","age":1} `,                 // trailing space
			`{"name":"a",  "age":1}`,                // two spaces
			`{"name":"a` + "\n" + `","age":1}`,      // control character
			`{"name":"\x","age":1}`,                 // bad escape
			`[1]`,
		},
	}, {
		schema: `{"type":"array","items":{"type":"number"},"minItems":2}`,
		ok:     []string{`[1,2]`, `[0.5,-0,1e10,2E+3]`},
		bad:    []string{`[]`, `[1]`, `[1,]`, `[1.,2]`, `[.5,1]`, `[1,2`},
	}, {
		schema: `{"anyOf":[{"type":"string"},{"type":"integer"},{"type":"array","items":{"$ref":"#"}}]}`,
		ok:     []string{`"x"`, `12`, `[["a",[1]],2]`, `[]`},
		bad:    []string{`1.5`, `{"a":1}`, `true`},
	}, {
		schema: `{"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991}`,
		ok:     []string{`999999999999999`, `-5`},
		bad:    []string{`1000000000000000`, `1e3`, `1.5`},
	}, {
		schema: `{"type":"number","exclusiveMinimum":-1e300}`,
		ok:     []string{`1.5`, `-999999999999999.5`},
		bad:    []string{`1e400`},
	}, {
		schema: `{"type":"string","enum":["a",1]}`,
		ok:     []string{`"a"`},
		bad:    []string{`1`},
	}, {
		schema: `{"anyOf":[{"type":"integer"},{"type":"array","items":{"$ref":"#/anyOf/0"}}]}`,
		ok:     []string{`1`, `[1,2]`},
		bad:    []string{`[[1]]`, `["a"]`},
	}, {
		schema: `{"enum":[1,12,123]}`,
		ok:     []string{`1`, `12`, `123`},
		bad:    []string{`1234`, `2`, `13`},
	}, {
		// allOf merges object schemas: properties in the order met,
		// required names together, the stricter additionalProperties.
		schema: `{"allOf":[{"$ref":"#/$defs/base"},{"type":"object","properties":{"b":{"type":"integer"}},"required":["b"],"additionalProperties":false}],
			"$defs":{"base":{"type":"object","properties":{"a":{"type":"string","maxLength":2},"b":{"type":"integer"}},"required":["a"]}}}`,
		ok:  []string{`{"a":"x","b":1}`},
		bad: []string{`{"a":"x"}`, `{"b":1}`, `{"b":1,"a":"x"}`, `{"a":"xyz","b":1}`, `{"a":"x","b":1,"c":2}`},
	}, {
		// pattern: the whole string matches; printable ASCII only.
		schema: `{"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{2}-\\d{2,3}$"},"day":{"type":"string","format":"date"},
			"id":{"type":"string","format":"uuid"},"at":{"type":"string","format":"date-time"},"mail":{"type":"string","format":"email"},
			"any":{"type":"string","pattern":"a.c|x*"}}}`,
		ok: []string{`{"code":"AB-12"}`, `{"code":"ZZ-999","day":"2024-02-28"}`, `{"id":"123e4567-e89b-42d3-a456-426614174000"}`,
			`{"at":"2024-12-01T23:59:00Z"}`, `{"at":"2024-12-01T00:00:00.5+01:00"}`, `{"mail":"ann@example.org"}`, `{"any":"a c"}`, `{"any":""}`, `{"any":"xxx"}`},
		bad: []string{`{"code":"AB-1"}`, `{"code":"ab-12"}`, `{"code":"AB-1234"}`, `{"day":"2024-13-01"}`, `{"day":"2024-1-01"}`,
			`{"id":"123e4567-e89b-42d3-a456-42661417400"}`, `{"at":"2024-12-01 23:59:00Z"}`, `{"mail":"ann@example"}`, `{"any":"a\"c"}`, `{"any":"ab"}`},
	}, {
		schema: `{"type":["string","null"]}`,
		ok:     []string{`"a"`, `null`},
		bad:    []string{`nul`, `1`},
	}} {
		g, err := Compile([]byte(tc.schema))
		if err != nil {
			t.Fatalf("compile %s: %v", tc.schema, err)
		}
		for _, s := range tc.ok {
			if !matches(g, s) {
				t.Errorf("%.40s: %s refused", tc.schema, s)
			}
		}
		for _, s := range tc.bad {
			if matches(g, s) {
				t.Errorf("%.40s: %s accepted", tc.schema, s)
			}
		}
	}
}

func TestAnyJSON(t *testing.T) {
	g := AnyJSON()
	for _, s := range []string{`{}`, `{"a":[1,{"b":null}],"c":"d","e":true,"f":-1.5e3}`, `{"":{}}`} {
		if !matches(g, s) {
			t.Errorf("%s refused", s)
		}
	}
	for _, s := range []string{`[]`, `"a"`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{a:1}`, `{"a":tru}`} {
		if matches(g, s) {
			t.Errorf("%s accepted", s)
		}
	}
}

func TestCompileRefuses(t *testing.T) {
	for _, tc := range []struct{ schema, path string }{
		{`{"type":"string","pattern":"a(+"}`, "/pattern"},
		{`{"type":"string","pattern":"\\bword"}`, "/pattern"},
		{`{"type":"string","pattern":"^é+$"}`, "/pattern"},
		{`{"type":"string","pattern":"a","maxLength":3}`, "/maxLength"},
		{`{"type":"string","format":"hostname"}`, "/format"},
		{`{"type":"integer","pattern":"1"}`, "/pattern"},
		{`{"type":"object","properties":{"a":{"type":"number","minimum":0}}}`, "/properties/a/minimum"},
		{`{"type":"integer","maximum":1e14}`, "/maximum"},
		{`{"type":"string","enum":[1,2]}`, "/enum"},
		{`{"type":"object","properties":{"a":{"type":"bogus"}}}`, "/properties/a/type"},
		{`{"type":"object","properties":{"a":{}},"required":["b"]}`, "/required/0"},
		{`{"$ref":"https://example.com/s"}`, "/$ref"},
		{`{"$ref":"#/$defs/missing"}`, "/$ref"},
		{`{"type":"string","minLength":3,"maxLength":2}`, "/maxLength"},
		{`{"allOf":[]}`, "/allOf"},
		{`{"allOf":[{"type":"object","properties":{"a":{"type":"string"}}},{"properties":{"a":{"type":"integer"}}}]}`, "/allOf/1/properties/a"},
		{`{"allOf":[{"type":"string"},{"type":"integer"}]}`, "/allOf/1/type"},
		{`{"allOf":[{"type":"string","not":{}}]}`, "/allOf/0/not"},
		{`false`, ""},
		{`[1]`, ""},
	} {
		_, err := Compile([]byte(tc.schema))
		var se *SchemaError
		if !errors.As(err, &se) || se.Path != tc.path {
			t.Errorf("%s: got %v, want an error at %q", tc.schema, err, tc.path)
		}
	}
}

// validate checks v against the schema subset, independently of the
// automaton.
func validate(root, s map[string]any, v any) bool {
	if r, ok := s["$ref"].(string); ok {
		target := any(root)
		if r != "#" {
			for _, p := range strings.Split(strings.TrimPrefix(r, "#/"), "/") {
				target = target.(map[string]any)[p]
			}
		}
		return validate(root, target.(map[string]any), v)
	}
	if e, ok := s["enum"].([]any); ok {
		for _, x := range e {
			if jsonEqual(x, v) {
				return true
			}
		}
		return false
	}
	if c, ok := s["const"]; ok {
		return jsonEqual(c, v)
	}
	if a, ok := s["anyOf"].([]any); ok {
		for _, b := range a {
			if validate(root, b.(map[string]any), v) {
				return true
			}
		}
		return false
	}
	types, _ := s["type"].([]any)
	if t, ok := s["type"].(string); ok {
		types = []any{t}
	}
	if types == nil {
		return true
	}
	for _, t := range types {
		if validType(root, s, t.(string), v) {
			return true
		}
	}
	return false
}

func validType(root, s map[string]any, t string, v any) bool {
	switch t {
	case "null":
		return v == nil
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "number":
		_, ok := v.(json.Number)
		return ok
	case "integer":
		n, ok := v.(json.Number)
		return ok && !strings.ContainsAny(string(n), ".eE")
	case "string":
		str, ok := v.(string)
		n := utf8.RuneCountInString(str)
		return ok && n >= intOr(s["minLength"], 0) && (s["maxLength"] == nil || n <= intOr(s["maxLength"], 0))
	case "array":
		a, ok := v.([]any)
		if !ok || len(a) < intOr(s["minItems"], 0) || s["maxItems"] != nil && len(a) > intOr(s["maxItems"], 0) {
			return false
		}
		for _, x := range a {
			if it, ok := s["items"].(map[string]any); ok && !validate(root, it, x) {
				return false
			}
		}
		return true
	case "object":
		o, ok := v.(map[string]any)
		if !ok {
			return false
		}
		props, _ := s["properties"].(map[string]any)
		for _, r := range asList(s["required"]) {
			if _, ok := o[r.(string)]; !ok {
				return false
			}
		}
		for k, x := range o {
			p, ok := props[k].(map[string]any)
			if !ok {
				if s["additionalProperties"] == false {
					return false
				}
				continue
			}
			if !validate(root, p, x) {
				return false
			}
		}
		return true
	}
	return false
}

func asList(v any) []any { l, _ := v.([]any); return l }

func intOr(v any, def int) int {
	if n, ok := v.(json.Number); ok {
		i, _ := n.Int64()
		return int(i)
	}
	return def
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func decode(t testing.TB, s string) any {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return v
}

// checkOutput fails unless out is JSON that validates against schema
// (nil: any JSON object).
func checkOutput(t testing.TB, schema, out string) {
	t.Helper()
	if !json.Valid([]byte(out)) {
		t.Fatalf("not JSON: %q", out)
	}
	if schema == "" {
		if !strings.HasPrefix(strings.TrimSpace(out), "{") {
			t.Fatalf("not an object: %q", out)
		}
		return
	}
	s := decode(t, schema).(map[string]any)
	if !validate(s, s, decode(t, out)) {
		t.Fatalf("does not validate against %s: %q", schema, out)
	}
}

// randomWalk draws random allowed bytes until the output is complete,
// preferring to close (after a while) so that the walk ends.
func randomWalk(g *Grammar, r *rand.Rand, limit int) (string, bool) {
	m := g.Matcher(NewVocab(nil, func(int) bool { return false }))
	var out []byte
	for len(out) < limit {
		if m.Accepting() && (r.IntN(4) == 0 || m.Finished()) {
			return string(out), true
		}
		var allowed []byte
		for b := 0; b < 256; b++ {
			probe := g.Matcher(nil)
			probe.stacks = slices.Clone(m.stacks)
			if probe.Advance(string([]byte{byte(b)})) {
				allowed = append(allowed, byte(b))
			}
		}
		if len(allowed) == 0 {
			return string(out), false
		}
		b := allowed[r.IntN(len(allowed))]
		if len(out) > limit/2 { // steer towards closing
			for _, c := range []byte(`"}]0`) {
				if bytes.IndexByte(allowed, c) >= 0 {
					b = c
					break
				}
			}
		}
		m.Advance(string([]byte{b}))
		out = append(out, b)
	}
	return string(out), m.Accepting()
}

// TestRandomWalks draws random outputs the automaton allows and checks
// each against an independent validator.
func TestRandomWalks(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, schema := range []string{person, `{"type":"array","items":{"type":"number"},"minItems":2}`,
		`{"anyOf":[{"type":"string","maxLength":3},{"type":"integer"},{"type":"array","items":{"$ref":"#"},"maxItems":2}]}`, ""} {
		g := AnyJSON()
		if schema != "" {
			var err error
			if g, err = Compile([]byte(schema)); err != nil {
				t.Fatal(err)
			}
		}
		completed := 0
		for range 60 {
			out, ok := randomWalk(g, r, 400)
			if ok {
				completed++
				checkOutput(t, schema, out)
			}
		}
		if completed < 30 {
			t.Errorf("%.30s: only %d of 60 walks completed", schema, completed)
		}
	}
}

// FuzzMatcher checks that whatever the automaton accepts is JSON that
// validates against the schema.
func FuzzMatcher(f *testing.F) {
	for _, s := range []string{`{"name":"ann","age":3}`, `{"name":"a","age":1,"pet":{"kind":"cat","w":1.5e-3}}`, `{"name":"\u00e9","age":-0}`} {
		f.Add(s)
	}
	g, err := Compile([]byte(person))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if matches(g, s) {
			checkOutput(t, person, s)
		}
	})
}

// testVocab is a vocabulary of single bytes, a few JSON fragments, and an
// end-of-generation token (id 0, no bytes).
func testVocab() ([]string, *Vocab) {
	pieces := []string{""}
	for b := 32; b < 127; b++ {
		pieces = append(pieces, string(rune(b)))
	}
	pieces = append(pieces, `{"`, `":`, `",`, `"}`, `name`, `age`, `null`, `true`, ` "`, `12`, `é`, "\xc3", "\xa9", `"a"`, `}`, `]}`)
	return pieces, NewVocab(pieces, func(i int) bool { return i == 0 })
}

// TestMaskMatchesAdvance checks that the mask allows exactly the tokens
// whose bytes the automaton accepts, on random walks through the vocabulary.
func TestMaskMatchesAdvance(t *testing.T) {
	for _, schema := range []string{person, `{"type":"object","properties":{"a":{"type":"string","pattern":"^[a-c ]{2,5}x?$"},"b":{"type":"string","format":"date"}}}`} {
		maskMatchesAdvance(t, schema)
	}
}

func maskMatchesAdvance(t *testing.T, schema string) {
	pieces, v := testVocab()
	g, err := Compile([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		m := g.Matcher(v)
		for steps := 0; steps < 200; steps++ {
			mask := m.Mask()
			var allowed []int
			for tok, p := range pieces {
				probe := g.Matcher(v)
				probe.stacks = slices.Clone(m.stacks)
				want := probe.Advance(p) && p != ""
				if tok == 0 {
					want = m.Accepting()
				}
				got := mask[tok/64]&(1<<(tok%64)) != 0
				if got != want {
					t.Fatalf("token %q: mask says %v, automaton %v", p, got, want)
				}
				if got {
					allowed = append(allowed, tok)
				}
			}
			tok := allowed[r.IntN(len(allowed))]
			if tok == 0 {
				break
			}
			m.Advance(pieces[tok])
		}
	}
}

func TestApply(t *testing.T) {
	pieces, v := testVocab()
	g, _ := Compile([]byte(`{"enum":["a"]}`))
	m := g.Matcher(v)
	logits := make([]float32, len(pieces))
	if !m.Apply(logits) {
		t.Fatal("nothing allowed")
	}
	for i, l := range logits {
		if (l == 0) != (pieces[i] == `"` || pieces[i] == `"a"`) {
			t.Errorf("token %q: logit %v", pieces[i], l)
		}
	}
	m.Advance(`"a"`)
	if !m.Finished() {
		t.Error("not finished after the only value")
	}
}

// TestPatternWalks draws random strings the automaton allows for patterns
// and formats: each matches the pattern whole (Go's regexp, anchored), and
// every walk can end.
func TestPatternWalks(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	cases := []string{`^[A-Z]{2}-\d{2,3}$`, `a.c|x*`, `(ab|cd)+e?`, `[^a-y]{1,4}`, `^\w{1,8}@\w{1,8}\.(com|org)$`}
	for _, f := range []string{"date", "time", "date-time", "uuid", "email"} {
		cases = append(cases, "format:"+f)
	}
	// zod's, beside its format: both hold.
	zodEmail := `^(?:[A-Za-z0-9_'+\-]+\.)*[A-Za-z0-9_'+\-]*[A-Za-z0-9_+-]@(?:[A-Za-z0-9][A-Za-z0-9\-]*\.)+[A-Za-z]{2,}$`
	cases = append(cases, "both:email:"+zodEmail)
	for _, c := range cases {
		schema, re := `{"type":"string","pattern":`+strconv.Quote(c)+`}`, c
		if f, ok := strings.CutPrefix(c, "format:"); ok {
			schema, re = `{"type":"string","format":"`+f+`"}`, formats[f]
		}
		var also *regexp.Regexp
		if rest, ok := strings.CutPrefix(c, "both:"); ok {
			f, p, _ := strings.Cut(rest, ":")
			schema, re = `{"type":"string","format":"`+f+`","pattern":`+strconv.Quote(p)+`}`, formats[f]
			also = regexp.MustCompile(p)
		}
		g, err := Compile([]byte(schema))
		if err != nil {
			t.Fatalf("%s: %v", schema, err)
		}
		whole := regexp.MustCompile(`^(?:` + re + `)$`)
		for range 40 {
			out, ok := randomWalk(g, r, 200)
			if !ok {
				t.Fatalf("%s: the walk %q could not end", schema, out)
			}
			var s string
			if err := json.Unmarshal([]byte(out), &s); err != nil || !whole.MatchString(s) || also != nil && !also.MatchString(s) {
				t.Fatalf("%s: %q does not match (%v)", schema, out, err)
			}
		}
	}
}
