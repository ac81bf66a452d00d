// Package stack assembles streamgate from its layers (engine, upstream
// client, gateway, HTTP server) and stops them in the reverse order. It is
// built once and used by every process that runs streamgate: the engine,
// gateway and serve commands of cmd/streamgate, the bench's embedded mode
// and the end-to-end tests.
//
// Start with Start(Config) and Stack.Stop. A Config holds each layer's
// Options as the layer defines them; Register (the flags, in groups, on a
// cli.FlagSet), Parse and Flags.Config are the one place where
// command-line flags and STREAMGATE_* environment variables become those
// Options, and Flags.Logger the process's logger (--log-format,
// --log-level).
//
// The package imports the engine, so it cannot live under gateway/ or
// upstream/ (they must not depend on the engine), and being internal to
// cmd/ it is importable only from cmd/...: the tests that need a whole
// stack live in cmd/internal/e2e.
package stack
