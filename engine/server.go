package engine

import (
	"context"
	"crypto/tls"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"os"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/streamgate/streamgate/engine/backend"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// Version is the engine's version in ServerMetadata.
const Version = "0.1.0"

// Options configure a Server. The engine knows no backend or model of its
// own: engine/builtin provides the default set (builtin.FS and
// builtin.Backends()). The zero value serves no models.
type Options struct {
	// ModelDir is a model repository in Triton's layout
	// (<dir>/<model>/config.pbtxt). Empty means Repository.
	ModelDir string
	// Repository is the model repository used when ModelDir is empty, in
	// the same layout (e.g. builtin.FS). Nil means none.
	Repository fs.FS
	// Backends maps config backend names to factories. A model whose
	// backend is not in it fails to load. Nil means none.
	Backends map[string]backend.Factory
	// Extra are models added beside the repository's (e.g. stories260k when
	// its weights are found). A repository model of the same name wins.
	Extra []*pb.ModelConfig
	// Logger receives load and shutdown messages and the sequence
	// batcher's warnings. Nil means slog.Default().
	Logger *slog.Logger
	// TracerProvider makes a span per request (queue wait, execute, one
	// event per streamed response), the child of the trace context the
	// request carries. Nil means none (no-op).
	TracerProvider trace.TracerProvider
	// MeterProvider receives the engine's metrics (per model: queue depth
	// and wait, requests, durations, batch size, tokens, KV slots). Nil
	// means none.
	MeterProvider metric.MeterProvider
	// Propagator reads a request's trace context from its parameters
	// (traceparent, tracestate) or its RPC's gRPC metadata. Nil means W3C
	// trace context.
	Propagator propagation.TextMapPropagator
	// StallTimeout is how long a model may have requests queued while
	// every instance is busy and nothing starts or finishes before
	// ModelReady reports it not ready (a wedged model). Zero means
	// DefaultStallTimeout.
	StallTimeout time.Duration
	// LaxReadiness makes ServerReady ignore model readiness. False (the
	// zero value) is Triton's --strict-readiness=true: the server is ready
	// only while every model is.
	LaxReadiness bool
	// TLS, if set, makes the server speak gRPC over TLS with it (mutual
	// TLS when it requires client certificates). Nil means plaintext.
	TLS *tls.Config
	// ResponseDelay, for tests only, makes ModelStreamInfer wait this long
	// before writing each response, as Triton's server does with
	// TRITONSERVER_DELAY_GRPC_RESPONSE: responses queue behind the
	// stream's writer (Triton's QA test_one_to_multi_many). Zero means
	// none.
	ResponseDelay time.Duration
}

// DefaultStallTimeout is Options.StallTimeout's default: longer than any
// hold the built-in models allow (repeat's WAIT is at most a minute), so a
// busy model is not mistaken for a wedged one.
const DefaultStallTimeout = 2 * time.Minute

// Server is a Triton-compatible GRPCInferenceService. Its methods may be
// called concurrently. Serve blocks; GracefulStop and Stop end it.
type Server struct {
	pb.UnimplementedGRPCInferenceServiceServer

	log      *slog.Logger
	models   map[string][]*Model // by name, versions ascending
	names    []string
	stall    time.Duration
	lax      bool
	grpc     *grpc.Server
	health   *health.Server
	stopping atomic.Bool
	inflight atomic.Int64
	delay    time.Duration // Options.ResponseDelay

	tracer     trace.Tracer
	prop       propagation.TextMapPropagator
	metrics    *engineMetrics
	modelTel   map[string]*modelTelemetry // by model name; written only by New
	unregister func()                     // the queue depth callback
}

// New loads the models and builds the server. Errors name the config file
// and field at fault.
func New(opts Options) (*Server, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	tp, mp, prop := opts.TracerProvider, opts.MeterProvider, opts.Propagator
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	s := &Server{log: log, models: map[string][]*Model{}, stall: opts.StallTimeout, lax: opts.LaxReadiness,
		delay: opts.ResponseDelay, tracer: tp.Tracer(scope), prop: prop, modelTel: map[string]*modelTelemetry{}}
	em, err := newEngineMetrics(mp.Meter(scope))
	if err != nil {
		return nil, fmt.Errorf("engine: metrics: %w", err)
	}
	s.metrics = em
	factories := s.instrumented(opts.Backends)
	fsys, label := opts.Repository, "built-in"
	if opts.ModelDir != "" {
		fsys, label = os.DirFS(opts.ModelDir), opts.ModelDir
	}
	var models []*Model
	if fsys != nil {
		var err error
		if models, err = LoadRepository(fsys, label, factories); err != nil {
			return nil, err
		}
	}
	if s.stall <= 0 {
		s.stall = DefaultStallTimeout
	}
	for _, m := range models {
		s.models[m.Name] = append(s.models[m.Name], m)
	}
	for _, cfg := range opts.Extra {
		if _, ok := s.models[cfg.GetName()]; ok {
			continue
		}
		m, err := NewModel(cfg, "", factories)
		if err != nil {
			s.closeModels()
			return nil, fmt.Errorf("model %s: %v", cfg.GetName(), err)
		}
		s.models[m.Name] = []*Model{m}
	}
	for name, versions := range s.models {
		s.names = append(s.names, name)
		for _, m := range versions {
			if m.seqs != nil {
				m.seqs.log = log
			}
		}
		sort.Slice(versions, func(i, j int) bool { return versionLess(versions[i].Version, versions[j].Version) })
		var all []string
		for _, m := range versions {
			all = append(all, m.Version)
		}
		for _, m := range versions {
			m.metadata.Versions = all
		}
	}
	sort.Strings(s.names)
	log.Info("models loaded", "repository", label, "models", s.names)
	if s.unregister, err = s.observeQueues(mp.Meter(scope)); err != nil {
		s.closeModels()
		return nil, fmt.Errorf("engine: metrics: %w", err)
	}

	sopts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(math.MaxInt32),
		grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	if opts.TLS != nil {
		sopts = append(sopts, grpc.Creds(loggedTLS{credentials.NewTLS(opts.TLS), log}))
	}
	s.grpc = grpc.NewServer(sopts...)
	pb.RegisterGRPCInferenceServiceServer(s.grpc, s)
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.health)
	return s, nil
}

