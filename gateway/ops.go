package gateway

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"
	"github.com/streamgate/streamgate/gateway/metrics"
	"github.com/streamgate/streamgate/upstream"
)

// gatewayMetrics are the series /metrics exposes.
type gatewayMetrics struct {
	reg        *metrics.Registry
	requests   *metrics.Family // route, code
	active     *metrics.Family // protocol: sse, http, ws
	sockets    *metrics.Family
	events     *metrics.Family // protocol
	rejected   *metrics.Family // reason
	clientGone *metrics.Family // protocol
	upstream   *metrics.Family // kind
}

func newGatewayMetrics() *gatewayMetrics {
	r := metrics.NewRegistry()
	return &gatewayMetrics{
		reg:        r,
		requests:   r.Counter("streamgate_gateway_http_requests_total", "HTTP requests by route pattern and status (101 for WebSocket upgrades).", "route", "code"),
		active:     r.Gauge("streamgate_gateway_active_requests", "Inference requests in flight, by protocol (sse, http, ws).", "protocol"),
		sockets:    r.Gauge("streamgate_gateway_websocket_connections", "Open WebSocket connections."),
		events:     r.Counter("streamgate_gateway_stream_events_total", "Events written to SSE streams and WebSocket data frames, by protocol.", "protocol"),
		rejected:   r.Counter("streamgate_gateway_rejected_total", "Inference requests refused before reaching upstream, by reason.", "reason"),
		clientGone: r.Counter("streamgate_gateway_client_gone_total", "Requests cancelled upstream because the client went away or cancelled, by protocol.", "protocol"),
		upstream:   r.Counter("streamgate_gateway_upstream_errors_total", "Requests that ended with an upstream error, by kind.", "kind"),
	}
}

// statusWriter records the status of a response. It passes Flush, Hijack
// and Unwrap through so streams and WebSocket upgrades work behind it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
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

// instrument counts requests by route pattern and status.
func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		route := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			route = rc.RoutePattern()
		}
		code := sw.status
		if code == 0 {
			code = StatusClientClosed // nothing was written: the client left
		}
		s.metrics.requests.With(route, strconv.Itoa(code)).Inc()
	})
}

// healthz reports that the process serves HTTP.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, []byte(`{"status":"ok"}`))
}

// readyz reports whether the gateway takes traffic: not draining and
// upstream ready.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, []byte(`{"status":"draining"}`))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.ReadyTimeout)
	defer cancel()
	ok, err := s.inspect.ServerReady(ctx)
	if err != nil || !ok {
		if err == nil {
			err = errors.New("upstream not ready")
		}
		s.log.Info("not ready", "err", err)
		writeJSON(w, http.StatusServiceUnavailable, []byte(`{"status":"upstream not ready"}`))
		return
	}
	writeJSON(w, http.StatusOK, []byte(`{"status":"ready"}`))
}

func (s *Server) metricsHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", metrics.ContentType)
	s.metrics.reg.WriteText(w)
	if st, ok := s.inspect.(statser); ok {
		upstreamMetrics(st.Stats()).WriteText(w)
	}
}

// statser is the optional capability of an Upstream that reports its pool
// (*upstream.Client does); /metrics then includes it.
type statser interface {
	Stats() upstream.Stats
}

var _ statser = (*upstream.Client)(nil)

// upstreamMetrics renders one Stats snapshot.
func upstreamMetrics(st upstream.Stats) *metrics.Registry {
	r := metrics.NewRegistry()
	r.Gauge("streamgate_upstream_in_flight", "Requests placed on upstream streams.").With().Set(float64(st.InFlight))
	r.Gauge("streamgate_upstream_streams_open", "Open upstream streams, pooled and dedicated.").With().Set(float64(st.StreamsOpen))
	healthy := r.Gauge("streamgate_upstream_target_healthy", "1 if the target passes health checks.", "target")
	for _, t := range st.Targets {
		v := 0.0
		if t.Healthy {
			v = 1
		}
		healthy.With(t.Addr).Set(v)
	}
	counters := []struct {
		name, help string
		v          uint64
	}{
		{"streamgate_upstream_requests_total", "Requests placed by Start.", st.Started},
		{"streamgate_upstream_retries_total", "Requests re-sent after their stream broke.", st.Retries},
		{"streamgate_upstream_stream_breaks_total", "Streams that ended with an error.", st.StreamBreaks},
		{"streamgate_upstream_queue_overflows_total", "Requests failed because their consumer was too slow.", st.QueueOverflows},
		{"streamgate_upstream_dropped_responses_total", "Responses for requests no longer waited for.", st.Dropped},
	}
	for _, c := range counters {
		r.Counter(c.name, c.help).With().Set(float64(c.v))
	}
	cancels := r.Counter("streamgate_upstream_cancels_total", "Requests cancelled upstream, by mechanism.", "mode")
	cancels.With("inband").Set(float64(st.CancelsInband))
	cancels.With("stream").Set(float64(st.CancelsStream))
	cancels.With("none").Set(float64(st.CancelsNone))
	return r
}
