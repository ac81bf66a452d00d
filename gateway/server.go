package gateway

import (
	"context"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/streamgate/streamgate/gateway/core"
	"github.com/streamgate/streamgate/gateway/jobs"
	"github.com/streamgate/streamgate/gateway/openaiapi"
	"github.com/streamgate/streamgate/gateway/playground"
	"github.com/streamgate/streamgate/gateway/streams"
	"github.com/streamgate/streamgate/gateway/tritonapi"
	"github.com/streamgate/streamgate/gateway/wsapi"
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
// takes from net/http: started on their handler's goroutine, they are
// relayed and ended where their responses arrive (a resumable one on a
// goroutine of its own), with one goroutine that reads their connection
// until its next request; WebSocket sessions end with their socket. Nothing outlives the requests
// that started it.
type Server struct {
	core   *core.Server // what the surfaces share: the lifecycle, admission, errors
	router chi.Router

	openai  *openaiapi.API
	triton  *tritonapi.API
	ws      *wsapi.API
	streams *streams.API
}

// newServer is New with inspect answering the /v2 and /v1/models
// questions instead of up (tests: upstreamtest's canned clients start
// calls but know no models).
func newServer(up *upstream.Client, inspect Inspector, opts *Options) *Server {
	c := core.New(up, inspect, opts)
	b := jobs.New(c)
	s := &Server{core: c, openai: openaiapi.New(b), triton: tritonapi.New(b), ws: wsapi.New(b), streams: streams.New(c)}
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

// Drain shuts the gateway down gracefully. At once /readyz and
// /v2/health/ready start failing, new inference requests get 503 with
// Retry-After, and WebSocket sockets stop taking requests (and close with
// 1001 as soon as they have none running). Running requests may finish
// until ctx is done; then SSE streams end with an error event, non-streaming
// requests get 503, and sockets close with 1001. What has not ended
// Options.StopTimeout later (its client does not read) has its connection
// cut. Drain returns once every request has ended: nil if all finished on
// their own, ctx.Err() if some had to be ended. It does not close
// listeners; call http.Server.Shutdown afterwards.
func (s *Server) Drain(ctx context.Context) error { return s.core.Drain(ctx) }

// HTTP2Config is the HTTP/2 configuration consistent with the gateway's
// limits, for the http.Server that serves Handler. A connection may open
// twice Options.MaxStreamsPerConn streams (at least the 100 HTTP/2
// recommends): inference requests past the per-client limit are answered
// 429 with Retry-After in the route's format rather than left waiting
// unseen in the client's HTTP/2 queue, and requests that are not inference
// (models, health, metrics) still get through beside a full connection.
func (s *Server) HTTP2Config() *http.HTTP2Config { return s.core.HTTP2Config() }

func (s *Server) routes() chi.Router {
	r := chi.NewRouter()
	r.Use(s.core.Instrument, s.core.Guard, s.core.CORS)
	r.NotFound(s.noRoute)
	r.MethodNotAllowed(s.noRoute)

	r.Method(http.MethodGet, "/", playground.Handler())
	r.Get("/healthz", s.core.Healthz)
	r.Get("/readyz", s.core.Readyz)
	r.Get("/metrics", s.core.MetricsHandler)

	triton := func(h core.HandlerFunc) http.HandlerFunc { return s.core.Handle(core.TritonErrors, h) }
	openAI := func(h core.HandlerFunc) http.HandlerFunc { return s.core.Handle(core.OpenAIErrors, h) }
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
	r.Get("/v1/ws", s.core.HandleOpen(core.TritonErrors, s.ws.WebSocket))
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
