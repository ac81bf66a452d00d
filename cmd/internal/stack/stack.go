package stack

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/streamgate/streamgate/cmd/internal/telemetry"
	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/gateway"
	"github.com/streamgate/streamgate/gateway/detach"
	"github.com/streamgate/streamgate/gateway/store"
	"github.com/streamgate/streamgate/gateway/ws"
	"github.com/streamgate/streamgate/upstream"
	"github.com/streamgate/streamgate/upstream/budget"
	"github.com/streamgate/streamgate/upstream/rawsock"
)

// Config is one process's stack: an engine, a gateway, or both (the
// gateway then talks to the engine over loopback gRPC). Every layer's
// Options are used as given (Start copies them) except that a nil Logger
// becomes Config.Logger.
type Config struct {
	// Engine, if set, runs an engine serving gRPC on EngineAddr.
	Engine *engine.Options
	// EngineAddr is the engine's gRPC listen address. Default
	// 127.0.0.1:0 (a free port; Stack.EngineAddr tells which).
	EngineAddr string

	// Gateway, if set, runs a gateway serving HTTP on HTTPAddr, with an
	// upstream client to Upstream.
	Gateway *gateway.Options
	// HTTPAddr is the gateway's HTTP listen address. Default 127.0.0.1:0.
	HTTPAddr string
	// TLS, if set, makes the gateway serve HTTPS with it: HTTP/2 by ALPN
	// for every route, HTTP/1.1 beside it (WebSocket upgrades, older
	// clients). Nil: plaintext HTTP/1.1.
	TLS *tls.Config
	// H2C lets the plaintext listener also speak HTTP/2 to clients that
	// know it in advance (prior knowledge, as balancers speak cleartext
	// HTTP/2 to backends). Default false. Not used with TLS.
	H2C bool
	// Upstream are the gateway's targets ("host:port" or
	// "dns:///host:port"). Empty with an engine: the engine.
	Upstream []string
	// UpstreamOptions configure the gateway's upstream client. Nil means
	// its defaults. Its Memory budget (a new one of upstream's default
	// size when nil) is also the WebSocket sessions' unless
	// Gateway.WebSocket names another.
	UpstreamOptions *upstream.Options

	// Redis is the URL of the store the gateway shares with other
	// replicas (store.Open); empty: in-process. Ignored when
	// Gateway.Store is set (its owner closes that one).
	Redis string
	// KeysFile is the API keys file (store.OpenKeysFile) of a gateway
	// without Redis. With Redis or a keys file, requests need an API key
	// (unless Gateway.Keys is set, which wins); with neither the gateway
	// is open.
	KeysFile string
	// NoKeys leaves the gateway open with Redis (--no-keys).
	NoKeys bool
	// KeyCacheTTL and LimitsOpen set the Redis store's key cache and
	// its limits while Redis fails (store.Redis.SetKeyCacheTTL,
	// SetLimitsOnFailure). The zero Config has no cache and fails
	// closed; the flags' defaults are 60s and open.
	KeyCacheTTL time.Duration
	LimitsOpen  bool

	// Handler, if set, wraps the gateway's handler (a test serving a page
	// beside the API). Default: the gateway's handler.
	Handler func(api http.Handler) http.Handler
	// Server, if set, adjusts the HTTP server before it serves (a test
	// setting ConnState or Protocols). TLS is served when TLSConfig is
	// set after it.
	Server func(*http.Server)

	// Logger is every layer's logger where its Options have none, with
	// the trace_id and span_id of the request on the lines a request
	// writes (telemetry.LogHandler). Default: discard.
	Logger *slog.Logger

	// Telemetry gives every layer whose Options have none its tracer,
	// meter and propagator, and the gateway its /metrics handler. Nil:
	// Start builds one that exports nothing (its metrics are still on
	// /metrics) and Stop shuts it down; otherwise its owner shuts it down
	// after Stop.
	Telemetry *telemetry.Telemetry
	// MetricsAddr, if set, serves Telemetry's Prometheus exposition at
	// /metrics on its own HTTP listener: the engine alone has no HTTP
	// server of its own. Default: none.
	MetricsAddr string
}