// loggedTLS is TLS server credentials that log each refused handshake
// (a client without a certificate, or with one the server does not
// trust): gRPC itself tells only the client.
type loggedTLS struct {
	credentials.TransportCredentials
	log *slog.Logger
}

func (c loggedTLS) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	tc, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		c.log.Warn("TLS handshake refused", "remote", conn.RemoteAddr().String(), "err", err)
	}
	return tc, info, err
}

func (c loggedTLS) Clone() credentials.TransportCredentials {
	return loggedTLS{c.TransportCredentials.Clone(), c.log}
}

// Serve accepts connections on lis until the server stops.
func (s *Server) Serve(lis net.Listener) error { return s.grpc.Serve(lis) }

// GracefulStop stops accepting streams and requests, lets running streams
// finish until ctx is done, then stops hard. It unloads the models.
func (s *Server) GracefulStop(ctx context.Context) {
	s.stopping.Store(true)
	s.health.Shutdown()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.log.Warn("shutdown deadline passed, stopping streams")
		s.grpc.Stop()
		<-done
	}
	s.closeModels()
}

// Stop ends every RPC at once and unloads the models.
func (s *Server) Stop() {
	s.stopping.Store(true)
	s.health.Shutdown()
	s.grpc.Stop()
	s.closeModels()
}

func (s *Server) closeModels() {
	if s.unregister != nil {
		s.unregister()
		s.unregister = nil
	}
	for _, versions := range s.models {
		for _, m := range versions {
			if err := m.close(); err != nil {
				s.log.Error("unloading model", "model", m.Name, "version", m.Version, "err", err)
			}
		}
	}
}

// versionLess orders version numbers numerically.
func versionLess(a, b string) bool {
	x, errA := strconv.ParseInt(a, 10, 64)
	y, errB := strconv.ParseInt(b, 10, 64)
	if errA != nil || errB != nil {
		return a < b
	}
	return x < y
}

// InFlight is the number of requests executing on model instances.
func (s *Server) InFlight() int { return int(s.inflight.Load()) }

// Queued is the number of requests waiting for an instance of model (all
// its versions); Triton reports it as nv_inference_pending_request_count.
func (s *Server) Queued(model string) int {
	n := 0
	for _, m := range s.models[model] {
		n += m.sched.pending()
	}
	return n
}

// Models lists the loaded model names, sorted.
func (s *Server) Models() []string { return append([]string(nil), s.names...) }

// lookup finds a model version; "" is the latest one served.
func (s *Server) lookup(name, version string) (*Model, error) {
	versions := s.models[name]
	if len(versions) == 0 {
		return nil, errUnknownModel(name, "")
	}
	if version == "" {
		return versions[len(versions)-1], nil
	}
	for _, m := range versions {
		if m.Version == version {
			return m, nil
		}
	}
	return nil, errUnknownModel(name, version)
}

