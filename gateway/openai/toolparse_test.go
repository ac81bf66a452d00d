package openai

import (
	"reflect"
	"strings"
	"testing"
)

// TestToolParser feeds outputs whole and one byte at a time: both give
// the same content and calls, and no piece of content holds any part of
// a call.
func TestToolParser(t *testing.T) {
	weather := ToolCall{ID: "call_0", Name: "get_weather", Arguments: `{"city":"Paris"}`}
	cases := []struct {
		format  ToolFormat
		out     string
		content string
		calls   []ToolCall
	}{
		{ToolFormatHermes, "plain answer, no calls <tool", "plain answer, no calls <tool", nil},
		{ToolFormatHermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "", []ToolCall{weather}},
		{ToolFormatHermes, "Let me look. <tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}</tool_call>\n<tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call>\n",
			"Let me look.", []ToolCall{weather, {ID: "call_1", Name: "now", Arguments: `{}`}}},
		{ToolFormatHermes, "<tool_call>{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}", "", []ToolCall{weather}}, // unclosed, arguments as a string
		{ToolFormatHermes, "<tool_call>{\"name\":\"rm_rf\",\"arguments\":{}}</tool_call>", "<tool_call>{\"name\":\"rm_rf\",\"arguments\":{}}</tool_call>", nil},
		{ToolFormatHermes, "<tool_call>{\"name\":\"get_weather\",\"argu", "<tool_call>{\"name\":\"get_weather\",\"argu", nil}, // cut off: given back at the end
		{ToolFormatLlama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", []ToolCall{weather}},
		{ToolFormatLlama3, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": \"now\", \"parameters\": {}}", "",
			[]ToolCall{weather, {ID: "call_1", Name: "now", Arguments: `{}`}}},
		{ToolFormatLlama3, "  The weather is fine.  ", "  The weather is fine.  ", nil},
		{ToolFormatLlama3, "{not json", "{not json", nil},
		{ToolFormatMistral, "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"now\", \"arguments\": {}}]", "",
			[]ToolCall{weather, {ID: "call_1", Name: "now", Arguments: `{}`}}},
		{ToolFormatMistral, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]now[CALL_ID]a1b2c3d4e[ARGS]{}", "",
			[]ToolCall{weather, {ID: "call_1", Name: "now", Arguments: `{}`}}},
		{ToolFormatMistral, "It is sunny [TOOL_CALLS] in Paris.", "It is sunny [TOOL_CALLS] in Paris.", nil},
		{ToolFormatMistral, "[TOOL_CALLS]rm_rf[ARGS]{}", "[TOOL_CALLS]rm_rf[ARGS]{}", nil},
		{ToolFormatMistral, "[TOOL_CALLS]get_weather{}", "[TOOL_CALLS]get_weather{}", nil},
		{ToolFormatGuided, `{"name":"get_weather","arguments":{"city":"Paris"}}`, "", []ToolCall{weather}},
		{ToolFormatGuided, `[{"name":"get_weather","arguments":{"city":"Paris"}}, {"arguments": {}, "name": "now"}]`, "",
			[]ToolCall{weather, {ID: "call_1", Name: "now", Arguments: `{}`}}},
		{ToolFormatGuided, `{"name":"get_weather","arguments":{"city":"Pa`, "", []ToolCall{{ID: "call_0", Name: "get_weather", Arguments: `{"city":"Pa`, Partial: true}}}, // cut off
		{ToolFormatGuided, `{"name":"get_wea`, `{"name":"get_wea`, nil},
		{ToolFormatGuided, `not a call`, `not a call`, nil},
	}
	for _, tc := range cases {
		for _, step := range []int{len(tc.out), 1, 3} {
			p := &ToolParser{Format: tc.format, Tools: []string{"get_weather", "now"}, IDPrefix: "call_"}
			var content strings.Builder
			var calls []ToolCall
			for i := 0; i < len(tc.out); i += step {
				c, cs := p.Feed([]byte(tc.out[i:min(i+step, len(tc.out))]))
				if tc.calls != nil && strings.ContainsAny(string(c), "{}") {
					t.Errorf("%s %q step %d: content %q leaks a call", tc.format, tc.out, step, c)
				}
				content.Write(c)
				calls = append(calls, cs...)
			}
			c, cs := p.Finish()
			content.Write(c)
			calls = append(calls, cs...)
			if content.String() != tc.content || !reflect.DeepEqual(calls, tc.calls) {
				t.Errorf("%s %q step %d:\n got %q %+v\nwant %q %+v", tc.format, tc.out, step, content.String(), calls, tc.content, tc.calls)
			}
		}
	}
}

