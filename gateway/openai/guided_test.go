package openai

import (
	"encoding/json"
	"testing"

	"github.com/streamgate/streamgate/engine/llama2/constrain"
)

// accepts reports whether the guided_decoding g's schema accepts out.
func accepts(t *testing.T, g json.RawMessage, out string) bool {
	t.Helper()
	var gd struct {
		JSON json.RawMessage `json:"json"`
	}
	if err := json.Unmarshal(g, &gd); err != nil {
		t.Fatal(err)
	}
	gr, err := constrain.Compile(gd.JSON)
	if err != nil {
		t.Fatalf("%s: %v", gd.JSON, err)
	}
	m := gr.Matcher(constrain.NewVocab(nil, func(int) bool { return false }))
	return m.Advance(out) && m.Accepting()
}

func TestResponseFormatGuided(t *testing.T) {
	for body, want := range map[string]string{
		`{"type":"text"}`:        "",
		`{"type":"json_object"}`: `{"json_object":true}`,
		`{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}}`: `{"json":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}`,
		`{"type":"json_schema","json_schema":{"name":"p"}}`: `{"json":{}}`,
	} {
		r, err := ParseChat([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":` + body + `}`))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if string(r.Guided) != want {
			t.Errorf("%s: guided %s, want %s", body, r.Guided, want)
		}
	}
}

func TestResponsesTextFormatGuided(t *testing.T) {
	for body, want := range map[string]string{
		`{"type":"text"}`:        "",
		`{"type":"json_object"}`: `{"json_object":true}`,
		`{"type":"json_schema","name":"p","strict":true,"schema":{"type":"integer"}}`: `{"json":{"type":"integer"}}`,
	} {
		r, err := ParseResponses([]byte(`{"model":"m","input":"x","text":{"format":` + body + `}}`))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if string(r.Params.Guided) != want {
			t.Errorf("%s: guided %s, want %s", body, r.Params.Guided, want)
		}
	}
}

func TestToolGuide(t *testing.T) {
	tools := `"tools":[
		{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"where":{"$ref":"#/$defs/city"}},"required":["where"],"$defs":{"city":{"enum":["Paris","Rome"]}}}}},
		{"type":"function","function":{"name":"now"}}]`
	parse := func(choice string) *ChatRequest {
		r, err := ParseChat([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}],` + tools + `,"tool_choice":` + choice + `}`))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	named, err := parse(`{"type":"function","function":{"name":"get_weather"}}`).ToolGuide()
	if err != nil {
		t.Fatal(err)
	}
	single := parse(`"required","parallel_tool_calls":false`)
	required, err := single.ToolGuide()
	if err != nil {
		t.Fatal(err)
	}
	// With parallel_tool_calls (the default), one or more calls.
	parallel, err := parse(`"required"`).ToolGuide()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		out             string
		named, required bool
	}{
		{`{"name":"get_weather","arguments":{"where":"Rome"}}`, true, true},
		{`{"name":"now","arguments":{}}`, false, true},
		{`{"name":"now","arguments":{"any":[1]}}`, false, true},
		{`{"name":"get_weather","arguments":{"where":"Oslo"}}`, false, false},
		{`{"name":"get_weather","arguments":{}}`, false, false},
		{`{"name":"other","arguments":{}}`, false, false},
	} {
		if got := accepts(t, named, tc.out); got != tc.named {
			t.Errorf("named: %s accepted %v", tc.out, got)
		}
		if got := accepts(t, required, tc.out); got != tc.required {
			t.Errorf("required: %s accepted %v", tc.out, got)
		}
		if got := accepts(t, parallel, "["+tc.out+"]"); got != tc.required {
			t.Errorf("required, parallel: [%s] accepted %v", tc.out, got)
		}
		if got := accepts(t, parallel, `[{"name":"now","arguments":{}},`+tc.out+"]"); got != tc.required {
			t.Errorf("required, parallel: a call then %s accepted %v", tc.out, got)
		}
		if accepts(t, parallel, tc.out) || accepts(t, required, "["+tc.out+"]") {
			t.Errorf("%s: the parallel guide takes a lone call, or the single one an array", tc.out)
		}
	}
	if accepts(t, parallel, "[]") {
		t.Error("required, parallel: [] accepted")
	}
	if g, _ := parse(`"auto"`).ToolGuide(); g != nil {
		t.Errorf("auto: guide %s", g)
	}
}
