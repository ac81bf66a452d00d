package stack

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/streamgate/streamgate/engine/gguf"
	"github.com/streamgate/streamgate/engine/gguf/ggufmodel"
)

// TestTextModelsGGUF: --model takes a GGUF file by path or, once in the
// model cache, by its name; its config carries the file, the chat
// template and the context and KV-cache flags.
func TestTextModelsGGUF(t *testing.T) {
	cache := t.TempDir()
	path := filepath.Join(cache, "Tiny-Qwen2-Q8_0.gguf")
	if err := ggufmodel.Write(path, ggufmodel.Small("qwen2", gguf.Q8_0, 1)); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	for _, arg := range []string{path, "tiny-qwen2-q8_0", "Tiny-Qwen2-Q8_0"} {
		cfgs, err := TextModels(EngineFlags{Model: arg, ModelCache: cache, MaxContext: 128, KVCacheMB: 64, NoMmap: true}, log)
		if err != nil {
			t.Fatalf("--model %s: %v", arg, err)
		}
		if len(cfgs) != 1 || cfgs[0].Name != "tiny-qwen2-q8_0" {
			t.Fatalf("--model %s: %d configs, first %q", arg, len(cfgs), cfgs[0].GetName())
		}
		p := cfgs[0].GetParameters()
		if p["gguf"].GetStringValue() != path || p["max_context"].GetStringValue() != "128" ||
			p["kv_cache_mb"].GetStringValue() != "64" || p["no_mmap"].GetStringValue() != "true" || !strings.Contains(p["chat_template"].GetStringValue(), "<|im_start|>") {
			t.Errorf("--model %s: parameters %v", arg, p)
		}
	}
	// Without --model, GGUF files in the cache are served too.
	cfgs, err := TextModels(EngineFlags{ModelCache: cache, MaxContext: 128, KVCacheMB: 64}, log)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range cfgs {
		found = found || c.Name == "tiny-qwen2-q8_0"
	}
	if !found {
		t.Error("the cached GGUF file is not served without --model")
	}
	for arg, want := range map[string]string{
		filepath.Join(cache, "missing.gguf"): "no such file",
		"nothing-like-this":                  "unknown model",
	} {
		if _, err := TextModels(EngineFlags{Model: arg, ModelCache: cache}, log); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--model %s: %v, want %q", arg, err, want)
		}
	}
}
