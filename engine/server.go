package engine

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"os"
	"sort"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
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
	// Logger receives load and shutdown messages. Nil means slog.Default().
	Logger *slog.Logger
}

// Server is a Triton-compatible GRPCInferenceService. Its methods may be
// called concurrently. Serve blocks; GracefulStop and Stop end it.
type Server struct {
	pb.UnimplementedGRPCInferenceServiceServer

	log      *slog.Logger
	models   map[string]*Model
	names    []string
	grpc     *grpc.Server
	health   *health.Server
	stopping atomic.Bool
	inflight atomic.Int64
}

// New loads the models and builds the server. Errors name the config file
// and field at fault.
func New(opts Options) (*Server, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	factories := opts.Backends
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
	s := &Server{log: log, models: map[string]*Model{}}
	for _, m := range models {
		s.models[m.Name] = m
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
		s.models[m.Name] = m
	}
	for name := range s.models {
		s.names = append(s.names, name)
	}
	sort.Strings(s.names)
	log.Info("models loaded", "repository", label, "models", s.names)

	s.grpc = grpc.NewServer(
		grpc.MaxRecvMsgSize(math.MaxInt32),
		grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)
	pb.RegisterGRPCInferenceServiceServer(s.grpc, s)
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.health)
	return s, nil
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
	for _, m := range s.models {
		if err := m.close(); err != nil {
			s.log.Error("unloading model", "model", m.Name, "err", err)
		}
	}
}

// InFlight is the number of requests executing on model instances.
func (s *Server) InFlight() int { return int(s.inflight.Load()) }

// Models lists the loaded model names, sorted.
func (s *Server) Models() []string { return append([]string(nil), s.names...) }

// lookup finds a model; version must be "" or the model's one version.
func (s *Server) lookup(name, version string) (*Model, error) {
	m, ok := s.models[name]
	if !ok || (version != "" && version != modelVersion) {
		return nil, errUnknownModel(name, version)
	}
	return m, nil
}

func (s *Server) ServerLive(context.Context, *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: true}, nil
}

func (s *Server) ServerReady(context.Context, *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	return &pb.ServerReadyResponse{Ready: !s.stopping.Load()}, nil
}

func (s *Server) ModelReady(_ context.Context, r *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	_, err := s.lookup(r.GetName(), r.GetVersion())
	return &pb.ModelReadyResponse{Ready: err == nil && !s.stopping.Load()}, nil
}

func (s *Server) ServerMetadata(context.Context, *pb.ServerMetadataRequest) (*pb.ServerMetadataResponse, error) {
	return &pb.ServerMetadataResponse{
		Name:       "streamgate",
		Version:    Version,
		Extensions: []string{"model_configuration", "parameters", "model_repository", ExtensionCancel},
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
		out.Models = append(out.Models, &pb.RepositoryIndexResponse_ModelIndex{Name: name, Version: modelVersion, State: "READY"})
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
	br, wanted, err := m.decode(r, p.model)
	if err != nil {
		return nil, toStatus(err, codes.InvalidArgument)
	}
	var got unarySink
	s.run(ctx, &call{model: m, req: br, wanted: wanted, version: r.GetModelVersion(), out: &got})
	switch {
	case ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	case got.err != nil:
		return nil, toStatus(got.err, codes.Unknown)
	}
	return got.resp.GetInferResponse(), nil
}

// unarySink keeps the one final response of a unary call.
type unarySink struct {
	resp *pb.ModelStreamInferResponse
	err  error
}

func (u *unarySink) send(context.Context, *pb.ModelStreamInferResponse) error { return nil }
func (u *unarySink) finish(r *pb.ModelStreamInferResponse, err error)         { u.resp, u.err = r, err }
