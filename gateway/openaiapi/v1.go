// Package openaiapi serves the OpenAI-compatible /v1 routes: chat
// completions, completions, the Responses API (with stored and background
// responses) and the models list, over text models that follow the vLLM
// or TensorRT-LLM conventions. Its requests live the core's one life
// (core.Server.Serve).
package openaiapi

import (
	"errors"
	"net/http"
	"sort"
	"strings"

	"github.com/streamgate/streamgate/gateway/core"
	"github.com/streamgate/streamgate/gateway/jobs"
	"github.com/streamgate/streamgate/gateway/openai"
	"github.com/streamgate/streamgate/gateway/textmodel"
)

// API is the /v1 surface, on the gateway's core; its jobs come from
// the shared builder (package jobs).
type API struct {
	*jobs.Builder
	running runningResponses // stored responses running here
}

// New returns the surface on b.
func New(b *jobs.Builder) *API {
	return &API{Builder: b, running: runningResponses{m: map[string]*runningResponse{}}}
}

// The OpenAI-compatible /v1 routes: chat completions and completions over
// any text model (through the adapter its metadata selects), and the
// models list.

// serveOpenAI runs j: as an event stream when the client asked for one,
// otherwise as one JSON body.
func (s *API) serveOpenAI(w http.ResponseWriter, r *http.Request, j *core.Job, stream bool) error {
	if stream {
		return s.ServeSSE(w, r, j, core.OpenAIErrors, core.FormatOpenAI, false)
	}
	return s.Serve(r.Context(), r.RemoteAddr, j, &core.BodySink{W: w})
}

// streamForm is the form of an OpenAI request's payloads over HTTP.
func streamForm(stream bool) core.Form {
	if stream {
		return core.FormSSE
	}
	return core.FormBody
}

// ChatCompletions serves POST /v1/chat/completions.
func (s *API) ChatCompletions(w http.ResponseWriter, r *http.Request) error {
	body, err := s.ReadBody(w, r)
	if err != nil {
		return err
	}
	cr, err := openai.ParseChat(body)
	if err != nil {
		return err
	}
	j, err := s.ChatJob(r.Context(), cr, streamForm(cr.Stream))
	if err != nil {
		return err
	}
	return s.serveOpenAI(w, r, j, cr.Stream)
}

// Completions serves POST /v1/completions.
func (s *API) Completions(w http.ResponseWriter, r *http.Request) error {
	body, err := s.ReadBody(w, r)
	if err != nil {
		return err
	}
	cr, err := openai.ParseCompletion(body)
	if err != nil {
		return err
	}
	j, err := s.CompletionJob(r.Context(), cr, streamForm(cr.Stream))
	if err != nil {
		return err
	}
	return s.serveOpenAI(w, r, j, cr.Stream)
}

// ListModels lists the ready models that follow a text convention.
func (s *API) ListModels(w http.ResponseWriter, r *http.Request) error {
	index, err := s.Inspect.RepositoryIndex(r.Context())
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	var models []openai.Model
	for _, m := range index {
		name := m.GetName()
		if seen[name] || (m.GetState() != "" && !strings.EqualFold(m.GetState(), "READY")) || core.ModelAllowed(r.Context(), name) != nil {
			continue
		}
		seen[name] = true
		if _, err := s.TextModel(r.Context(), &name); err != nil {
			continue
		}
		models = append(models, openai.NewModel(name))
	}
	sort.Slice(models, func(i, j int) bool { return models[i].ID < models[j].ID })
	core.WriteJSON(w, http.StatusOK, openai.ModelList(models))
	return nil
}

// GetModel serves GET /v1/models/{id}.
func (s *API) GetModel(w http.ResponseWriter, r *http.Request) error {
	id := core.URLParam(r, "id")
	if err := core.ModelAllowed(r.Context(), id); err != nil {
		return err
	}
	if _, err := s.TextModel(r.Context(), &id); err != nil {
		if errors.Is(err, textmodel.ErrNotText) {
			err = &core.HTTPError{Status: http.StatusNotFound, Code: "model_not_found", Param: "model", Msg: "The model '" + id + "' is not a text model", Err: err}
		}
		return err
	}
	core.WriteJSON(w, http.StatusOK, openai.ModelObject(openai.NewModel(id)))
	return nil
}
