// Package engine is streamgate's Triton-compatible gRPC inference server
// (package inference, service GRPCInferenceService) for decoupled models.
//
// Where to start reading:
//   - server.go: New loads a model repository (Triton's layout, parsed by
//     repository.go) with the backends given in Options, and serves the
//     unary RPCs (metadata, health, ModelInfer).
//   - stream.go: ModelStreamInfer. One reader goroutine (the handler), one
//     writer goroutine that owns Send, one goroutine per request.
//   - model.go and repository.go: a model version, its config checks and
//     Triton's repository layout (version directories, version_policy).
//   - scheduler.go: a model's queue (priority levels, queue policies and
//     timeouts) and dynamic batcher, which hands batches to instances.
//   - sequencer.go, seqbatch.go and seqconfig.go: Triton's sequence
//     batcher, the other way a model's batches are chosen
//     (sequence_batching): sequence slots, the backlog and the idle reaper
//     (sequencer.go); forming a batch, control inputs and implicit state
//     (seqbatch.go).
//   - call.go: how one request, or a batch of them, runs on an instance
//     through the backend.Backend (or backend.BatchBackend) contract.
//   - stats.go: ModelStatistics.
//   - errors.go: engine errors and the one place they become gRPC statuses.
//
// The engine knows no backend itself: engine/builtin provides the default
// repository and backends (repeat, square, echo, identity, transcribe and
// the sequence examples of engine/sequence), and
// engine/llama2 the text-generation backend, which callers add to the set.
// Tensors travel in the codec of proto/tensor, shared with the gateway.
package engine
