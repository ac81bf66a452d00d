// Package gateway is streamgate's HTTP edge: Triton-compatible /v2 routes
// (generate, generate_stream, metadata, health), OpenAI-compatible /v1
// routes (chat completions, completions, models), the streamgate.v1
// WebSocket protocol on /v1/ws, and /healthz, /readyz, /metrics, all over
// an Upstream (in production *upstream.Client).
//
// Start with New and Server.Handler; stop with Server.Drain, then
// http.Server.Shutdown. openapi.yaml at the repository root is the full
// contract, README.md has curl, browser and WebSocket examples.
//
// Layout: the handlers here validate a request into a job (an inference
// request plus a translator from responses to payloads), admit it (drain
// state, global and per-connection limits), start it upstream and pump the
// responses to one writer: an SSE stream (sse), a WebSocket session (ws) or
// one JSON body. Errors become statuses in one place, classify. Wire
// formats live in subpackages: generate (Triton's generate JSON), openai
// (OpenAI objects, chat template), textmodel (vLLM / TensorRT-LLM model
// conventions), sse, ws, metrics.
//
// Cancellation: every upstream call runs under a context derived from the
// HTTP request (or the WebSocket request), so a client that goes away, a
// cancel frame or a failed write cancels the call upstream at once.
package gateway
