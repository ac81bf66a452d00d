package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/streamgate/streamgate/gateway"
	"github.com/streamgate/streamgate/gateway/sse"
	"github.com/streamgate/streamgate/gateway/ws"
	"github.com/streamgate/streamgate/upstream"
)

// gatewayConfig is everything the gateway reads from flags and env.
type gatewayConfig struct {
	HTTP          string
	Upstream      string
	Cancel        string
	MaxBody       int64
	MaxStreams    int
	MaxPerConn    int
	StreamsPer    int
	UpstreamQueue int
	WSMaxInFlight int
	Keepalive     time.Duration
	ShutdownGrace time.Duration
}

func (c *gatewayConfig) register(fs *flag.FlagSet, withUpstream bool) {
	fs.StringVar(&c.HTTP, "http", "127.0.0.1:8080", "gateway HTTP listen address")
	if withUpstream {
		fs.StringVar(&c.Upstream, "upstream", "127.0.0.1:8001", "engine or Triton gRPC targets: ADDR[,ADDR...] or dns:///name:port")
	}
	fs.StringVar(&c.Cancel, "cancel", "auto", "upstream cancellation: auto, inband, stream or none")
	fs.Int64Var(&c.MaxBody, "max-body", 1<<20, "largest request body in bytes (413 beyond)")
	fs.IntVar(&c.MaxStreams, "max-streams", 4096, "inference requests in flight through the gateway (503 beyond)")
	fs.IntVar(&c.MaxPerConn, "max-streams-per-conn", 64, "inference requests in flight per client connection (429 beyond)")
	fs.IntVar(&c.StreamsPer, "upstream-streams", 64, "pooled ModelStreamInfer streams per upstream target")
	fs.IntVar(&c.UpstreamQueue, "upstream-queue", 1024, "responses buffered per request for its client; past it text deltas coalesce, other requests fail as too slow")
	fs.IntVar(&c.WSMaxInFlight, "ws-max-in-flight", 64, "requests in flight per WebSocket (too_many_requests beyond)")
	fs.DurationVar(&c.Keepalive, "sse-keepalive", 15*time.Second, "interval of SSE ': keepalive' comments")
	if withUpstream {
		fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", 10*time.Second, "on SIGTERM, how long in-flight streams may take to finish")
	}
}

func parseGateway(args []string, stderr io.Writer) (gatewayConfig, error) {
	var c gatewayConfig
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.register(fs, true)
	return c, parse(fs, args)
}

// gatewayProcess is a running gateway: its HTTP server, upstream client and
// the channel its Serve result arrives on.
type gatewayProcess struct {
	gw   *gateway.Server
	http *http.Server
	up   *upstream.Client
	errc chan error
	log  *slog.Logger
}

func startGateway(cfg gatewayConfig, log *slog.Logger) (*gatewayProcess, error) {
	mode, err := upstream.ParseCancelMode(cfg.Cancel)
	if err != nil {
		return nil, err
	}
	var targets []string
	for _, t := range strings.Split(cfg.Upstream, ",") {
		if t = strings.TrimSpace(t); t != "" {
			targets = append(targets, t)
		}
	}
	up, err := upstream.New(targets, &upstream.Options{Cancel: mode, MaxStreamsPerTarget: cfg.StreamsPer, QueueSize: cfg.UpstreamQueue, Logger: log})
	if err != nil {
		return nil, err
	}
	gw := gateway.New(up, &gateway.Options{
		Logger:            log,
		MaxBodyBytes:      cfg.MaxBody,
		MaxStreams:        cfg.MaxStreams,
		MaxStreamsPerConn: cfg.MaxPerConn,
		SSE:               sseOptions(cfg.Keepalive),
		WebSocket:         &ws.Options{MaxInFlight: cfg.WSMaxInFlight},
		ChatTemplates:     chatTemplates(),
		UnloadedModels:    unloadedModels(),
	})
	lis, err := net.Listen("tcp", cfg.HTTP)
	if err != nil {
		up.Close()
		return nil, fmt.Errorf("gateway listen: %w", err)
	}
	// No WriteTimeout: streams set their own deadlines (STYLE.md 9, 14).
	hs := &http.Server{Handler: gw.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	p := &gatewayProcess{gw: gw, http: hs, up: up, errc: make(chan error, 1), log: log}
	log.Info("gateway serving", "http", lis.Addr().String(), "upstream", targets, "cancel", mode)
	go func() { p.errc <- hs.Serve(lis) }()
	return p, nil
}

// stop drains in layers: readiness fails and streams get until ctx's
// deadline (then SSE streams end with an error event and sockets close with
// 1001), the HTTP server shuts down, and the upstream client closes.
func (p *gatewayProcess) stop(ctx context.Context) {
	if err := p.gw.Drain(ctx); err != nil {
		p.log.Warn("gateway drain", "err", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := p.http.Shutdown(sctx); err != nil {
		p.http.Close()
	}
	if err := <-p.errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		p.log.Error("gateway serve", "err", err)
	}
	p.up.Close()
}

func runGateway(ctx context.Context, cfg gatewayConfig, log *slog.Logger) error {
	p, err := startGateway(cfg, log)
	if err != nil {
		return err
	}
	select {
	case err := <-p.errc:
		p.up.Close()
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down gateway", "grace", cfg.ShutdownGrace)
	dctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	p.stop(dctx)
	log.Info("stopped")
	return nil
}

func sseOptions(keepalive time.Duration) *sse.Options {
	return &sse.Options{KeepAlive: keepalive}
}
