package llama2

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// The golden outputs of llama2.c's run.c on stories260K: the
// sha256 of the printed text, prompt included.
func TestGoldenGreedy(t *testing.T) {
	b := realBackend(t, nil)
	// run.c -t 0 -n 200: 200 positions from BOS, so at most 200 samples.
	p := `{"temperature": 0, "max_tokens": 200}`
	for _, stream := range []bool{false, true} {
		res := run(t, b, call{prompt: "", stream: stream, params: p})
		text := res.text
		if stream {
			text = res.streamed() + res.text
		}
		checkGolden(t, text, 464, "Once upon a time, there was a little girl named Lily.", "beeb5cb46785efee81a8545300b31e396b595e5ce6f3b77db201545501981d14")
		if res.inTokens != 1 {
			t.Errorf("num_input_tokens = %d, want 1 (BOS)", res.inTokens)
		}
	}
}

func TestGoldenSampled(t *testing.T) {
	b := realBackend(t, nil)
	// run.c -t 1.0 -p 0.9 -s 42 -n 256 -i "Once upon a time": the 5 prompt
	// tokens take positions 0..4, sampling starts at position 4, so at most
	// 256-5+1 = 252 samples.
	p := `{"temperature": 1.0, "top_p": 0.9, "seed": 42, "max_tokens": 252}`
	const sum = "b0c1c84f484c378f48cd5d92a020e40c9e7e9fb5362c07c3ff46c349b057845f"
	res := run(t, b, call{prompt: "Once upon a time", params: p})
	checkGolden(t, res.text, 562, "Once upon a time, there was a brave little boy named Tim.", sum)
	if res.inTokens != 5 {
		t.Errorf("num_input_tokens = %d, want 5", res.inTokens)
	}
	res = run(t, b, call{prompt: "Once upon a time", stream: true, params: p})
	checkGolden(t, "Once upon a time"+res.streamed()+res.text, 562, "Once upon a time, there was a brave", sum)
}

func checkGolden(t *testing.T, text string, size int, start, sum string) {
	t.Helper()
	got := sha256.Sum256([]byte(text))
	if len(text) != size || !strings.HasPrefix(text, start) || hex.EncodeToString(got[:]) != sum {
		t.Errorf("generated %d bytes, sha256 %x, want %d bytes starting %q, sha256 %s:\n%s", len(text), got, size, start, sum, text)
	}
}
