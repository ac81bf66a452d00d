// Package tritonapi serves the Triton-compatible /v2 routes: generate
// and generate_stream (Triton's generate extension), infer (the KServe
// v2 HTTP/REST protocol with the binary tensor data extension), and the
// server's and models' metadata, readiness, config, statistics and the
// repository index, relayed from upstream. Its requests live the core's
// one life (core.Server.Serve).
package tritonapi

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/streamgate/streamgate/gateway/core"
	"github.com/streamgate/streamgate/gateway/jobs"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// API is the /v2 surface, on the gateway's core; its generate jobs
// come from the shared builder (package jobs).
type API struct{ *jobs.Builder }

// New returns the surface on b.
func New(b *jobs.Builder) *API { return &API{b} }

// The Triton-compatible /v2 routes: metadata and health relayed from
// upstream, and Triton's generate extension over streaming
// inference.

type tensorJSON struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

type modelMetadataJSON struct {
	Name     string       `json:"name"`
	Versions []string     `json:"versions"`
	Platform string       `json:"platform"`
	Inputs   []tensorJSON `json:"inputs"`
	Outputs  []tensorJSON `json:"outputs"`
}

func tensorsJSON(ts []*pb.ModelMetadataResponse_TensorMetadata) []tensorJSON {
	out := make([]tensorJSON, 0, len(ts))
	for _, t := range ts {
		shape := t.GetShape()
		if shape == nil {
			shape = []int64{}
		}
		out = append(out, tensorJSON{Name: t.GetName(), Datatype: t.GetDatatype(), Shape: shape})
	}
	return out
}

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("gateway: marshal: " + err.Error()) // only our own types
	}
	return b
}

func modelParams(r *http.Request) (model, version string) {
	return core.URLParam(r, "model"), core.URLParam(r, "version")
}

// ServerMetadata serves GET /v2: the server's name, version and extensions.
func (s *API) ServerMetadata(w http.ResponseWriter, r *http.Request) error {
	md, err := s.Inspect.ServerMetadata(r.Context())
	if err != nil {
		return err
	}
	ext := md.GetExtensions()
	if ext == nil {
		ext = []string{}
	}
	core.WriteJSON(w, http.StatusOK, mustMarshal(struct {
		Name       string   `json:"name"`
		Version    string   `json:"version"`
		Extensions []string `json:"extensions"`
	}{md.GetName(), md.GetVersion(), ext}))
	return nil
}

// health answers 200 with an empty body when ok, else 503.
func (s *API) health(w http.ResponseWriter, r *http.Request, check func(ctx context.Context) (bool, error)) {
	ctx, cancel := context.WithTimeout(r.Context(), s.Opts.ReadyTimeout)
	defer cancel()
	ok, err := check(ctx)
	if err != nil {
		s.Log.InfoContext(r.Context(), "health check failed", "path", r.URL.Path, "err", err)
	}
	if err != nil || !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// ServerLive serves GET /v2/health/live: 200 while upstream is live, else 503.
func (s *API) ServerLive(w http.ResponseWriter, r *http.Request) {
	s.health(w, r, s.Inspect.ServerLive)
}

// ServerReady serves GET /v2/health/ready: 200 while upstream is ready
// and the gateway is not draining, else 503.
func (s *API) ServerReady(w http.ResponseWriter, r *http.Request) {
	s.health(w, r, func(ctx context.Context) (bool, error) {
		if s.Draining() {
			return false, nil
		}
		return s.Inspect.ServerReady(ctx)
	})
}

// ModelReady answers 200 or 503, as health does; with API keys, a model
// the key may not use is never ready.
func (s *API) ModelReady(w http.ResponseWriter, r *http.Request) error {
	model, version := modelParams(r)
	if core.TritonModelAllowed(r.Context(), model) != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		return nil
	}
	s.health(w, r, func(ctx context.Context) (bool, error) {
		return s.Inspect.ModelReady(ctx, model, version)
	})
	return nil
}

// ModelMetadata serves GET /v2/models/{model}[/versions/{version}]: the
// model's inputs and outputs.
func (s *API) ModelMetadata(w http.ResponseWriter, r *http.Request) error {
	model, version := modelParams(r)
	if err := core.TritonModelAllowed(r.Context(), model); err != nil {
		return err
	}
	md, err := s.Metadata(r.Context(), model, version)
	if err != nil {
		return err
	}
	versions := md.GetVersions()
	if versions == nil {
		versions = []string{}
	}
	core.WriteJSON(w, http.StatusOK, mustMarshal(modelMetadataJSON{
		Name: md.GetName(), Versions: versions, Platform: md.GetPlatform(),
		Inputs: tensorsJSON(md.GetInputs()), Outputs: tensorsJSON(md.GetOutputs()),
	}))
	return nil
}

// tritonJob reads a generate route's body into a job of form f.
func (s *API) tritonJob(w http.ResponseWriter, r *http.Request, f core.Form) (*core.Job, error) {
	body, err := s.ReadBody(w, r)
	if err != nil {
		return nil, err
	}
	model, version := modelParams(r)
	return s.GenerateJob(r.Context(), model, version, body, f)
}

// Generate serves POST .../generate: one JSON body from the model's one
// response.
func (s *API) Generate(w http.ResponseWriter, r *http.Request) error {
	j, err := s.tritonJob(w, r, core.FormBody)
	if err != nil {
		return err
	}
	return s.Serve(r.Context(), r.RemoteAddr, j, &core.BodySink{W: w})
}

// GenerateStream serves POST .../generate_stream: one event per response.
func (s *API) GenerateStream(w http.ResponseWriter, r *http.Request) error {
	j, err := s.tritonJob(w, r, core.FormSSE)
	if err != nil {
		return err
	}
	return s.ServeSSE(w, r, j, core.TritonErrors, core.FormatTriton, true)
}
