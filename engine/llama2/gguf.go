package llama2

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/streamgate/streamgate/engine/gguf"
	"github.com/streamgate/streamgate/engine/llama2/tokenizer"
	"github.com/streamgate/streamgate/engine/llama2/transformer"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// Parameters published in a GGUF model's configuration for the gateway,
// which renders the chat template (as Triton's OpenAI frontend does).
const (
	ParamChatTemplate = "chat_template"
	ParamBOSToken     = "bos_token"
	ParamEOSToken     = "eos_token"
)

// loadGGUF opens a GGUF model: the transformer, its tokenizer, and the BOS
// token to put in front of prompts (-1: none).
func loadGGUF(path string, maxContext int) (*transformer.Model, tokenizer.Codec, int, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, nil, -1, err
	}
	v, err := vocabOf(f)
	if err != nil {
		f.Close()
		return nil, nil, -1, fmt.Errorf("gguf %s: %w", path, err)
	}
	tok, err := tokenizer.FromVocab(v)
	if err != nil {
		f.Close()
		return nil, nil, -1, fmt.Errorf("gguf %s: %w", path, err)
	}
	m, err := transformer.FromGGUF(f, transformer.GGUFOptions{MaxContext: maxContext})
	if err != nil {
		f.Close()
		return nil, nil, -1, fmt.Errorf("gguf %s: %w", path, err)
	}
	if n := m.Config().Vocab; n != tok.Vocab() {
		m.Close()
		return nil, nil, -1, fmt.Errorf("gguf %s: token_embd has %d rows, the vocabulary %d tokens", path, n, tok.Vocab())
	}
	bos := -1
	if v.AddBOS {
		bos = int(v.BOS)
	}
	return m, tok, bos, nil
}

// vocabOf reads the tokenizer.ggml.* metadata as llama.cpp does: the same
// defaults where a key is absent (a SentencePiece vocabulary's BOS 1, EOS
// 2 and unknown 0; BOS added for SentencePiece and Llama 3 vocabularies;
// the dummy prefix for SentencePiece), a special token id outside the
// vocabulary ignored, integer scores, and an empty token named
// [EMPTY_<id>].
func vocabOf(f *gguf.File) (tokenizer.Vocab, error) {
	model, ok := f.String("tokenizer.ggml.model")
	if !ok {
		return tokenizer.Vocab{}, fmt.Errorf("no tokenizer.ggml.model: the file carries no tokenizer")
	}
	v := tokenizer.NewVocab(model)
	v.Pre, _ = f.String("tokenizer.ggml.pre")
	v.Name, _ = f.String("general.name")
	var bad []string
	list := func(key string, out any) {
		val, ok := f.Metadata[key]
		if !ok {
			return
		}
		switch o := out.(type) {
		case *[]string:
			*o, ok = val.([]string)
		case *[]float32:
			if ints, isInt := val.([]int32); isInt {
				*o = make([]float32, len(ints))
				for i, n := range ints {
					(*o)[i] = float32(n)
				}
				return
			}
			*o, ok = val.([]float32)
		case *[]int32:
			*o, ok = val.([]int32)
		}
		if !ok {
			bad = append(bad, key)
		}
	}
	list("tokenizer.ggml.tokens", &v.Tokens)
	list("tokenizer.ggml.scores", &v.Scores)
	list("tokenizer.ggml.token_type", &v.Types)
	list("tokenizer.ggml.merges", &v.Merges)
	if len(bad) > 0 {
		return v, fmt.Errorf("tokenizer metadata %v has the wrong type", bad)
	}
	if slices.Contains(v.Tokens, "") {
		v.Tokens = slices.Clone(v.Tokens) // the metadata's own slice stays as read
		for i, tok := range v.Tokens {
			if tok == "" {
				v.Tokens[i] = "[EMPTY_" + strconv.Itoa(i) + "]"
			}
		}
	}
	n := uint64(len(v.Tokens))
	if model == "llama" {
		for _, d := range []struct {
			p  *int32
			id int32
		}{{&v.BOS, 1}, {&v.EOS, 2}, {&v.UNK, 0}} {
			if uint64(d.id) < n {
				*d.p = d.id
			}
		}
	}
	for _, k := range []struct {
		key string
		p   *int32
	}{{"bos", &v.BOS}, {"eos", &v.EOS}, {"unknown", &v.UNK}, {"padding", &v.PAD}, {"eot", &v.EOT}, {"eom", &v.EOM},
		{"prefix", &v.FIM[0]}, {"suffix", &v.FIM[1]}, {"middle", &v.FIM[2]},
		{"fim_pre", &v.FIM[0]}, {"fim_suf", &v.FIM[1]}, {"fim_mid", &v.FIM[2]},
		{"fim_pad", &v.FIM[3]}, {"fim_rep", &v.FIM[4]}, {"fim_sep", &v.FIM[5]}} {
		if id, ok := f.Uint("tokenizer.ggml." + k.key + "_token_id"); ok && id < n {
			*k.p = int32(id)
		}
	}
	flag := func(key string, def bool) bool {
		if b, ok := f.Bool(key); ok {
			return b
		}
		return def
	}
	v.AddBOS = flag("tokenizer.ggml.add_bos_token", tokenizer.DefaultAddBOS(model, v.Pre))
	v.AddEOS = flag("tokenizer.ggml.add_eos_token", false)
	v.AddSpacePrefix = flag("tokenizer.ggml.add_space_prefix", model == "llama")
	return v, nil
}

