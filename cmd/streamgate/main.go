// Command streamgate is the streaming gateway for decoupled model serving.
//
//	streamgate serve                               engine and gateway in one process
//	streamgate engine   --grpc ADDR --models DIR   the Triton-compatible engine alone
//	streamgate gateway  --http ADDR --upstream ADDR[,ADDR...]
//	streamgate models   list | pull NAME...        llama2.c models to serve
//	streamgate bench                               load generator
//	streamgate help     [COMMAND... | config]      what each command does, its flags, examples
//
// Every flag also reads the environment variable STREAMGATE_<FLAG> (upper
// case, dashes as underscores); a flag given on the command line wins.
//
// Start reading at commands (commands.go): the command tree, each
// command's help and what it runs; cmd/internal/cli runs the tree.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/streamgate/streamgate/cmd/internal/cli"
	"github.com/streamgate/streamgate/cmd/internal/gctune"
	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/cmd/internal/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(cli.Exit(os.Stderr, "streamgate", err))
}

// run runs the command args name (the arguments after the program's
// name).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return cli.Main(ctx, commands(), args, stdout, stderr)
}

// serve runs the stack f describes until ctx is done (SIGTERM) or a server
// fails, then stops it in order within f.ShutdownGrace and flushes its
// telemetry. It logs to stderr as f's --log-* flags say.
func serve(ctx context.Context, f *stack.Flags, stderr io.Writer) error {
	log, closeLog := f.Logger(stderr)
	defer closeLog() // last: after the stopped line
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
	gc := gctune.Start(f.GCMinHeap)
	defer gc.Stop()
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
