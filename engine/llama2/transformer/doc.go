// Package transformer loads llama2.c checkpoints and runs the Llama
// forward pass (RMSNorm, RoPE, grouped-query attention, SwiGLU) over
// batches of sequences.
//
// Start with Load, then Model.NewSession (one KV cache per sequence),
// Model.NewWorkspace and Workspace.Forward, which advances any mix of
// sessions by one or more positions in one pass over the weights. With
// WorkspaceOptions.Groups, passes of small models are split into groups of
// whole sessions that run on separate cores.
//
// Checkpoint formats: the legacy version 0 export (a 28-byte header of
// seven int32; a negative vocab_size means a separate classifier) and the
// fp32 version 1 "ak42" export; version 2 (int8) is reported as
// ErrUnsupported. The file size must match the header exactly. Files from
// 4 MiB are memory-mapped read-only.
package transformer