// GGUFConfig returns the configuration of a GGUF model named name: that
// of Config, with the file as parameters.gguf, and the file's chat
// template and BOS and EOS token text as parameters.chat_template,
// bos_token and eos_token (absent when the file has none). It reads only
// the file's metadata.
func GGUFConfig(name, path string) (*pb.ModelConfig, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cfg := Config(name, "", "")
	delete(cfg.Parameters, paramCheckpoint)
	delete(cfg.Parameters, paramTokenizer)
	str := func(v string) *pb.ModelParameter { return &pb.ModelParameter{StringValue: v} }
	cfg.Parameters[paramGGUF] = str(path)
	if t, ok := f.String("tokenizer.chat_template"); ok {
		cfg.Parameters[ParamChatTemplate] = str(t)
	}
	if v, err := vocabOf(f); err == nil {
		if v.BOS != tokenizer.NoToken {
			cfg.Parameters[ParamBOSToken] = str(v.Tokens[v.BOS])
		}
		if v.EOS != tokenizer.NoToken {
			cfg.Parameters[ParamEOSToken] = str(v.Tokens[v.EOS])
		}
	}
	return cfg, nil
}

// Info describes a GGUF model file for listings.
type Info struct {
	Arch         string // general.architecture
	Name         string // general.name
	Quantization string // the type of most weight bytes (Q4_K, Q8_0, ...)
	Parameters   int64  // weights, all tensors
	Context      int    // context length the file declares
	Size         int64  // bytes
}

// ParamsString formats a parameter count as people write it: 494M, 1.2B.
func (i Info) ParamsString() string {
	switch p := float64(i.Parameters); {
	case p >= 1e9:
		return strconv.FormatFloat(p/1e9, 'f', 1, 64) + "B"
	case p >= 1e7:
		return strconv.FormatFloat(p/1e6, 'f', 0, 64) + "M"
	case p >= 1e6:
		return strconv.FormatFloat(p/1e6, 'f', 1, 64) + "M"
	default:
		return strconv.FormatFloat(p/1e3, 'f', 0, 64) + "K"
	}
}

// Describe reads a GGUF file's metadata for listings.
func Describe(path string) (Info, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return Info{}, err
	}
	defer f.Close()
	in := Info{Size: f.Size()}
	in.Arch, _ = f.String("general.architecture")
	in.Name, _ = f.String("general.name")
	if n, ok := f.Uint(in.Arch + ".context_length"); ok {
		in.Context = int(n)
	}
	bytesOf := map[gguf.Type]uint64{}
	for _, t := range f.Tensors {
		in.Parameters += int64(t.Elements())
		if len(t.Dims) == 2 {
			bytesOf[t.Type] += t.Bytes()
		}
	}
	var most uint64
	for t, n := range bytesOf {
		if n > most || n == most && t.String() < in.Quantization {
			most, in.Quantization = n, t.String()
		}
	}
	return in, nil
}
