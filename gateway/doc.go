// Package gateway is streamgate's HTTP edge: Triton-compatible /v2 routes
// (generate, generate_stream, infer, metadata, config, statistics, the
// repository index, health), OpenAI-compatible /v1
// routes (chat completions, completions, the Responses API with stored
// and background responses, models), the streamgate.v1
// WebSocket protocol on /v1/ws, resumable streams on /v1/streams, and
// /healthz, /readyz, /metrics, all over an *upstream.Client.
//
// Start with New and Server.Handler; stop with Server.Drain, then
// http.Server.Shutdown. openapi.yaml at the repository root is the full
// contract, README.md has curl, browser and WebSocket examples.
//
// # Layout
//
// This package is the wiring: it builds the core and the API surfaces on
// it, and routes each surface's handlers (server.go). Every request lives
// the same life, in package core (see its documentation): a surface's
// handler validates it into a job and hands it to core.Server.Serve.
//
//   - core: the lifecycle (Job, Translator, Sink; Serve), errors and their
//     formats, admission (keys, limits, drain), telemetry, detached and
//     shallow streams, the resumable-stream glue;
//   - openaiapi: /v1 chat completions, completions, the Responses API
//     and its storage, models;
//   - tritonapi: /v2 generate, generate_stream, infer, metadata;
//   - wsapi: /v1/ws sessions and sequences;
//   - streams: /v1/streams, reading resumable streams back;
//   - jobs: the job builders the surfaces share (a /v2 generate body, a
//     /v1 chat, completions or responses request into a core.Job, with
//     its translator), so that a WebSocket frame's job is built by the
//     same code as its HTTP twin's, called directly.
//
// The surfaces import core and jobs, and never each other. Wire formats live in
// leaf packages: generate (Triton's generate JSON), tritonhttp (Triton's
// HTTP/REST /infer with the binary tensor data extension, and its config,
// statistics and index JSON), openai (OpenAI objects, chat templates),
// textmodel (vLLM / TensorRT-LLM model conventions), sse (the
// event-stream writer), ws (the WebSocket protocol and session), metrics
// (instruments on the OTel metrics API); internal/jsonobj and
// internal/jsonstr read and write JSON without reflection.
package gateway
