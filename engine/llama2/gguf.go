package llama2

import (
	"fmt"
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

// vocabOf reads the tokenizer.ggml.* metadata.
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
			if *o, ok = val.([]string); !ok {
				bad = append(bad, key)
			}
		case *[]float32:
			if *o, ok = val.([]float32); !ok {
				bad = append(bad, key)
			}
		case *[]int32:
			if *o, ok = val.([]int32); !ok {
				bad = append(bad, key)
			}
		}
	}
	list("tokenizer.ggml.tokens", &v.Tokens)
	list("tokenizer.ggml.scores", &v.Scores)
	list("tokenizer.ggml.token_type", &v.Types)
	list("tokenizer.ggml.merges", &v.Merges)
	if len(bad) > 0 {
		return v, fmt.Errorf("tokenizer metadata %v has the wrong type", bad)
	}
	for _, id := range []struct {
		key string
		p   *int32
	}{{"bos", &v.BOS}, {"eos", &v.EOS}, {"unknown", &v.UNK}, {"padding", &v.PAD}, {"eot", &v.EOT}, {"eom", &v.EOM}} {
		if n, ok := f.Uint("tokenizer.ggml." + id.key + "_token_id"); ok && n < 1<<31 {
			*id.p = int32(n)
		}
	}
	flag := func(key string, def bool) bool {
		if b, ok := f.Bool(key); ok {
			return b
		}
		return def
	}
	// llama.cpp's defaults: SentencePiece vocabularies add BOS and a
	// leading space, byte-level BPE ones neither.
	v.AddBOS = flag("tokenizer.ggml.add_bos_token", model == "llama")
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
	toks, _ := f.Metadata["tokenizer.ggml.tokens"].([]string)
	for key, param := range map[string]string{"tokenizer.ggml.bos_token_id": ParamBOSToken, "tokenizer.ggml.eos_token_id": ParamEOSToken} {
		if id, ok := f.Uint(key); ok && id < uint64(len(toks)) {
			cfg.Parameters[param] = str(toks[id])
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
