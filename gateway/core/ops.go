package core

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// statusWriter records the status of a response. It passes Flush, Hijack
// and Unwrap through so streams and WebSocket upgrades work behind it.
type statusWriter struct {
	http.ResponseWriter
	status int
	// since, when set, is when an OpenAI request arrived: a response
	// that is not an event stream gets openai-processing-ms.
	since time.Time

	// The request's server span and start (instrument's), for a request
	// that detaches (detachStream) or runs shallow (runShallow): that
	// goroutine, or rest, ends them, and instrument does not.
	span     trace.Span
	start    time.Time
	detached bool
	// rest, when set, is the rest of the request, left by its handler to
	// run at the top of the goroutine's stack once the router has
	// returned (runShallow, topHandler). top, when set, is the request
	// as topHandler got it: topHandler runs rest. routed is the
	// request's context as the router gave it to instrument.
	rest   func()
	top    *http.Request
	routed context.Context

	// What the request's log line tells beyond its status: the model it
	// asked for and the tokens it generated (counted says that a text
	// model counted them), set by noteRequest.
	model   string
	tokens  int
	counted bool
}

// commit notes that the headers go out now, with status code.
func (w *statusWriter) commit(code int) {
	if w.status != 0 {
		return
	}
	w.status = code
	if h := w.Header(); !w.since.IsZero() && !strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
		h.Set("Openai-Processing-Ms", strconv.FormatInt(time.Since(w.since).Milliseconds(), 10))
	}
}

func (w *statusWriter) WriteHeader(code int) {
	w.commit(code)
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	w.commit(http.StatusOK)
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Flush() {
	w.commit(http.StatusOK)
	http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return c, rw, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Healthz reports that the process serves HTTP.
func (s *Server) Healthz(w http.ResponseWriter, r *http.Request) {
	WriteJSON(w, http.StatusOK, []byte(`{"status":"ok"}`))
}

// Readyz reports whether the gateway takes traffic: not draining and
// upstream ready.
func (s *Server) Readyz(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		WriteJSON(w, http.StatusServiceUnavailable, []byte(`{"status":"draining"}`))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.Opts.ReadyTimeout)
	defer cancel()
	ok, err := s.Inspect.ServerReady(ctx)
	if err != nil || !ok {
		if err == nil {
			err = errors.New("upstream not ready")
		}
		s.Log.InfoContext(r.Context(), "not ready", "err", err)
		WriteJSON(w, http.StatusServiceUnavailable, []byte(`{"status":"upstream not ready"}`))
		return
	}
	WriteJSON(w, http.StatusOK, []byte(`{"status":"ready"}`))
}

// MetricsHandler serves /metrics with Options.Metrics.
func (s *Server) MetricsHandler(w http.ResponseWriter, r *http.Request) {
	if s.Opts.Metrics == nil {
		WriteJSON(w, http.StatusNotFound, []byte(`{"error":"metrics are not served by this gateway"}`))
		return
	}
	s.Opts.Metrics.ServeHTTP(w, r)
}