// ready reports whether m serves requests: the server is not stopping and
// the model is not wedged (requests queued, every instance busy, nothing
// started or finished for StallTimeout). Triton has no such check; a
// wedged model otherwise looks ready to health checks forever.
func (s *Server) ready(m *Model) bool {
	return !s.stopping.Load() && !m.sched.stalled(time.Now(), s.stall)
}

func (s *Server) ServerLive(context.Context, *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: true}, nil
}

// ServerReady is false while stopping and, unless Options.LaxReadiness,
// while any model is not ready (Triton's strict readiness).
func (s *Server) ServerReady(context.Context, *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	if s.stopping.Load() {
		return &pb.ServerReadyResponse{}, nil
	}
	if !s.lax {
		for _, versions := range s.models {
			for _, m := range versions {
				if !s.ready(m) {
					return &pb.ServerReadyResponse{}, nil
				}
			}
		}
	}
	return &pb.ServerReadyResponse{Ready: true}, nil
}

func (s *Server) ModelReady(_ context.Context, r *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	m, err := s.lookup(r.GetName(), r.GetVersion())
	return &pb.ModelReadyResponse{Ready: err == nil && s.ready(m)}, nil
}

func (s *Server) ServerMetadata(context.Context, *pb.ServerMetadataRequest) (*pb.ServerMetadataResponse, error) {
	return &pb.ServerMetadataResponse{
		Name:       "streamgate",
		Version:    Version,
		Extensions: []string{"model_configuration", "parameters", "model_repository", "schedule_policy", "statistics", "sequence", "sequence(string_id)", ExtensionCancel},
	}, nil
}

func (s *Server) ModelMetadata(_ context.Context, r *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	m, err := s.lookup(r.GetName(), r.GetVersion())
	if err != nil {
		return nil, toStatus(err, codes.NotFound)
	}
	return m.metadata, nil
}

func (s *Server) ModelConfig(_ context.Context, r *pb.ModelConfigRequest) (*pb.ModelConfigResponse, error) {
	m, err := s.lookup(r.GetName(), r.GetVersion())
	if err != nil {
		return nil, toStatus(err, codes.NotFound)
	}
	return &pb.ModelConfigResponse{Config: m.Config}, nil
}

func (s *Server) RepositoryIndex(context.Context, *pb.RepositoryIndexRequest) (*pb.RepositoryIndexResponse, error) {
	out := &pb.RepositoryIndexResponse{}
	for _, name := range s.names {
		for _, m := range s.models[name] {
			out.Models = append(out.Models, &pb.RepositoryIndexResponse_ModelIndex{Name: name, Version: m.Version, State: "READY"})
		}
	}
	return out, nil
}

// ModelInfer runs one request of a non-decoupled model.
func (s *Server) ModelInfer(ctx context.Context, r *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	if s.stopping.Load() {
		return nil, toStatus(errShuttingDown, codes.Unavailable)
	}
	m, err := s.lookup(r.GetModelName(), r.GetModelVersion())
	if err != nil {
		return nil, toStatus(err, codes.NotFound)
	}
	if m.Decoupled {
		return nil, status.Error(codes.Unimplemented, "ModelInfer RPC doesn't support models with decoupled transaction policy")
	}
	p, err := parseParams(r.GetParameters())
	if err != nil {
		return nil, toStatus(err, codes.InvalidArgument)
	}
	c, err := newCall(m, r, p)
	if err != nil {
		return nil, toStatus(err, codes.InvalidArgument)
	}
	var got unarySink
	c.out = &got
	// The request is over when ModelInfer returns; a cancellation before
	// that (the client's) ends an instance hold, the return does not.
	ctx, cancel := context.WithCancelCause(s.extractMetadata(ctx))
	defer cancel(errRequestDone)
	s.run(ctx, c)
	switch {
	case ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	case got.err != nil:
		return nil, toStatus(got.err, codes.Unknown)
	}
	return got.resp.GetInferResponse(), nil
}

// unarySink keeps the one final response of a unary call. A unary response
// carries no triton_final_response: only Triton's stream handler sets it.
type unarySink struct {
	resp *pb.ModelStreamInferResponse
	err  error
}

func (u *unarySink) send(context.Context, *pb.ModelStreamInferResponse) error { return nil }

func (u *unarySink) finish(r *pb.ModelStreamInferResponse, err error) {
	if r != nil {
		delete(r.GetInferResponse().GetParameters(), paramFinal)
	}
	u.resp, u.err = r, err
}
