package gateway

import (
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/streamgate/streamgate/gateway/core"
	"github.com/streamgate/streamgate/gateway/openaiapi"
	"github.com/streamgate/streamgate/gateway/playground"
	"github.com/streamgate/streamgate/gateway/streams"
	"github.com/streamgate/streamgate/gateway/tritonapi"
	"github.com/streamgate/streamgate/upstream"
)

// Options configures a Server (see core.Options for every field). A nil
// *Options, and every zero field, means the default stated on the field.
type Options = core.Options

// Inspector answers the questions about upstream's models and health
// that the metadata routes relay (see core.Inspector).
type Inspector = core.Inspector

// Values of Options.Resumable.
const (
	ResumableOptIn  = core.ResumableOptIn
	ResumableAlways = core.ResumableAlways
	ResumableNever  = core.ResumableNever
)

// Defaults of Options.ResponseTTL, KeyStorage and StorageCap.
const (
	DefaultResponseTTL = core.DefaultResponseTTL
	DefaultKeyStorage  = core.DefaultKeyStorage
	DefaultStorageCap  = core.DefaultStorageCap
)

// StatusClientClosed is the status logged for a request whose client
// went away before its answer (nginx's 499).
const StatusClientClosed = core.StatusClientClosed

// Server is the HTTP edge. Its Handler may serve any number of requests
// concurrently; Drain may be called once, from any goroutine. Each request
// runs in its handler goroutine, except the event streams Options.Detach
// takes from net/http, which run on a goroutine of their own (and one that
// reads their connection) from their handler's return to their end;
// WebSocket sessions end with their socket. Nothing outlives the requests
// that started it.
type Server struct {
	*core.Server
	router chi.Router
	openai *openaiapi.API

	triton  *tritonapi.API
	streams *streams.API
}

// newServer is New with inspect answering the /v2 and /v1/models
// questions instead of up (tests: upstreamtest's canned clients start
// calls but know no models).
func newServer(up *upstream.Client, inspect Inspector, opts *Options) *Server {
	c := core.New(up, inspect, opts)
	s := &Server{Server: c, openai: openaiapi.New(c)}
	s.triton = tritonapi.New(c)
	s.streams = streams.New(c)
	s.router = s.routes()
	return s
}

// New returns a gateway in front of up. It panics if a chat template in
// opts does not parse (a wiring error).
func New(up *upstream.Client, opts *Options) *Server {
	return newServer(up, up, opts)
}

// Handler returns the gateway's HTTP handler (all routes of openapi.yaml).
// Serve it without a server-wide WriteTimeout: streams set their own
// deadlines.
func (s *Server) Handler() http.Handler { return core.TopHandler{Router: s.router} }

func (s *Server) routes() chi.Router {
	r := chi.NewRouter()
	r.Use(s.Instrument, s.Guard, s.CORS)
	r.NotFound(s.noRoute)
	r.MethodNotAllowed(s.noRoute)

	r.Method(http.MethodGet, "/", playground.Handler())
	r.Get("/healthz", s.Healthz)
	r.Get("/readyz", s.Readyz)
	r.Get("/metrics", s.MetricsHandler)

	triton := func(h core.HandlerFunc) http.HandlerFunc { return s.Handle(core.TritonErrors, h) }
	openAI := func(h core.HandlerFunc) http.HandlerFunc { return s.Handle(core.OpenAIErrors, h) }
	r.Get("/v2", triton(s.triton.ServerMetadata))
	r.Get("/v2/health/live", s.triton.ServerLive)
	r.Get("/v2/health/ready", s.triton.ServerReady)
	r.Post("/v2/repository/index", triton(s.triton.RepositoryIndex))
	r.Get("/v2/models/stats", triton(s.triton.ModelStats))
	for _, base := range []string{"/v2/models/{model}", "/v2/models/{model}/versions/{version}"} {
		r.Get(base, triton(s.triton.ModelMetadata))
		r.Get(base+"/ready", triton(s.triton.ModelReady))
		r.Post(base+"/generate", triton(s.triton.Generate))
		r.Post(base+"/generate_stream", triton(s.triton.GenerateStream))
		r.Post(base+"/infer", triton(s.triton.Infer))
		r.Get(base+"/config", triton(s.triton.ModelConfigJSON))
		r.Get(base+"/stats", triton(s.triton.ModelStats))
	}

	r.Post("/v1/chat/completions", openAI(s.openai.ChatCompletions))
	r.Post("/v1/completions", openAI(s.openai.Completions))
	r.Post("/v1/responses", openAI(s.openai.CreateResponse))
	r.Get("/v1/responses/{id}", openAI(s.openai.GetResponse))
	r.Delete("/v1/responses/{id}", openAI(s.openai.DeleteResponse))
	r.Post("/v1/responses/{id}/cancel", openAI(s.openai.CancelResponse))
	r.Get("/v1/responses/{id}/input_items", openAI(s.openai.ResponseInputItems))
	r.Get("/v1/models", openAI(s.openai.ListModels))
	r.Get("/v1/models/{id}", openAI(s.openai.GetModel))
	r.Get("/v1/ws", s.HandleOpen(core.TritonErrors, s.WebSocket))
	r.Get("/v1/streams/{sid}", streams.TokenQuery(openAI(s.streams.GetStream)))
	r.Delete("/v1/streams/{sid}", openAI(s.streams.DeleteStream))
	return r
}

// noRoute answers a request that no route takes, in the error format of
// the API its path belongs to (OpenAI's under /v1, Triton's elsewhere):
// 405 with Allow when the path has routes for other methods, else 404.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if s.router.Match(chi.NewRouteContext(), m, path) {
			allowed = append(allowed, m)
		}
	}
	e := &core.HTTPError{Status: http.StatusNotFound, Code: "not_found",
		Msg: "no route for " + r.Method + " " + r.URL.Path + s.routeHint(r.Method, r.URL.Path)}
	if len(allowed) > 0 {
		list := strings.Join(allowed, ", ")
		w.Header().Set("Allow", list)
		e.Status, e.Code = http.StatusMethodNotAllowed, "method_not_allowed"
		e.Msg = "method " + r.Method + " is not allowed on " + r.URL.Path + " (allowed: " + list + ")"
	}
	core.WriteJSON(w, e.Status, core.PathErrors(r)(e))
}
