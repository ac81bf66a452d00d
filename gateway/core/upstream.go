package core

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

// CodeNotLoaded is the error code of a known model upstream has not loaded
// (Options.UnloadedModels).
const CodeNotLoaded = "model_not_loaded"

// Metadata asks upstream for a model's metadata (notLoaded's errors).
func (s *Server) Metadata(ctx context.Context, model, version string) (*pb.ModelMetadataResponse, error) {
	md, err := s.Inspect.ModelMetadata(ctx, model, version)
	if err != nil {
		return nil, s.NotFound(ctx, model, err)
	}
	return md, nil
}

// ModelConfig asks upstream for a model's config (notLoaded's errors).
func (s *Server) ModelConfig(ctx context.Context, model, version string) (*pb.ModelConfig, error) {
	cfg, err := s.Inspect.ModelConfig(ctx, model, version)
	if err != nil {
		return nil, s.NotFound(ctx, model, err)
	}
	return cfg, nil
}

// NotFound is err, upstream's answer about model, unless it is "not
// found": then it is notLoaded's answer, or upstream's with the name of
// the nearest model when one is near ("did you mean").
func (s *Server) NotFound(ctx context.Context, model string, err error) error {
	err = s.NotLoaded(ctx, model, err)
	e := Classify(err)
	if e.Status != http.StatusNotFound || e.Code == CodeNotLoaded {
		return err
	}
	if hint := s.DidYouMean(ctx, model); hint != "" {
		e2 := *e
		e2.Msg, e2.Err = e.Msg+hint, err
		return &e2
	}
	return err
}

// NotLoaded is err, upstream's answer about model, unless upstream does
// not know the model but Options.UnloadedModels does (in any case): then
// it is the model's hint instead of upstream's "unknown model".
func (s *Server) NotLoaded(_ context.Context, model string, err error) error {
	if Classify(err).Status != http.StatusNotFound {
		return err
	}
	for name, hint := range s.Opts.UnloadedModels {
		if strings.EqualFold(name, model) {
			return &HTTPError{Status: http.StatusNotFound, Code: CodeNotLoaded, Param: "model",
				Msg: "The model '" + name + "' is known but not loaded: " + hint, Err: err}
		}
	}
	return err
}

// DidYouMean is "; did you mean 'NAME'?" for the model nearest to model
// (nearestModel), "" when none is near.
func (s *Server) DidYouMean(ctx context.Context, model string) string {
	if alt := s.NearestModel(ctx, model); alt != "" && alt != model {
		return "; did you mean '" + alt + "'?"
	}
	return ""
}

// NearestModel is the model upstream serves or Options.UnloadedModels
// knows whose name is nearest to name: the same but for case, else the
// fewest edits away within a budget that grows with the name's length;
// "" when none is near. It asks upstream for its repository index: it is
// for requests that are failing anyway.
func (s *Server) NearestModel(ctx context.Context, name string) string {
	var names []string
	if index, err := s.Inspect.RepositoryIndex(ctx); err == nil {
		for _, m := range index {
			names = append(names, m.GetName())
		}
	}
	for n := range s.Opts.UnloadedModels {
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
