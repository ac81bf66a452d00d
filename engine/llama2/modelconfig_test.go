package llama2

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/streamgate/streamgate/engine/backend"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

func TestConfig(t *testing.T) {
	c := Config("stories260k", "/m/stories260K.bin", "/m/tok512.bin")
	if c.GetName() != "stories260k" || c.GetBackend() != "llama2" || c.GetMaxBatchSize() != 0 || !c.GetModelTransactionPolicy().GetDecoupled() {
		t.Errorf("config %v", c)
	}
	if got := backend.Param(c, "checkpoint", ""); got != "/m/stories260K.bin" {
		t.Errorf("checkpoint %q", got)
	}
	if got := backend.Param(c, "tokenizer", ""); got != "/m/tok512.bin" {
		t.Errorf("tokenizer %q", got)
	}
	if n := c.GetInstanceGroup()[0].GetCount(); n < DefaultMaxSequences {
		t.Errorf("instance count %d < max_sequences", n)
	}
	in := map[string]*pb.ModelInput{}
	for _, i := range c.GetInput() {
		in[i.GetName()] = i
	}
	for name, want := range map[string]struct {
		dt       pb.DataType
		optional bool
	}{
		"text_input": {pb.DataType_TYPE_STRING, false}, "stream": {pb.DataType_TYPE_BOOL, true},
		"sampling_parameters": {pb.DataType_TYPE_STRING, true}, "exclude_input_in_output": {pb.DataType_TYPE_BOOL, true},
	} {
		if i := in[name]; i == nil || i.GetDataType() != want.dt || i.GetOptional() != want.optional || len(i.GetDims()) != 1 || i.GetDims()[0] != 1 {
			t.Errorf("input %s = %v", name, i)
		}
	}
	out := map[string]*pb.ModelOutput{}
	for _, o := range c.GetOutput() {
		out[o.GetName()] = o
	}
	for name, want := range map[string]struct {
		dt  pb.DataType
		dim int64
	}{
		"text_output": {pb.DataType_TYPE_STRING, -1}, "finish_reason": {pb.DataType_TYPE_STRING, 1},
		"num_input_tokens": {pb.DataType_TYPE_UINT32, 1}, "num_output_tokens": {pb.DataType_TYPE_UINT32, 1},
	} {
		if o := out[name]; o == nil || o.GetDataType() != want.dt || len(o.GetDims()) != 1 || o.GetDims()[0] != want.dim {
			t.Errorf("output %s = %v", name, o)
		}
	}
}

func TestNewErrors(t *testing.T) {
	dir := modelDir(t)
	for _, tc := range []struct {
		name   string
		params map[string]string
		msg    string
	}{
		{"no checkpoint", map[string]string{"checkpoint": ""}, "parameters.checkpoint: missing"},
		{"no tokenizer", map[string]string{"tokenizer": ""}, "parameters.tokenizer: missing"},
		{"missing file", map[string]string{"checkpoint": "nope.bin"}, "parameters.checkpoint: open " + filepath.Join(dir, "nope.bin")},
		{"foreign checkpoint", map[string]string{"checkpoint": TokenizerFile}, "parameters.checkpoint: checkpoint " + filepath.Join(dir, TokenizerFile)},
		{"wrong tokenizer", map[string]string{"tokenizer": "tokenizer.bin"}, "parameters.tokenizer: tokenizer"},
		{"max_sequences", map[string]string{"max_sequences": "0"}, `parameters.max_sequences: "0" is not an integer in [1, 4096]`},
		{"max_queue", map[string]string{"max_queue": "x"}, `parameters.max_queue: "x" is not an integer`},
	} {
		cfg := Config("m", CheckpointFile, TokenizerFile)
		for k, v := range tc.params {
			if v == "" {
				delete(cfg.Parameters, k)
			} else {
				cfg.Parameters[k] = &pb.ModelParameter{StringValue: v}
			}
		}
		b, err := New(backend.Config{Model: cfg, Dir: dir})
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.msg)
		}
		if b != nil {
			b.(backend.Closer).Close()
		}
	}
	// Absolute paths ignore Dir.
	cfg := Config("m", filepath.Join(dir, CheckpointFile), filepath.Join(dir, TokenizerFile))
	b, err := New(backend.Config{Model: cfg, Dir: "/nonexistent"})
	if err != nil {
		t.Fatal(err)
	}
	b.(backend.Closer).Close()
}

func TestFindModelDir(t *testing.T) {
	root := t.TempDir()
	mk := func(rel string, files ...string) string {
		d := filepath.Join(root, rel)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(d, f), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	explicit := mk("explicit", CheckpointFile, TokenizerFile)
	env := mk("env", CheckpointFile, TokenizerFile)
	half := mk("half", CheckpointFile)
	mk("work/shared/models", CheckpointFile, TokenizerFile)
	mk("shared/models", CheckpointFile, TokenizerFile)
	t.Chdir(mk("work"))

	t.Setenv(EnvModelDir, env)
	if dir, looked := FindModelDir(explicit); dir != explicit || len(looked) != 1 {
		t.Errorf("explicit: %q %v", dir, looked)
	}
	if dir, looked := FindModelDir(half); dir != env || len(looked) != 2 {
		t.Errorf("incomplete explicit dir falls through to env: %q %v", dir, looked)
	}
	t.Setenv(EnvModelDir, "")
	if dir, _ := FindModelDir(""); dir != filepath.Join("shared", "models") {
		t.Errorf("./shared/models: %q", dir)
	}
	os.RemoveAll(filepath.Join(root, "work", "shared"))
	if dir, _ := FindModelDir(""); dir != filepath.Join("..", "shared", "models") {
		t.Errorf("../shared/models: %q", dir)
	}
	os.RemoveAll(filepath.Join(root, "shared"))
	dir, looked := FindModelDir(half)
	if dir != "" || strings.Join(looked, ",") != strings.Join([]string{half, filepath.Join("shared", "models"), filepath.Join("..", "shared", "models")}, ",") {
		t.Errorf("none: %q %v", dir, looked)
	}
}