// Stack is a running stack. Its fields are set by Start and read-only
// after; the layers' own methods may be used freely (tests watch
// Engine.InFlight, drain the Gateway, read Upstream.Stats).
type Stack struct {
	Engine   *engine.Server   // nil without an engine
	Upstream *upstream.Client // nil without a gateway
	Gateway  *gateway.Server  // nil without a gateway
	HTTP     *http.Server     // nil without a gateway

	EngineAddr  string // the engine's gRPC address, "" without one
	HTTPAddr    string // the gateway's HTTP address, "" without one
	MetricsAddr string // the metrics listener's address, "" without one

	// Telemetry is Config.Telemetry, or the one Start built.
	Telemetry *telemetry.Telemetry
	// Store is the gateway's shared state: Gateway.Store, or the one
	// Start opened from Config.Redis (Stop closes that one). Nil without
	// a gateway.
	Store store.Store

	scheme string // "https" with TLS, else "http"

	log      *slog.Logger
	ownTel   bool           // Start built Telemetry: Stop shuts it down
	ownStore bool           // Start opened Store: Stop closes it
	metrics  *http.Server   // on MetricsAddr
	serving  sync.WaitGroup // the engine's and the HTTP server's Serve
	errc     chan error     // the first Serve that failed
	stop     sync.Once
}

