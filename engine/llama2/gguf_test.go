package llama2

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/streamgate/streamgate/engine/backend"
	"github.com/streamgate/streamgate/engine/gguf"
	"github.com/streamgate/streamgate/engine/gguf/ggufmodel"
	"github.com/streamgate/streamgate/engine/internal/mmap"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// ggufBackend writes a small random-weight qwen2 GGUF model (byte-level
// BPE vocabulary with ChatML tokens and a chat template) and opens it as
// GGUFConfig configures it.
func ggufBackend(t *testing.T, params map[string]string) (*Backend, *pb.ModelConfig) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := ggufmodel.Write(path, ggufmodel.Small("qwen2", gguf.Q8_0, 3)); err != nil {
		t.Fatal(err)
	}
	cfg, err := GGUFConfig("m", path)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range params {
		cfg.Parameters[k] = &pb.ModelParameter{StringValue: v}
	}
	return openConfig(t, backend.Config{Model: cfg}), cfg
}

func TestGGUFConfigPublishesTemplate(t *testing.T) {
	_, cfg := ggufBackend(t, nil)
	p := cfg.GetParameters()
	if !strings.Contains(p[ParamChatTemplate].GetStringValue(), "<|im_start|>") {
		t.Errorf("chat_template = %q", p[ParamChatTemplate].GetStringValue())
	}
	if got := p[ParamEOSToken].GetStringValue(); got != "<|im_end|>" {
		t.Errorf("eos_token = %q, want <|im_end|>", got)
	}
	if got := p[ParamBOSToken].GetStringValue(); got != "<|endoftext|>" {
		t.Errorf("bos_token = %q, want <|endoftext|>", got)
	}
}

// TestGGUFGenerate runs a rendered chat prompt through a GGUF model: its
// special-token text is one token each, generation streams, and the
// final counts add up.
func TestGGUFGenerate(t *testing.T) {
	b, _ := ggufBackend(t, nil)
	prompt := "<|im_start|>user\nthe world<|im_end|>\n<|im_start|>assistant\n"
	special, err := b.tok.Tokenize(context.Background(), prompt, false, true)
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := b.tok.Tokenize(context.Background(), prompt, false, false)
	if len(special) >= len(plain) {
		t.Fatalf("special tokens not parsed: %d tokens with, %d without", len(special), len(plain))
	}
	res := run(t, b, call{prompt: prompt, stream: true, params: `{"temperature":0,"max_tokens":12,"ignore_eos":true}`})
	if res.inTokens != uint32(len(special)) {
		t.Errorf("num_input_tokens = %d, want %d (qwen2 adds no BOS)", res.inTokens, len(special))
	}
	if res.outTokens != 12 || res.finish != "length" {
		t.Errorf("output tokens %d, finish %q; want 12, length", res.outTokens, res.finish)
	}
	if res.streamed() == "" {
		t.Error("no text streamed")
	}
	again := run(t, b, call{prompt: prompt, params: `{"temperature":0,"max_tokens":12,"ignore_eos":true}`, exclude: new(true)})
	if again.text != res.streamed() {
		t.Errorf("greedy text differs between runs: %q then %q", res.streamed(), again.text)
	}
}

func TestGGUFKVBudget(t *testing.T) {
	b, _ := ggufBackend(t, map[string]string{paramKVCacheMB: "1", paramMaxSequences: "16"})
	// 2 layers x 256 positions x 128 floats x 2 (K and V) x 4 bytes = 512 KiB.
	if b.maxSeq != 2 {
		t.Errorf("max sequences %d under a 1 MiB budget, want 2", b.maxSeq)
	}
	path := filepath.Join(t.TempDir(), "big.gguf")
	s := ggufmodel.Small("qwen2", gguf.Q8_0, 3)
	s.Context = 8192
	if err := ggufmodel.Write(path, s); err != nil {
		t.Fatal(err)
	}
	cfg, err := GGUFConfig("m", path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Parameters[paramKVCacheMB] = &pb.ModelParameter{StringValue: "1"}
	cfg.Parameters[paramMaxContext] = &pb.ModelParameter{StringValue: "8192"}
	if _, err := New(backend.Config{Model: cfg}); err == nil || !strings.Contains(err.Error(), "cannot hold the KV cache of one sequence") {
		t.Errorf("8192 positions in 1 MiB: %v", err)
	}
}

// TestGGUFNoMmap: the no_mmap parameter (serve --no-mmap) reaches the
// loader: the weights are copied onto huge pages where the platform has
// them and stay mapped without it; a value that is not a boolean is
// refused.
func TestGGUFNoMmap(t *testing.T) {
	for _, v := range []string{"", "false", "true"} {
		params := map[string]string{}
		if v != "" {
			params[paramNoMmap] = v
		}
		b, _ := ggufBackend(t, params)
		if want := v == "true" && mmap.HugePages; b.model.HugePages() != want {
			t.Errorf("no_mmap %q: weights on huge pages %v, want %v", v, b.model.HugePages(), want)
		}
	}
	_, cfg := ggufBackend(t, nil)
	cfg.Parameters[paramNoMmap] = &pb.ModelParameter{StringValue: "yes please"}
	if _, err := New(backend.Config{Model: cfg}); err == nil || !strings.Contains(err.Error(), `parameters.no_mmap: "yes please" is not true or false`) {
		t.Errorf("no_mmap \"yes please\": %v", err)
	}
}
