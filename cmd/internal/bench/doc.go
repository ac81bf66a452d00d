// Package bench is `streamgate bench`: a load generator that measures what
// the gateway adds to every streamed response, side by side with the
// physical limit, a direct gRPC client on the same engine.
//
// Start with Main (flag set "bench"). One invocation plans a list of runs
// (Config.plan: the chosen transports, plus with --compare the direct
// baseline of each workload), drives each with the same load shape (run:
// closed loop of N streams or open loop at a rate, for a window after a
// warmup), and prints a Report: latency percentiles, throughput, errors by
// kind, server and load-generator CPU, server RSS, and ratios against the
// baseline (compare).
//
// Transports (type transport): direct (direct.go, gRPC ModelStreamInfer,
// one RPC per request or a few shared ones), sse and chat (sse.go, HTTP/1.1
// event streams, or with --http2 streams of shared h2c connections, h2.go), ws (ws.go, streamgate.v1, many requests per socket).
// With --embedded (embedded.go) the bench starts an engine and a gateway in
// its own process; its repeat backend reports when each request stops
// executing, the engine-side signal of the cancel preset.
//
// Goroutines: run owns one goroutine per concurrent stream (or per request
// in open loop) and a monitor; transports own their readers (one per shared
// gRPC stream or WebSocket) and stop them in close. Nothing outlives Main.
package bench