// Start builds the layers of cfg from the bottom up and starts serving.
// On error nothing is left running. Stop ends what Start started.
func Start(cfg Config) (_ *Stack, err error) {
	if cfg.Engine == nil && cfg.Gateway == nil {
		return nil, errors.New("stack: neither an engine nor a gateway")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = slog.New(telemetry.LogHandler(log.Handler()))
	s := &Stack{log: log, errc: make(chan error, 4), Telemetry: cfg.Telemetry}
	defer func() {
		if err != nil {
			s.Stop(canceled())
		}
	}()
	if s.Telemetry == nil {
		tel, err := telemetry.New(context.Background(), telemetry.Options{Logger: log})
		if err != nil {
			return nil, err
		}
		s.Telemetry, s.ownTel = tel, true
	}
	if cfg.Engine != nil {
		if err := s.startEngine(cfg); err != nil {
			return nil, err
		}
	}
	if cfg.Gateway != nil {
		if err := s.startGateway(cfg); err != nil {
			return nil, err
		}
	}
	if cfg.MetricsAddr != "" {
		if err := s.startMetrics(cfg.MetricsAddr); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Stack) startMetrics(addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.Telemetry.Metrics)
	s.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	s.MetricsAddr = lis.Addr().String()
	s.log.Info("metrics serving", "http", s.MetricsAddr)
	s.serve(func() error { return s.metrics.Serve(lis) })
	return nil
}

func (s *Stack) startEngine(cfg Config) error {
	opts := *cfg.Engine
	tel := s.Telemetry
	fill(&opts.Logger, s.log)
	fill(&opts.TracerProvider, tel.Tracer)
	fill(&opts.MeterProvider, tel.Meter)
	fill(&opts.Propagator, tel.Propagator)
	eng, err := engine.New(opts)
	if err != nil {
		return err
	}
	lis, addr, err := listenGRPC(orLoopback(cfg.EngineAddr))
	if err != nil {
		eng.Stop()
		return fmt.Errorf("engine listen: %w", err)
	}
	s.Engine, s.EngineAddr = eng, addr
	s.log.Info("engine serving", "grpc", s.EngineAddr, "tls", opts.TLS != nil, "mtls", opts.TLS != nil && opts.TLS.ClientCAs != nil, "models", eng.Models())
	s.serve(func() error { return eng.Serve(lis) })
	return nil
}

func (s *Stack) startGateway(cfg Config) error {
	targets := cfg.Upstream
	if len(targets) == 0 && s.EngineAddr != "" {
		targets = []string{s.EngineAddr}
	}
	var uopts upstream.Options
	if cfg.UpstreamOptions != nil {
		uopts = *cfg.UpstreamOptions
	}
	tel := s.Telemetry
	fill(&uopts.Logger, s.log)
	fill(&uopts.MeterProvider, tel.Meter)
	fill(&uopts.Propagator, tel.Propagator)
	// Responses waiting for slow clients share one memory budget, in
	// upstream's queues and in the WebSockets' send queues alike.
	if uopts.Memory == nil {
		uopts.Memory = budget.New(upstream.DefaultMemory)
	}
	gopts := *cfg.Gateway
	if gopts.Store == nil {
		st, err := store.Open(cfg.Redis)
		if err != nil {
			return err
		}
		if r, ok := st.(*store.Redis); ok {
			r.SetKeyCacheTTL(cfg.KeyCacheTTL)
			r.SetLimitsOnFailure(cfg.LimitsOpen)
			r.SetLogger(s.log)
			if err := r.Instrument(tel.Meter.Meter("github.com/streamgate/streamgate/gateway/store")); err != nil {
				return err
			}
		}
		gopts.Store, s.ownStore = st, true
	}
	s.Store = gopts.Store
	if r, ok := gopts.Store.(*store.Redis); ok && uopts.Sequences == nil {
		uopts.Sequences = r // sequences continue through any replica
	}
	up, err := upstream.New(targets, &uopts)
	if err != nil {
		return err
	}
	s.Upstream = up
	if gopts.ResumeMemory == nil { // resume logs waiting for the store share the relay's budget
		gopts.ResumeMemory = uopts.Memory
	}
	if gopts.Keys == nil {
		switch {
		case cfg.KeysFile != "":
			kf, err := store.OpenKeysFile(cfg.KeysFile)
			if err != nil {
				return err
			}
			gopts.Keys = kf
		case cfg.Redis != "" && s.ownStore && !cfg.NoKeys:
			gopts.Keys = gopts.Store
		}
	}
	fill(&gopts.Logger, s.log)
	fill(&gopts.TracerProvider, tel.Tracer)
	fill(&gopts.MeterProvider, tel.Meter)
	fill(&gopts.Propagator, tel.Propagator)
	fill(&gopts.Metrics, tel.Metrics)
	wsOpts := ws.Options{}
	if gopts.WebSocket != nil {
		wsOpts = *gopts.WebSocket
	}
	fill(&wsOpts.Memory, uopts.Memory)
	gopts.WebSocket = &wsOpts
	var lis net.Listener
	lis, err = net.Listen("tcp", orLoopback(cfg.HTTPAddr))
	if err != nil {
		return fmt.Errorf("gateway listen: %w", err)
	}
	// Client connections read and write with raw system calls under the
	// poller, which do not wake the runtime's monitor (rawsock): net/http's
	// reads of requests, the detached streams' watchers and hand-backs.
	lis = rawsock.Listener{Listener: lis}
	// Plaintext event streams over HTTP/1.1 leave net/http once validated
	// and their connections come back through back, which the server
	// serves beside lis (gateway.Options.Detach). With TLS they stay.
	var back *detach.Listener
	if cfg.TLS == nil && gopts.Detach == nil {
		back = detach.NewListener(lis.Addr())
		gopts.Detach = back
	}
	s.Gateway = gateway.New(up, &gopts)
	var h http.Handler = s.Gateway.Handler()
	if cfg.Handler != nil {
		h = cfg.Handler(h)
	}
	// No WriteTimeout: streams set their own deadlines.
	s.HTTP = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		HTTP2: s.Gateway.HTTP2Config(), Protocols: new(http.Protocols), TLSConfig: cfg.TLS}
	s.HTTP.Protocols.SetHTTP1(true)
	switch {
	case cfg.TLS != nil:
		s.HTTP.Protocols.SetHTTP2(true)
	case cfg.H2C:
		s.HTTP.Protocols.SetUnencryptedHTTP2(true)
	}
	if cfg.Server != nil {
		cfg.Server(s.HTTP)
	}
	if back != nil {
		back.IdleTimeout = s.HTTP.IdleTimeout // before any connection can come back
	}
	s.HTTPAddr = lis.Addr().String()
	s.scheme = "http"
	serve := func() error { return s.HTTP.Serve(lis) }
	if s.HTTP.TLSConfig != nil {
		s.scheme = "https"
		serve = func() error { return s.HTTP.ServeTLS(lis, "", "") }
	}
	if gopts.Keys == nil && !isLoopback(lis.Addr()) {
		s.log.Warn("the gateway is open: anyone who reaches it may use it; --redis or --keys-file makes requests need an API key (streamgate keys create)", "url", s.URL())
	}
	s.log.Info("gateway serving", "url", s.URL(), "protocols", protocolNames(s.HTTP.Protocols), "mtls", s.HTTP.TLSConfig != nil && s.HTTP.TLSConfig.ClientCAs != nil,
		"upstream", targets, "upstream_tls", uopts.TLS != nil, "cancel", uopts.Cancel.String())
	s.serve(serve)
	if back != nil {
		s.serve(func() error { return s.HTTP.Serve(back) })
	}
	return nil
}

