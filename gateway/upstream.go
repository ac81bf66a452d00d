package gateway

import (
	"context"
	"net/http"
	"sort"
	"strings"

	"github.com/streamgate/streamgate/gateway/internal/nearest"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/upstream"
)

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

var _ Inspector = (*upstream.Client)(nil)

// codeNotLoaded is the error code of a known model upstream has not loaded
// (Options.UnloadedModels).
const codeNotLoaded = "model_not_loaded"

// metadata asks upstream for a model's metadata (notLoaded's errors).
func (s *Server) metadata(ctx context.Context, model, version string) (*pb.ModelMetadataResponse, error) {
	md, err := s.inspect.ModelMetadata(ctx, model, version)
	if err != nil {
		return nil, s.notFound(ctx, model, err)
	}
	return md, nil
}

// modelConfig asks upstream for a model's config (notLoaded's errors).
func (s *Server) modelConfig(ctx context.Context, model, version string) (*pb.ModelConfig, error) {
	cfg, err := s.inspect.ModelConfig(ctx, model, version)
	if err != nil {
		return nil, s.notFound(ctx, model, err)
	}
	return cfg, nil
}

// notFound is err, upstream's answer about model, unless it is "not
// found": then it is notLoaded's answer, or upstream's with the name of
// the nearest model when one is near ("did you mean").
func (s *Server) notFound(ctx context.Context, model string, err error) error {
	err = s.notLoaded(ctx, model, err)
	e := classify(err)
	if e.Status != http.StatusNotFound || e.Code == codeNotLoaded {
		return err
	}
	if hint := s.didYouMean(ctx, model); hint != "" {
		e2 := *e
		e2.Msg, e2.Err = e.Msg+hint, err
		return &e2
	}
	return err
}

// notLoaded is err, upstream's answer about model, unless upstream does
// not know the model but Options.UnloadedModels does (in any case): then
// it is the model's hint instead of upstream's "unknown model".
func (s *Server) notLoaded(_ context.Context, model string, err error) error {
	if classify(err).Status != http.StatusNotFound {
		return err
	}
	for name, hint := range s.opts.UnloadedModels {
		if strings.EqualFold(name, model) {
			return &httpError{Status: http.StatusNotFound, Code: codeNotLoaded, Param: "model",
				Msg: "The model '" + name + "' is known but not loaded: " + hint, Err: err}
		}
	}
	return err
}

// didYouMean is "; did you mean 'NAME'?" for the model nearest to model
// (nearestModel), "" when none is near.
func (s *Server) didYouMean(ctx context.Context, model string) string {
	if alt := s.nearestModel(ctx, model); alt != "" && alt != model {
		return "; did you mean '" + alt + "'?"
	}
	return ""
}

// nearestModel is the model upstream serves or Options.UnloadedModels
// knows whose name is nearest to name: the same but for case, else the
// fewest edits away within a budget that grows with the name's length;
// "" when none is near. It asks upstream for its repository index: it is
// for requests that are failing anyway.
func (s *Server) nearestModel(ctx context.Context, name string) string {
	var names []string
	if index, err := s.inspect.RepositoryIndex(ctx); err == nil {
		for _, m := range index {
			names = append(names, m.GetName())
		}
	}
	for n := range s.opts.UnloadedModels {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if strings.EqualFold(n, name) {
			return n
		}
	}
	best, bestD := "", 2+len(name)/4 // at most 1+len(name)/4 edits
	for _, n := range names {
		if d := nearest.Distance(strings.ToLower(name), strings.ToLower(n)); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}
