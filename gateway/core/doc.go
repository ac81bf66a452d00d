// Package core is what streamgate's API surfaces build on: the one life
// of an inference request (a Job, its Translator, a Sink; Server.Serve),
// the error classes and formats, admission (API keys, limits, drain),
// telemetry, detached and shallow streams, and the resumable-stream glue.
// The surfaces (gateway/openaiapi, gateway/tritonapi, gateway/wsapi,
// gateway/streams) each import core and never each other; package
// gateway wires them into one router.
//
// # The life of a request
//
// Every inference request, whatever its route or protocol, lives the same
// life, in lifecycle.go:
//
//  1. A surface's handler (tritonapi, openaiapi, wsapi) validates the
//     request into a Job (with the builders of package gateway/jobs, which
//     the surfaces share): the ModelInferRequest and a Translator from its
//     responses to payloads, built for the form the payloads take (one JSON body, or
//     for /infer JSON and binary tensors; SSE events; WebSocket data
//     frames).
//  2. The handler picks a sink for that form (sinks.go: SSESink, BodySink,
//     WSSink, LogSink) and calls Server.Serve(ctx, conn, job, sink), which admits
//     the request (drain state, global and per-connection limits, the
//     registry Drain ends), starts it upstream (upstream.Client.Start),
//     relays its responses batch by batch into the sink (Flight.run,
//     with keepalives), and finishes it: span, metrics, log line, limits
//     settled, the error delivered in band if the sink can (finish, the
//     one end of every inference request). While Serve's caller waits,
//     each batch is relayed as upstream.Call.Notify says it is ready
//     (Flight.run): on the upstream stream's reader that queued it, when
//     the sink can write it without waiting for the client (an event
//     stream on a detached connection takes what its socket takes at
//     once: detach.Response.WriteNow), otherwise, and for what a socket
//     did not take, keepalives and an end that may write (an error, the
//     rest of the last batch), on a short-lived goroutine, so that a slow
//     client never holds up the reader; a WebSocket
//     request runs begin, then
//     Flight.RelayLater: nothing waits, and each time its call has
//     responses the upstream stream's reader that queued them relays
//     them itself (the sink only queues frames for the socket's writer,
//     so it never blocks), and finishes it there too when it completed
//     (ws.Request.Later); a short-lived goroutine ends it otherwise.
//     Both relay with the same relayer.
//  3. An error is answered once, in the route's format (errors.go):
//     Classify turns any error into an HTTPError (status, code, message,
//     Retry-After); Serve lets the sink deliver it in band when the
//     response has started, otherwise the handler returns it and
//     Server.Handle writes it as Triton's {"error":...} (TritonErrors) or
//     OpenAI's {"error":{...}} (OpenAIErrors); a WebSocket request's
//     error becomes its error frame (WSErrorInfo).
//
// Cancellation: Serve's context comes from the HTTP request (or the
// WebSocket request), so a client that goes away, a cancel frame or a
// failed write cancels the call upstream at once.
//
// Detached streams (detached.go, Options.Detach): ServeSSE takes an event
// stream over plaintext HTTP/1.1, once validated, off net/http's
// connection (package detach). A plain stream (serveDetached) then has no
// goroutine of its own: it is admitted and started upstream on its
// handler's goroutine (whose stack routing and parsing already grew),
// relayed where its responses arrive (Flight.Relay, as above), and ended
// where its flight ends: its error answered, its server span and access
// log line ended as instrument would, its response finished and its
// connection given back to the http.Server for keep-alive, by the
// response's reader goroutine, which noticed a client leaving during the
// stream and waits for the connection's next request after it. Whatever
// there may wait for the client (the rest of a last write) goes to a
// short goroutine of its own. A resumable stream runs the same rest on a
// goroutine of its own (DetachStream). A held stream then costs neither
// net/http's handler goroutine nor its buffers, and one small goroutine
// in all.
//
// Shallow streams (runShallow in detached.go): an event stream that
// stays in net/http (HTTP/2, TLS) runs the rest of its life after the
// router has returned, from the gateway's top handler (TopHandler), so
// that its handler goroutine waits with none of the router's frames
// under it and its stack shrinks at the next collections. It is the one
// trick left that is shaped around goroutine stacks: without it a held
// HTTP/2 stream costs about 1.7 KB more (bench --preset hold --http2),
// past the 25 KB a held stream may cost (cmd/internal/bench/README.md).
// The wait itself must stay that shallow too: Serve receives the end in
// its own frame (Flight.run returns the channel), since 16 bytes more
// stop the runtime halving the stack (see Flight.run).
//
// # Where new behaviour hooks in
//
// Each of these has exactly one place:
//
//   - API keys: Server.Handle, which the inference and metadata routes and
//     the WebSocket upgrade pass through (health and metrics do not),
//     before the handler runs: authenticate there, answer 401 in the
//     route's format, and put the key in the context, also through
//     WithLimitKey (limits.go) so that the per-client limit
//     (Options.MaxStreamsPerConn) counts the key's requests on every
//     connection instead of each connection's.
//   - Per-key rate limits: Flight.admit, before the request starts: take
//     the job's token reservation there (a field of Job, filled by the job
//     builders from the prompt and max_tokens), and settle it where Serve
//     ends, with the model's usage from the translator.
//   - Resumable streams (resumable.go, on package resume): the sink.
//     ServeSSE and WSResumable run a request that asked for it on a
//     context detached from its client, with a resume.Producer in its
//     sink (StartLog): every payload goes through sink.send into the log as well
//     (flushed behind the live client), a client that leaves is no
//     failure (the producer's grace period starts), and EndLog closes the
//     log with how the request ended. GET /v1/streams/{sid} (gateway/streams) and the
//     WebSocket resume frame read it back with a resume.Reader; SSE ids
//     are the event numbers. A new route (the Responses API) makes its
//     stream resumable the same way: a Producer in its sink, a Reader
//     for its GET (FollowStream).
//   - OpenTelemetry (telemetry.go): the server span starts in instrument
//     (every HTTP request, named by its route pattern, continuing the
//     caller's traceparent) or wsapi's Request (one per WebSocket request, a
//     child of its socket's); the upstream span (observe) wraps the call
//     from upstream.Client.Start to its end, sees each response through
//     the relayer (first-response event, TTFT), gets its cancel event
//     where Serve cancels the call, and records the GenAI metrics when it
//     ends. Upstream propagates the span's context and adds its own events
//     (retry, behind). A new metric is one line in newGatewayMetrics
//     (see package metrics).
//   - New routes such as the Responses API: a handler, a job builder and a
//     translator for the route's events, in a surface; they reuse Serve, the sinks and
//     an error format. No route has a lifecycle of its own.
//   - Client-side streaming (gateway/wsapi's sequence.go): a WebSocket sequence is one
//     request of its session whose chunks each live the life above, in
//     order, under one correlation id the gateway assigns.
//
// # Layout
//
// At the edge, before a request's life: ReadBody (body.go) reads bodies
// within a size limit and a read deadline, cors (cors.go) answers
// browsers on other origins, and package core's noRoute answers what no
// route takes.
//
// Wire formats live in subpackages: generate (Triton's generate JSON),
// tritonhttp (Triton's HTTP/REST /infer with the binary tensor data
// extension, and its config, statistics and index JSON),
// openai (OpenAI objects, chat templates), textmodel (vLLM / TensorRT-LLM
// model conventions), sse (the event-stream writer), ws (the WebSocket
// protocol and session), metrics (instruments on the OTel metrics API);
// internal/jsonobj and internal/jsonstr
// read and write JSON without reflection.
package core
