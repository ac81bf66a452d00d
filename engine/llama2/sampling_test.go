package llama2

import (
	"strings"
	"testing"
)

// The vLLM sampling extras on stories260K: each one's observable effect,
// and the golden outputs unchanged by their neutral values.

// TestNeutralSamplingExtrasKeepGoldens runs the two golden requests with
// every extra at its neutral value.
func TestNeutralSamplingExtrasKeepGoldens(t *testing.T) {
	b := realBackend(t, nil)
	for _, neutral := range []string{
		`"top_k":0,"min_p":0,"repetition_penalty":1,"frequency_penalty":0,"presence_penalty":0`,
		`"top_k":-1,"min_p":null,"repetition_penalty":null`,
		`"top_k":512`, // the whole vocabulary
	} {
		res := run(t, b, call{params: `{"temperature":0,"max_tokens":200,` + neutral + `}`})
		checkGolden(t, res.text, 464, "Once upon a time, there was a little girl named Lily.", "beeb5cb46785efee81a8545300b31e396b595e5ce6f3b77db201545501981d14")
		res = run(t, b, call{prompt: "Once upon a time", params: `{"temperature":1.0,"top_p":0.9,"seed":42,"max_tokens":252,` + neutral + `}`})
		checkGolden(t, res.text, 562, "Once upon a time, there was a brave little boy named Tim.", "b0c1c84f484c378f48cd5d92a020e40c9e7e9fb5362c07c3ff46c349b057845f")
	}
}

// repetitive is a phrase stories260K's greedy continuation of "Once upon
// a time" repeats three times in 200 tokens.
const repetitive = "didn't know what to do"

// distinctWords returns the share of distinct words in text.
func distinctWords(text string) float64 {
	w := strings.Fields(text)
	seen := map[string]bool{}
	for _, x := range w {
		seen[x] = true
	}
	return float64(len(seen)) / float64(len(w))
}

func TestPenaltiesReduceRepetition(t *testing.T) {
	b := realBackend(t, nil)
	base := `"temperature":0,"max_tokens":200`
	greedy := run(t, b, call{prompt: "Once upon a time", params: "{" + base + "}"}).text
	if n := strings.Count(greedy, repetitive); n != 3 {
		t.Fatalf("greedy text repeats %q %d times, want 3 (has the model changed?):\n%s", repetitive, n, greedy)
	}
	for _, p := range []string{`"repetition_penalty":1.3`, `"frequency_penalty":1`, `"presence_penalty":1`} {
		got := run(t, b, call{prompt: "Once upon a time", params: "{" + base + "," + p + "}"}).text
		if strings.Count(got, repetitive) >= 3 || distinctWords(got) <= distinctWords(greedy) {
			t.Errorf("%s: %q %d times, %.2f of the words distinct (greedy: 3 times, %.2f):\n%s",
				p, repetitive, strings.Count(got, repetitive), distinctWords(got), distinctWords(greedy), got)
		}
	}
	// Below 1, the repetition penalty favours what was seen.
	got := run(t, b, call{prompt: "Once upon a time", params: "{" + base + `,"repetition_penalty":0.7}`}).text
	if distinctWords(got) >= distinctWords(greedy) {
		t.Errorf("repetition_penalty 0.7: %.2f of the words distinct, want fewer than greedy's %.2f:\n%s", distinctWords(got), distinctWords(greedy), got)
	}
}

func TestTopKAndMinP(t *testing.T) {
	b := realBackend(t, nil)
	prompt := "Once upon a time"
	greedy := run(t, b, call{prompt: prompt, params: `{"temperature":0,"max_tokens":100}`}).text
	sampled := run(t, b, call{prompt: prompt, params: `{"temperature":1,"seed":3,"max_tokens":100}`}).text
	if sampled == greedy {
		t.Fatal("seed 3 at temperature 1 gives the greedy text; pick another seed")
	}
	for _, tc := range []struct {
		params     string
		wantGreedy bool
	}{
		{`"top_k":1`, true},  // only the most likely token
		{`"min_p":1`, true},  // only tokens as likely as the most likely
		{`"top_k":3`, false}, // fewer choices than plain sampling: another text
		{`"min_p":0.2`, false},
	} {
		got := run(t, b, call{prompt: prompt, params: `{"temperature":1,"seed":3,"max_tokens":100,` + tc.params + `}`}).text
		switch {
		case tc.wantGreedy && got != greedy:
			t.Errorf("%s: got %q, want the greedy text %q", tc.params, got, greedy)
		case !tc.wantGreedy && (got == sampled || got == greedy):
			t.Errorf("%s: got the same text as plain sampling or greedy: %q", tc.params, got)
		}
	}
}