// isLoopback reports whether addr only listens on loopback.
func isLoopback(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// serve runs one server's Serve; a failure other than a stop is reported
// on Err.
func (s *Stack) serve(run func() error) {
	s.serving.Go(func() {
		if err := run(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.errc <- err
		}
	})
}

// Err delivers the error of a server that stopped serving on its own (a
// listener failure); the caller should then Stop the stack.
func (s *Stack) Err() <-chan error { return s.errc }

// URL is the gateway's base URL: http://HTTPAddr, or https:// with TLS.
func (s *Stack) URL() string { return s.scheme + "://" + s.HTTPAddr }

// Stop shuts the stack down from the top, in order: the gateway drains
// (readiness fails, new requests are refused, running ones may finish
// until ctx is done, then they are ended), the HTTP server shuts down, the
// upstream client closes, and the engine stops gracefully until ctx is
// done (direct gRPC clients of the engine get what is left of ctx), and
// the telemetry Start built, if any, flushes and shuts down. Stop returns
// when every server goroutine has exited; it is idempotent.
func (s *Stack) Stop(ctx context.Context) {
	s.stop.Do(func() {
		if s.Gateway != nil {
			if err := s.Gateway.Drain(ctx); err != nil {
				s.log.Warn("gateway drain", "err", err)
			}
		}
		if s.HTTP != nil {
			// Drain has ended every stream; what is left are idle
			// connections and short requests.
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if s.HTTP.Shutdown(sctx) != nil {
				s.HTTP.Close()
			}
			cancel()
		}
		if s.Upstream != nil {
			s.Upstream.Close()
		}
		if s.ownStore {
			if err := s.Store.Close(); err != nil {
				s.log.Warn("store close", "err", err)
			}
		}
		if s.Engine != nil {
			s.Engine.GracefulStop(ctx)
		}
		if s.metrics != nil {
			s.metrics.Close()
		}
		s.serving.Wait()
		if s.ownTel {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := s.Telemetry.Shutdown(sctx); err != nil {
				s.log.Warn("telemetry shutdown", "err", err)
			}
			cancel()
		}
	})
}

// StopNow is Stop with no grace: running requests are ended at once.
func (s *Stack) StopNow() { s.Stop(canceled()) }

// fill sets *v to def when *v is unset: a layer's own option wins over
// the stack's.
func fill[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// listenGRPC listens on addr, a TCP address or a unix socket target
// (upstream.SocketPath), and returns the target that reaches it: the TCP
// address, its port chosen, or addr itself.
func listenGRPC(addr string) (net.Listener, string, error) {
	path, unix, err := upstream.SocketPath(addr)
	if err != nil {
		return nil, "", err
	}
	if !unix {
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, "", err
		}
		return lis, lis.Addr().String(), nil
	}
	removeStale(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, "", err
	}
	return lis, addr, nil
}

// removeStale removes the unix socket at path if nothing listens on it:
// a process that was killed leaves its socket behind, and listening
// there would fail ("address already in use"). A live one stays.
func removeStale(path string) {
	if fi, err := os.Stat(path); err != nil || fi.Mode()&fs.ModeSocket == 0 {
		return
	}
	c, err := net.Dial("unix", path)
	if err == nil {
		c.Close()
		return
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		os.Remove(path)
	}
}

func orLoopback(addr string) string {
	if addr == "" {
		return "127.0.0.1:0"
	}
	return addr
}

// protocolNames lists p as a log line shows it: "HTTP/1.1,h2c".
func protocolNames(p *http.Protocols) string {
	var names []string
	if p == nil || p.HTTP1() {
		names = append(names, "HTTP/1.1")
	}
	if p != nil && p.HTTP2() {
		names = append(names, "h2")
	}
	if p != nil && p.UnencryptedHTTP2() {
		names = append(names, "h2c")
	}
	return strings.Join(names, ",")
}
