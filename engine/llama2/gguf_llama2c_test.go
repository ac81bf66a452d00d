package llama2

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/streamgate/streamgate/engine/backend"
	"github.com/streamgate/streamgate/engine/gguf/ggufmodel"
)

// TestGGUFFromLlama2C converts stories260K and tok512 into a GGUF file
// (ggufmodel.Llama2C) and serves it as a GGUF model: its tokenizer gives
// llama2.c's token ids, and its greedy and sampled generations are run.c's
// golden texts, token for token, as the checkpoint itself gives them.
func TestGGUFFromLlama2C(t *testing.T) {
	dir := modelDir(t)
	path := convertStories(t, dir, "")
	cfg, err := GGUFConfig("stories", path)
	if err != nil {
		t.Fatal(err)
	}
	g := openConfig(t, backend.Config{Model: cfg})
	c := realBackend(t, nil)
	for text, want := range map[string][]int{"Once upon a time": {1, 403, 407, 261, 378}, "Hello world": {1, 346, 306, 414, 263, 304, 341}} {
		got, err := g.tokenize(context.Background(), text)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("GGUF tokens of %q: %v, %v; want llama2.c's %v", text, got, err, want)
		}
	}
	greedy := run(t, g, call{params: `{"temperature": 0, "max_tokens": 200}`})
	checkGolden(t, greedy.text, 464, "Once upon a time, there was a little girl named Lily.", "beeb5cb46785efee81a8545300b31e396b595e5ce6f3b77db201545501981d14")
	for _, p := range []struct{ prompt, params string }{
		{"Once upon a time", `{"temperature": 1.0, "top_p": 0.9, "seed": 42, "max_tokens": 252}`},
		{"Lily and Tom went to the park.", `{"temperature": 0, "max_tokens": 300}`},
	} {
		want := run(t, c, call{prompt: p.prompt, params: p.params})
		got := run(t, g, call{prompt: p.prompt, params: p.params})
		if got.text != want.text || got.inTokens != want.inTokens || got.outTokens != want.outTokens || got.finish != want.finish {
			t.Errorf("prompt %q %s: GGUF gave %d+%d tokens (%s) %q; the checkpoint %d+%d (%s) %q", p.prompt, p.params,
				got.inTokens, got.outTokens, got.finish, got.text, want.inTokens, want.outTokens, want.finish, want.text)
		}
	}
}

// convertStories writes stories260K.gguf, converted from the llama2.c
// files in dir with chatTemplate, into a temporary directory.
func convertStories(t *testing.T, dir, chatTemplate string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stories260K.gguf")
	if err := ggufmodel.WriteLlama2C(path, filepath.Join(dir, CheckpointFile), filepath.Join(dir, TokenizerFile), chatTemplate); err != nil {
		t.Fatal(err)
	}
	return path
}
