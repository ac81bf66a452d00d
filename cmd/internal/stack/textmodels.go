package stack

import (
	"log/slog"
	"path/filepath"

	"github.com/streamgate/streamgate/engine/llama2"
	"github.com/streamgate/streamgate/gateway/openai"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// TextModelName is the built-in real text model.
const TextModelName = "stories260k"

// TextModels returns the built-in text-generation model stories260k when
// its llama2.c weights are found (--model-dir, STREAMGATE_MODEL_DIR,
// ./shared/models, ../shared/models), and logs where it looked when not.
func TextModels(dir string, log *slog.Logger) []*pb.ModelConfig {
	found, looked := llama2.FindModelDir(dir)
	if found == "" {
		log.Warn("stories260k not loaded: weights not found", "want", []string{llama2.CheckpointFile, llama2.TokenizerFile}, "looked_in", looked)
		return nil
	}
	log.Info("stories260k weights found", "dir", found)
	return []*pb.ModelConfig{llama2.Config(TextModelName,
		filepath.Join(found, llama2.CheckpointFile), filepath.Join(found, llama2.TokenizerFile))}
}

// ChatTemplates returns the chat templates of the text models streamgate
// knows: stories260k is a plain story model, so chat messages become its
// prompt as they are.
func ChatTemplates() map[string]string {
	return map[string]string{TextModelName: openai.RawTemplate}
}
