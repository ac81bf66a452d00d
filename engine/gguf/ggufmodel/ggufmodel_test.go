package ggufmodel

import (
	"path/filepath"
	"testing"

	"github.com/streamgate/streamgate/engine/gguf"
)

// TestWriteRead writes every type (llama) and every architecture (Q8_0)
// and reads them back. (The parity tests of engine/llama2/transformer run
// every pair through llama.cpp.)
func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	for _, arch := range []string{"llama", "qwen2", "qwen3"} {
		for _, typ := range []gguf.Type{gguf.F32, gguf.F16, gguf.BF16, gguf.Q8_0, gguf.Q4_0, gguf.Q4_K, gguf.Q6_K} {
			if arch != "llama" && typ != gguf.Q8_0 {
				continue
			}
			p := filepath.Join(dir, arch+"-"+typ.String()+".gguf")
			if err := Write(p, Small(arch, typ, 1)); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			if a, _ := f.String("general.architecture"); a != arch {
				t.Errorf("%s: architecture %q", p, a)
			}
			info, _, ok := f.Tensor("blk.1.ffn_down.weight")
			if !ok || info.Type != typ || info.Dims[0] != 512 || info.Dims[1] != 256 {
				t.Errorf("%s: ffn_down %+v", p, info)
			}
			f.Close()
		}
	}
}