// TestToolParserDeltas feeds guided outputs in pieces: each call's
// arguments come out as they arrive, in order, with its ID and name
// first (held back while the name is not yet written), and add up to the
// call's arguments.
func TestToolParserDeltas(t *testing.T) {
	out := `[{"name":"get_weather","arguments":{"city": "Pa ris","n":[1, {"a":"}"}]}},{"arguments":{"x":"\""},"name":"now"}]`
	want := []ToolCall{{ID: "c0", Name: "get_weather", Arguments: `{"city":"Pa ris","n":[1,{"a":"}"}]}`}, {ID: "c1", Name: "now", Arguments: `{"x":"\""}`}}
	for _, step := range []int{1, 2, 5, len(out)} {
		p := &ToolParser{Format: ToolFormatGuided, Tools: []string{"get_weather", "now"}, IDPrefix: "c", Live: true}
		var calls []ToolCall
		args := map[int]string{}
		var order []int
		pieces := 0
		for i := 0; i < len(out); i += step {
			content, cs := p.Feed([]byte(out[i:min(i+step, len(out))]))
			if len(content) > 0 {
				t.Fatalf("step %d: content %q", step, content)
			}
			for _, d := range p.Deltas() {
				if _, seen := args[d.Index]; !seen {
					order = append(order, d.Index)
					if d.ID != want[d.Index].ID || d.Name != want[d.Index].Name {
						t.Errorf("step %d: first delta of call %d: %+v", step, d.Index, d)
					}
				} else if d.ID != "" || d.Name != "" {
					t.Errorf("step %d: a later delta names the call again: %+v", step, d)
				}
				args[d.Index] += d.Arguments
				pieces++
			}
			calls = append(calls, cs...)
		}
		if c, cs := p.Finish(); len(c) > 0 || len(cs) > 0 {
			t.Errorf("step %d: Finish gave %q %+v", step, c, cs)
		}
		if !reflect.DeepEqual(calls, want) || !reflect.DeepEqual(order, []int{0, 1}) || args[0] != want[0].Arguments || args[1] != want[1].Arguments {
			t.Errorf("step %d: calls %+v, deltas in order %v adding up to %v", step, calls, order, args)
		}
		if step == 1 && pieces < 10 {
			t.Errorf("fed a byte at a time, the arguments came in %d pieces", pieces)
		}
	}
	// One call only without parallel calls.
	p := &ToolParser{Format: ToolFormatGuided, Tools: []string{"now"}, IDPrefix: "c", Single: true, Live: true}
	_, calls := p.Feed([]byte(`[{"name":"now","arguments":{}},{"name":"now","arguments":{}}]`))
	if d := p.Deltas(); len(calls) != 1 || len(d) != 2 || d[0].Name != "now" || !d[1].Done || d[1].Index != 0 {
		t.Errorf("single: calls %+v, deltas %+v", calls, d)
	}
	// A call cut off after it streamed: nothing more at the end.
	p = &ToolParser{Format: ToolFormatGuided, Tools: []string{"now"}, IDPrefix: "c", Live: true}
	p.Feed([]byte(`{"name":"now","arguments":{"a":`))
	if d := p.Deltas(); len(d) != 2 || d[0].Name != "now" || d[0].Arguments+d[1].Arguments != `{"a":` {
		t.Errorf("cut off: deltas %+v", d)
	}
	if c, cs := p.Finish(); len(c) > 0 || !reflect.DeepEqual(cs, []ToolCall{{ID: "c0", Name: "now", Arguments: `{"a":`, Partial: true}}) || len(p.Deltas()) > 0 {
		t.Errorf("cut off: Finish gave %q %+v", c, cs)
	}
}

func TestToolParserSingle(t *testing.T) {
	p := &ToolParser{Format: ToolFormatHermes, Tools: []string{"now"}, IDPrefix: "c", Single: true}
	_, calls := p.Feed([]byte(`<tool_call>{"name":"now"}</tool_call><tool_call>{"name":"now"}</tool_call>`))
	if len(calls) != 1 || calls[0].Arguments != "{}" {
		t.Fatalf("calls %+v, want one", calls)
	}
}

func TestTemplateToolFormat(t *testing.T) {
	if f := TemplateToolFormat("... <tool_call> ..."); f != ToolFormatHermes {
		t.Errorf("qwen: %s", f)
	}
	if f := TemplateToolFormat(`Respond in the format {"name": function name, "parameters": dictionary}`); f != ToolFormatLlama3 {
		t.Errorf("llama: %s", f)
	}
	if f := TemplateToolFormat(`{{- "[TOOL_CALLS]" + tool_calls|tojson }}`); f != ToolFormatMistral {
		t.Errorf("mistral: %s", f)
	}
}

// FuzzToolParser checks that feeding an output in pieces gives what
// feeding it whole gives, in both formats.
func FuzzToolParser(f *testing.F) {
	f.Add("a <tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call> b", 2)
	f.Add("<|python_tag|>{\"name\": \"now\", \"parameters\": {}}", 1)
	f.Add("<tool_call><tool_call>{}</tool_call>", 3)
	f.Add("[TOOL_CALLS]now[ARGS]{}", 2)
	f.Fuzz(func(t *testing.T, out string, step int) {
		if step <= 0 || step > 64 {
			return
		}
		for _, format := range []ToolFormat{ToolFormatHermes, ToolFormatLlama3, ToolFormatMistral} {
			run := func(step int) (string, []ToolCall) {
				p := &ToolParser{Format: format, Tools: []string{"now"}, IDPrefix: "c"}
				var content []byte
				var calls []ToolCall
				for i := 0; i < len(out); i += step {
					c, cs := p.Feed([]byte(out[i:min(i+step, len(out))]))
					content, calls = append(content, c...), append(calls, cs...)
				}
				c, cs := p.Finish()
				return string(append(content, c...)), append(calls, cs...)
			}
			c1, k1 := run(len(out) + 1)
			c2, k2 := run(step)
			if c1 != c2 || !reflect.DeepEqual(k1, k2) {
				t.Fatalf("%s %q: whole %q %v, in pieces of %d %q %v", format, out, c1, k1, step, c2, k2)
			}
		}
	})
}
