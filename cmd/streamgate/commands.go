package main

import (
	"context"
	"io"

	"github.com/streamgate/streamgate/cmd/internal/bench"
	"github.com/streamgate/streamgate/cmd/internal/cli"
	"github.com/streamgate/streamgate/cmd/internal/stack"
)

// commands is streamgate's command tree: what each command is for, its
// examples, its flags and what it runs. Its help, `streamgate help config`
// and README.md's Configuration section are made from it.
func commands() *cli.Command {
	return &cli.Command{
		Name:    "streamgate",
		Purpose: "a streaming gateway for decoupled models, with a Triton-compatible engine of its own",
		About: `SSE, WebSocket and OpenAI's API in front of Triton's gRPC streams
(ModelStreamInfer), to streamgate's own engine or a real Triton.`,
		Examples: []cli.Example{
			{Comment: "Engine and gateway on loopback; open http://127.0.0.1:8080/ and watch tokens stream", Line: "streamgate serve"},
			{Comment: "A real model: download it once, then serve it", Line: "streamgate models pull stories15M && streamgate serve --model stories15M"},
			{Comment: "A command's flags, grouped, with examples", Line: "streamgate help gateway"},
		},
		Commands: []*cli.Command{
			{
				Name:    "serve",
				Purpose: "engine and gateway in one process (HTTP 127.0.0.1:8080, gRPC 127.0.0.1:8001)",
				About: `Serves the built-in models (repeat_int32, echo, ...) and every llama2.c
model whose weights it finds, over SSE, WebSocket, OpenAI's API and Triton's
HTTP and gRPC APIs; the playground is at /. SIGTERM lets the streams in
flight finish within --shutdown-grace.`,
				Examples: []cli.Example{
					{Comment: "Everything on loopback; the playground is at http://127.0.0.1:8080/", Line: "streamgate serve"},
					{Comment: "Only stories15M (pulled before), logs as text with debug lines", Line: "streamgate serve --model stories15M --log-format text --log-level debug"},
					{Comment: "On every interface over HTTPS (and HTTP/2), more requests per connection", Line: "streamgate serve --http 0.0.0.0:8443 --tls-cert cert.pem --tls-key key.pem --max-streams-per-conn 256"},
				},
				Setup: stackSetup("serve"),
			},
			{
				Name:    "engine",
				Purpose: "the Triton-compatible gRPC engine alone, for one gateway or many",
				Examples: []cli.Example{
					{Comment: "On every interface, with Prometheus metrics (Triton's ports)", Line: "streamgate engine --grpc 0.0.0.0:8001 --metrics 0.0.0.0:8002"},
					{Comment: "A model repository in Triton's layout instead of the built-in models", Line: "streamgate engine --models ./model_repository"},
					{Comment: "Flags from the environment: only stories15M, on port 9001", Line: "STREAMGATE_MODEL=stories15M STREAMGATE_GRPC=127.0.0.1:9001 streamgate engine"},
				},
				Setup: stackSetup("engine"),
			},
			{
				Name:    "gateway",
				Purpose: "the HTTP gateway alone, in front of streamgate engines or a real Triton",
				Examples: []cli.Example{
					{Comment: "In front of one engine (streamgate engine, or tritonserver's gRPC port)", Line: "streamgate gateway --upstream 127.0.0.1:8001"},
					{Comment: "Every engine a DNS name resolves to, on every interface", Line: "streamgate gateway --http 0.0.0.0:8080 --upstream dns:///engines.internal:8001"},
					{Comment: "A Triton over TLS, HTTPS to clients, pages of app.example.com allowed", Line: "streamgate gateway --upstream triton.internal:8001 --upstream-tls --upstream-ca ca.pem --tls-cert cert.pem --tls-key key.pem --origins https://app.example.com"},
				},
				Setup: stackSetup("gateway"),
			},
			modelsCommand(),
			keysCommand(),
			bench.Command(),
		},
	}
}

// stackSetup defines the flags of the stack command name and runs it.
func stackSetup(name string) func(fs *cli.FlagSet) cli.Run {
	return func(fs *cli.FlagSet) cli.Run {
		f := stack.Register(fs, name)
		return func(ctx context.Context, _ []string, _, stderr io.Writer) error {
			return serve(ctx, f, stderr)
		}
	}
}
