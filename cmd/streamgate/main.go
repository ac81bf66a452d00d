// Command streamgate is the streaming gateway for decoupled model serving.
//
//	streamgate engine   --grpc ADDR --models DIR   the Triton-compatible engine alone
//	streamgate serve                               engine and gateway in one process
//	streamgate gateway  --http ADDR --upstream ADDR[,ADDR...]
//	streamgate models   list | pull NAME...            llama2.c models to serve
//
// Every flag also reads the environment variable STREAMGATE_<FLAG> (upper
// case, dashes as underscores); a flag given on the command line wins.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/streamgate/streamgate/cmd/internal/bench"
	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/cmd/internal/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "streamgate:", err)
		}
		os.Exit(2)
	}
}

const usage = `usage: streamgate <command> [flags]

commands:
  serve     engine and gateway in one process (HTTP 127.0.0.1:8080, gRPC 127.0.0.1:8001)
  engine    the Triton-compatible gRPC engine alone
  gateway   the HTTP gateway alone, in front of an engine or a real Triton
  models    list and pull llama2.c models (stories15M, ...) that serve loads
  bench     load generator: the gateway's cost against direct gRPC
  help      show this help

Run 'streamgate <command> --help' for the flags of a command.
`

func run(ctx context.Context, args []string, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	switch args[0] {
	case "engine", "serve", "gateway":
		f, err := stack.Parse(args[0], args[1:], stderr)
		if err != nil {
			return err
		}
		return serve(ctx, f, log)
	case "models":
		return runModels(ctx, args[1:], os.Stdout, stderr)
	case "bench":
		return bench.Main(ctx, args[1:], os.Stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stderr, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

// serve runs the stack f describes until ctx is done (SIGTERM) or a server
// fails, then stops it in order within f.ShutdownGrace and flushes its
// telemetry.
func serve(ctx context.Context, f *stack.Flags, log *slog.Logger) error {
	cfg, err := f.Config(log)
	if err != nil {
		return err
	}
	// OpenTelemetry from the standard OTEL_* variables; the globals are
	// set for libraries that look there, the layers get theirs injected.
	tel, err := telemetry.New(ctx, telemetry.Options{ServiceName: f.ServiceName(), FromEnv: true, Logger: log})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tel.Shutdown(sctx); err != nil {
			log.Warn("telemetry shutdown", "err", err)
		}
	}()
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("opentelemetry", "err", err) }))
	otel.SetTracerProvider(tel.Tracer)
	otel.SetMeterProvider(tel.Meter)
	otel.SetTextMapPropagator(tel.Propagator)
	cfg.Telemetry = tel
	s, err := stack.Start(cfg)
	if err != nil {
		return err
	}
	var failed error
	select {
	case failed = <-s.Err():
	case <-ctx.Done():
	}
	log.Info("shutting down", "grace", f.ShutdownGrace)
	sctx, cancel := context.WithTimeout(context.Background(), f.ShutdownGrace)
	defer cancel()
	s.Stop(sctx)
	log.Info("stopped")
	return failed
}
