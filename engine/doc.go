// Package engine is streamgate's Triton-compatible gRPC inference server
// (package inference, service GRPCInferenceService) for decoupled models.
//
// Where to start reading:
//   - server.go: New loads a model repository (Triton's layout, parsed by
//     repository.go) with the backends given in Options, and serves the
//     unary RPCs (metadata, health, ModelInfer).
//   - stream.go: ModelStreamInfer. One reader goroutine (the handler), one
//     writer goroutine that owns Send, one goroutine per request.
//   - model.go and call.go: a model's instances and queue, and how one
//     request runs on an instance through the backend.Backend contract.
//   - errors.go: engine errors and the one place they become gRPC statuses.
//
// The engine knows no backend itself: engine/builtin provides the default
// repository and backends (repeat, square, echo, identity), and
// engine/llama2 the text-generation backend, which callers add to the set.
// Tensors travel in the codec of proto/tensor, shared with the gateway.
package engine
