package e2e

import (
	"encoding/json"
	"io"
	"testing"
)

// A chat without max_tokens runs until the model ends its answer or its
// context is full, as OpenAI's and vLLM's chat do, not for the 16 tokens
// of vLLM's sampling default; a completion without it keeps OpenAI's 16.
func TestMaxTokensDefaults(t *testing.T) {
	s := startStack(t)
	if s.textModel() != storiesModel {
		t.Skip("stories260K weights not found: echo has no token limit of its own to test against")
	}
	c := httpClient(t)
	for _, tc := range []struct {
		path, body string
		check      func(tokens int, finish string) bool
		want       string
	}{
		{"/v1/chat/completions", `{"model":"stories260k","temperature":0,"messages":[{"role":"user","content":"Once upon a time"}]}`,
			func(n int, finish string) bool { return n > 16 && (finish == "stop" || finish == "length") },
			"more than 16 tokens, ending at the model's end of text or its context"},
		{"/v1/completions", `{"model":"stories260k","temperature":0,"prompt":"Once upon a time"}`,
			func(n int, finish string) bool { return n == 16 && finish == "length" },
			"16 tokens, finish_reason length"},
	} {
		resp := post(t, t.Context(), c, s.url+tc.path, tc.body)
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s %v", tc.path, resp.StatusCode, raw, err)
		}
		var v struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
			}
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		if err := json.Unmarshal(raw, &v); err != nil || len(v.Choices) != 1 {
			t.Fatalf("%s: %s", tc.path, raw)
		}
		if !tc.check(v.Usage.CompletionTokens, v.Choices[0].FinishReason) {
			t.Errorf("%s without max_tokens: %d tokens, finish_reason %q; want %s",
				tc.path, v.Usage.CompletionTokens, v.Choices[0].FinishReason, tc.want)
		}
	}
}

// vLLM's sampling extras reach the llama2 sampler: top_k 1 at temperature
// 1 is greedy whatever the seed, and a repetition penalty changes a
// greedy answer that repeats itself; absent, the greedy answer is the
// one it always was.
func TestSamplingExtras(t *testing.T) {
	s := startStack(t)
	if s.textModel() != storiesModel {
		t.Skip("stories260K weights not found: echo ignores sampling")
	}
	c := httpClient(t)
	complete := func(extra string) string {
		t.Helper()
		resp := post(t, t.Context(), c, s.url+"/v1/completions", `{"model":"stories260k","prompt":"Once upon a time","max_tokens":64`+extra+`}`)
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s %v", extra, resp.StatusCode, raw, err)
		}
		var v struct{ Choices []struct{ Text string } }
		if err := json.Unmarshal(raw, &v); err != nil || len(v.Choices) != 1 {
			t.Fatalf("%s: %s", extra, raw)
		}
		return v.Choices[0].Text
	}
	greedy := complete(`,"temperature":0`)
	for _, seed := range []string{"1", "2", "3"} {
		if got := complete(`,"temperature":1,"top_k":1,"seed":` + seed); got != greedy {
			t.Errorf("top_k 1, seed %s: %q, want the greedy %q", seed, got, greedy)
		}
	}
	if got := complete(`,"temperature":0,"repetition_penalty":1.5,"frequency_penalty":0.5`); got == greedy {
		t.Errorf("penalties changed nothing: %q", got)
	}
	if got := complete(`,"temperature":0,"top_k":0,"min_p":0,"repetition_penalty":1,"presence_penalty":0`); got != greedy {
		t.Errorf("extras at their off values: %q, want %q", got, greedy)
	}
}
