package llama2

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"

	"github.com/streamgate/streamgate/engine/backend"
)

// guidedSchema bounds every string and array, so that a model whatever
// its weights must finish the object within max_tokens.
const guidedSchema = `{"type":"object","properties":{
	"name":{"type":"string","maxLength":12},
	"age":{"type":"integer"},
	"mood":{"enum":["happy","sad"]},
	"friends":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":3}},
	"required":["name","age","mood","friends"],"additionalProperties":false}`

// checkGuided fails unless out is one object that guidedSchema accepts.
func checkGuided(t *testing.T, out string) {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(out))
	d.DisallowUnknownFields()
	d.UseNumber()
	var v struct {
		Name    *string      `json:"name"`
		Age     *json.Number `json:"age"`
		Mood    *string      `json:"mood"`
		Friends *[]string    `json:"friends"`
	}
	if err := d.Decode(&v); err != nil || d.More() {
		t.Fatalf("%q: not one object of the schema: %v", out, err)
	}
	if v.Name == nil || v.Age == nil || v.Mood == nil || v.Friends == nil {
		t.Fatalf("%q: a required property is missing", out)
	}
	if _, err := v.Age.Int64(); err != nil {
		t.Fatalf("%q: age is not an integer", out)
	}
	if utf8.RuneCountInString(*v.Name) > 12 || (*v.Mood != "happy" && *v.Mood != "sad") || len(*v.Friends) > 3 {
		t.Fatalf("%q: breaks maxLength, enum or maxItems", out)
	}
	for _, f := range *v.Friends {
		if utf8.RuneCountInString(f) > 8 {
			t.Fatalf("%q: a friend's name breaks maxLength", out)
		}
	}
}

// TestGuidedJSONSchema samples stories260K, a model that never saw JSON,
// under a schema: every output is an object of the schema.
func TestGuidedJSONSchema(t *testing.T) {
	b := realBackend(t, nil)
	excl := true
	schema, _ := json.Marshal(guidedSchema) // as a string, as Triton's vLLM backend also takes it
	for seed := range 8 {
		for _, stream := range []bool{false, true} {
			p := fmt.Sprintf(`{"temperature":1,"seed":%d,"max_tokens":400,"guided_decoding":{"json":%s}}`, seed, schema)
			if seed%2 == 1 {
				p = fmt.Sprintf(`{"temperature":1,"seed":%d,"max_tokens":400,"guided_decoding":{"json":%s}}`, seed, guidedSchema)
			}
			res := run(t, b, call{prompt: "Once upon a time", stream: stream, params: p, exclude: &excl})
			out := res.text
			if stream {
				out = res.streamed() + res.text
			}
			if res.finish != finishStop {
				t.Fatalf("seed %d: finish %q after %d tokens: %q", seed, res.finish, res.outTokens, out)
			}
			checkGuided(t, out)
		}
	}
}

func TestGuidedJSONObject(t *testing.T) {
	b := realBackend(t, nil)
	excl := true
	for seed := range 4 {
		res := run(t, b, call{prompt: "Once upon a time", exclude: &excl,
			params: fmt.Sprintf(`{"temperature":0.8,"seed":%d,"max_tokens":400,"guided_decoding":{"json_object":true}}`, seed)})
		if res.finish == finishLength {
			continue // an unbounded object may run out of tokens; what came is a prefix
		}
		if !json.Valid([]byte(res.text)) || !bytes.HasPrefix([]byte(res.text), []byte("{")) {
			t.Fatalf("seed %d: %q is not a JSON object", seed, res.text)
		}
	}
}

func TestGuidedRefused(t *testing.T) {
	b := realBackend(t, nil)
	for _, tc := range []struct{ guided, want string }{
		{`{"regex":"a+"}`, "guided_decoding.regex is not supported"},
		{`{"json":{"type":"string","pattern":"^é$"}}`, "schema /pattern"},
		{`{"json_object":false}`, "json_object must be true"},
		{`{}`, "needs json or json_object"},
		{`[1]`, "must be an object"},
	} {
		_, err := tryRun(t, t.Context(), b, call{prompt: "a", params: `{"guided_decoding":` + tc.guided + `}`})
		if code, _ := backend.CodeOf(err); code != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want InvalidArgument with %q", tc.guided, err, tc.want)
		}
	}
}
