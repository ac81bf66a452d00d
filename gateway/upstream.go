package gateway

import (
	"context"
	"net/http"
	"time"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/upstream"
)

// Inferer starts inference requests. Start's ctx bounds the request: when
// it is done the request is cancelled upstream.
type Inferer interface {
	Start(ctx context.Context, req *pb.ModelInferRequest) (*upstream.Call, error)
}

// Inspector answers the health and metadata questions the /v2 and
// /v1/models routes relay. Errors are gRPC status errors (NotFound for an
// unknown model) or *upstream.Error.
type Inspector interface {
	ServerLive(ctx context.Context) (bool, error)
	ServerReady(ctx context.Context) (bool, error)
	ServerMetadata(ctx context.Context) (*pb.ServerMetadataResponse, error)
	ModelReady(ctx context.Context, name, version string) (bool, error)
	ModelMetadata(ctx context.Context, name, version string) (*pb.ModelMetadataResponse, error)
	ModelConfig(ctx context.Context, name, version string) (*pb.ModelConfig, error)
	// ModelStatistics: name "" is every model, version "" every version.
	ModelStatistics(ctx context.Context, name, version string) (*pb.ModelStatisticsResponse, error)
	RepositoryIndex(ctx context.Context) ([]*pb.RepositoryIndexResponse_ModelIndex, error)
}

// Upstream is everything the gateway needs from the engine side.
type Upstream interface {
	Inferer
	Inspector
}

var _ Upstream = (*upstream.Client)(nil)

// call is the part of *upstream.Call the lifecycle uses (see its docs):
// RecvTick waits for the next response, ctx or tick (then nil, nil);
// TryRecv takes a response only if one is ready (ok false otherwise). It is
// an interface so that relay's tests and benchmarks can drive it without a
// network (synctest, canned responses).
type call interface {
	RecvTick(ctx context.Context, tick <-chan time.Time) (*pb.ModelInferResponse, error)
	TryRecv() (resp *pb.ModelInferResponse, ok bool, err error)
	Cancel()
}

var _ call = (*upstream.Call)(nil)

// startFunc starts a call: Inferer.Start behind the call interface, so
// that tests can run the routes against canned calls (newServer).
type startFunc func(ctx context.Context, req *pb.ModelInferRequest) (call, error)

func starter(in Inferer) startFunc {
	return func(ctx context.Context, req *pb.ModelInferRequest) (call, error) {
		c, err := in.Start(ctx, req)
		if err != nil {
			return nil, err // not a nil *upstream.Call in a non-nil call
		}
		return c, nil
	}
}

// codeNotLoaded is the error code of a known model upstream has not loaded
// (Options.UnloadedModels).
const codeNotLoaded = "model_not_loaded"

// metadata asks upstream for a model's metadata (notLoaded's errors).
func (s *Server) metadata(ctx context.Context, model, version string) (*pb.ModelMetadataResponse, error) {
	md, err := s.inspect.ModelMetadata(ctx, model, version)
	if err != nil {
		return nil, s.notLoaded(model, err)
	}
	return md, nil
}

// modelConfig asks upstream for a model's config (notLoaded's errors).
func (s *Server) modelConfig(ctx context.Context, model, version string) (*pb.ModelConfig, error) {
	cfg, err := s.inspect.ModelConfig(ctx, model, version)
	if err != nil {
		return nil, s.notLoaded(model, err)
	}
	return cfg, nil
}

// notLoaded is err, upstream's answer about model, unless upstream does
// not know the model but Options.UnloadedModels does: then it is the
// model's hint instead of upstream's "unknown model".
func (s *Server) notLoaded(model string, err error) error {
	if hint, ok := s.opts.UnloadedModels[model]; ok && classify(err).Status == http.StatusNotFound {
		return &httpError{Status: http.StatusNotFound, Code: codeNotLoaded, Param: "model",
			Msg: "The model '" + model + "' is known but not loaded: " + hint, Err: err}
	}
	return err
}
