package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
)

// serveConfig runs the engine and a gateway in front of it in one process.
type serveConfig struct {
	engine  engineConfig
	gateway gatewayConfig
}

func parseServe(args []string, stderr io.Writer) (serveConfig, error) {
	var c serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.engine.register(fs)
	c.gateway.register(fs, false)
	if err := parse(fs, args); err != nil {
		return c, err
	}
	c.gateway.Upstream = c.engine.GRPC
	c.gateway.ShutdownGrace = c.engine.ShutdownGrace
	return c, nil
}

// runServe starts the engine, then the gateway against it over loopback
// gRPC (so a direct gRPC client can be compared with the gateway), and on
// shutdown stops them in the reverse order.
func runServe(ctx context.Context, cfg serveConfig, log *slog.Logger) error {
	eng, engErr, err := startEngine(cfg.engine, log)
	if err != nil {
		return err
	}
	gw, err := startGateway(cfg.gateway, log)
	if err != nil {
		eng.Stop()
		return err
	}
	var failed error
	select {
	case failed = <-gw.errc:
		gw.errc <- failed
	case failed = <-engErr:
	case <-ctx.Done():
	}
	log.Info("shutting down", "grace", cfg.gateway.ShutdownGrace)
	dctx, cancel := context.WithTimeout(context.Background(), cfg.gateway.ShutdownGrace)
	defer cancel()
	gw.stop(dctx)
	ectx, cancel2 := context.WithTimeout(context.Background(), cfg.engine.ShutdownGrace)
	defer cancel2()
	eng.GracefulStop(ectx)
	log.Info("stopped")
	return failed
}
