package e2e

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// The sampling settings of the llama2 engine work as request parameters of
// Triton's generate extension, as in sampling_parameters; a misspelt one
// is refused with its name, not ignored.
func TestGenerateSamplingParameters(t *testing.T) {
	s := startStack(t)
	if s.textModel() != storiesModel {
		t.Skip("stories260K weights not found: the sampling parameters are the llama2 engine's")
	}
	const path = "/v2/models/stories260k/generate_stream"
	resp, body := s.post(t, path, `{"text_input":"Once upon a time","stream":true,"parameters":{"max_tokens":3,"temperature":0.5,"top_p":0.9,"seed":7}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("max_tokens 3: %d %s", resp.StatusCode, body)
	}
	r := newSSEReader(strings.NewReader(body))
	var tokens uint32
	var events int
	var finish string
	for {
		ev, err := r.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%v in %s", err, body)
		}
		events++
		var out struct {
			NumOutputTokens *uint32 `json:"num_output_tokens"`
			FinishReason    string  `json:"finish_reason"`
		}
		if err := json.Unmarshal([]byte(ev.Data), &out); err != nil {
			t.Fatalf("event %q: %v", ev.Data, err)
		}
		if out.NumOutputTokens != nil {
			tokens = *out.NumOutputTokens
			finish = out.FinishReason
		}
	}
	if tokens != 3 || finish != "length" || events < 2 {
		t.Errorf("max_tokens 3 as a parameter: %d tokens, finish %v, %d events:\n%s", tokens, finish, events, body)
	}

	for _, c := range []struct{ body, want string }{
		{`{"text_input":"Once upon a time","parameters":{"max_token":3}}`, `unknown request parameter \"max_token\"`},
		{`{"text_input":"Once upon a time","parameters":{"max_tokens":"3"}}`, `parameter max_tokens must be an integer \u003e= 1, got \"3\"`},
		{`{"text_input":"Once upon a time","parameters":{"max_tokens":3},"sampling_parameters":"{\"max_tokens\":4}"}`, `max_tokens is given both as a request parameter and in sampling_parameters`},
	} {
		resp, got := s.post(t, path, c.body)
		// Triton answers an error of a stream as an event, with the
		// status of the error.
		if resp.StatusCode != 400 || !strings.Contains(got, `data: {"error":"llama2: `+c.want) {
			t.Errorf("%s: %d %s, want 400 naming %s", c.body, resp.StatusCode, got, c.want)
		}
	}
}
