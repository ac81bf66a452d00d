package main

import (
	"log/slog"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// textModels returns the built-in text-generation models whose weights are
// found (stories260k). Wired when the llama2 backend lands.
func textModels(dir string, log *slog.Logger) []*pb.ModelConfig {
	return nil
}
