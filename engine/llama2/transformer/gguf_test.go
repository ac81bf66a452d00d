package transformer_test

import (
	"bytes"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/streamgate/streamgate/engine/gguf"
	"github.com/streamgate/streamgate/engine/gguf/ggufmodel"
	"github.com/streamgate/streamgate/engine/llama2/kernels"
	"github.com/streamgate/streamgate/engine/llama2/transformer"
)

// fromSpec builds a model from s, after edit changes its metadata and
// tensors.
func fromSpec(t *testing.T, s ggufmodel.Spec, edit func(meta []gguf.KV, tensors []gguf.NewTensor) ([]gguf.KV, []gguf.NewTensor)) (*transformer.Model, error) {
	t.Helper()
	meta, tensors, err := ggufmodel.Build(s)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		meta, tensors = edit(meta, tensors)
	}
	var buf bytes.Buffer
	if err := gguf.Write(&buf, meta, tensors); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return transformer.FromGGUF(f, transformer.GGUFOptions{MaxContext: 128})
}

func setMeta(key string, v any) func([]gguf.KV, []gguf.NewTensor) ([]gguf.KV, []gguf.NewTensor) {
	return func(meta []gguf.KV, ts []gguf.NewTensor) ([]gguf.KV, []gguf.NewTensor) {
		for i := range meta {
			if meta[i].Key == key {
				meta[i].Value = v
				return meta, ts
			}
		}
		return append(meta, gguf.KV{Key: key, Value: v}), ts
	}
}

func TestFromGGUFConfig(t *testing.T) {
	m, err := fromSpec(t, ggufmodel.Small("qwen3", gguf.Q4_K, 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config()
	if c.Arch != "qwen3" || c.Dim != 256 || c.HeadSize() != 128 || c.QDim() != 512 || c.KVHeads != 2 ||
		c.SeqLen != 128 || !c.RopeNeox || c.NormEps != 1e-6 || c.RopeBase != 1e6 || c.SharedClassifier {
		t.Errorf("config %+v", c)
	}
	m.Close()
}

func TestFromGGUFRefuses(t *testing.T) {
	q3k := func(meta []gguf.KV, ts []gguf.NewTensor) ([]gguf.KV, []gguf.NewTensor) {
		for i := range ts {
			if ts[i].Name == "blk.0.ffn_up.weight" {
				ts[i].Type = gguf.Q3_K
				ts[i].Data = make([]byte, 256/256*110*512)
			}
		}
		return meta, ts
	}
	drop := func(name string) func([]gguf.KV, []gguf.NewTensor) ([]gguf.KV, []gguf.NewTensor) {
		return func(meta []gguf.KV, ts []gguf.NewTensor) ([]gguf.KV, []gguf.NewTensor) {
			out := ts[:0]
			for _, x := range ts {
				if x.Name != name {
					out = append(out, x)
				}
			}
			return meta, out
		}
	}
	for name, c := range map[string]struct {
		edit        func([]gguf.KV, []gguf.NewTensor) ([]gguf.KV, []gguf.NewTensor)
		unsupported bool
		want        string
	}{
		"architecture": {setMeta("general.architecture", "gemma2"), true, `architecture "gemma2" (supported: llama, qwen2, qwen3)`},
		"tensor type":  {q3k, true, "tensor blk.0.ffn_up.weight has type Q3_K (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)"},
		"yarn":         {setMeta("qwen2.rope.scaling.type", "yarn"), true, `RoPE scaling "yarn"`},
		"missing bias": {drop("blk.1.attn_k.bias"), false, "tensor blk.1.attn_k.bias is missing"},
		"heads":        {setMeta("qwen2.attention.head_count", uint32(0)), false, "qwen2.attention.head_count = 0"},
	} {
		_, err := fromSpec(t, ggufmodel.Small("qwen2", gguf.Q8_0, 1), c.edit)
		wantErr := transformer.ErrGGUFModel
		if c.unsupported {
			wantErr = transformer.ErrGGUFUnsupported
		}
		if err == nil || !errors.Is(err, wantErr) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %v with %q", name, err, wantErr, c.want)
		}
	}
}

// TestFromGGUFHugePages checks that the weights copied onto huge pages
// (the default on Linux; tied embeddings copied once) give the logits of
// the weights read where the file maps them, bit for bit, over a prompt
// pass and decode steps, for a legacy and a K-quant type.
func TestFromGGUFHugePages(t *testing.T) {
	for _, typ := range []gguf.Type{gguf.Q8_0, gguf.Q4_K} {
		s := ggufmodel.Small("qwen2", typ, 3)
		s.Tied = true
		path := filepath.Join(t.TempDir(), "m.gguf")
		if err := ggufmodel.Write(path, s); err != nil {
			t.Fatal(err)
		}
		var runs [2][][]float32
		for i, keep := range []bool{false, true} {
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			m, err := transformer.FromGGUF(f, transformer.GGUFOptions{MaxContext: 64, KeepMapped: keep})
			if err != nil {
				f.Close()
				t.Fatal(err)
			}
			pool := kernels.NewPool(1)
			ws := m.NewWorkspace(kernels.NewCPU(pool), transformer.WorkspaceOptions{MaxRows: 4})
			sess := m.NewSession()
			steps := []transformer.Step{{Session: sess, Pos: 0, Token: 5}, {Session: sess, Pos: 1, Token: 9}, {Session: sess, Pos: 2, Token: 30}}
			for pos := 2; pos < 6; pos++ {
				logits := make([]float32, m.Config().Vocab)
				steps[len(steps)-1].Logits = logits
				if err := ws.Forward(steps); err != nil {
					t.Fatal(err)
				}
				runs[i] = append(runs[i], logits)
				steps = []transformer.Step{{Session: sess, Pos: pos + 1, Token: 11 + pos}}
			}
			pool.Close()
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
		}
		for s := range runs[0] {
			for j, v := range runs[0][s] {
				if math.Float32bits(v) != math.Float32bits(runs[1][s][j]) {
					t.Fatalf("%v step %d logit %d: %g on huge pages, %g mapped", typ, s, j, v, runs[1][s][j])
				}
			}
		}
	}
}
