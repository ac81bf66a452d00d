package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/engine/builtin"
	"github.com/streamgate/streamgate/engine/llama2"
)

// startEngine loads the models and starts serving gRPC on cfg.GRPC. The
// returned stop drains it within cfg.ShutdownGrace.
func startEngine(cfg engineConfig, log *slog.Logger) (srv *engine.Server, errc <-chan error, err error) {
	text, err := textModels(cfg, log)
	if err != nil {
		return nil, nil, err
	}
	backends := builtin.Backends()
	backends[llama2.BackendName] = llama2.New
	srv, err = engine.New(engine.Options{
		ModelDir:   cfg.Models,
		Repository: builtin.FS,
		Backends:   backends,
		Extra:      text,
		Logger:     log,
	})
	if err != nil {
		return nil, nil, err
	}
	lis, err := net.Listen("tcp", cfg.GRPC)
	if err != nil {
		srv.Stop()
		return nil, nil, fmt.Errorf("engine listen: %w", err)
	}
	log.Info("engine serving", "grpc", lis.Addr().String(), "models", srv.Models())
	ch := make(chan error, 1)
	go func() { ch <- srv.Serve(lis) }()
	return srv, ch, nil
}

func runEngine(ctx context.Context, cfg engineConfig, log *slog.Logger) error {
	srv, errc, err := startEngine(cfg, log)
	if err != nil {
		return err
	}
	select {
	case err := <-errc:
		srv.Stop()
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down engine", "grace", cfg.ShutdownGrace)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	srv.GracefulStop(sctx)
	<-errc
	log.Info("stopped")
	return nil
}
