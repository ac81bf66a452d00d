// Package streams serves resumable streams over HTTP: GET
// /v1/streams/{sid} reads a stream's events back from its log (and then
// the live ones) on any replica, DELETE /v1/streams/{sid} cancels it. The
// producers (event streams, WebSocket requests, background responses)
// write the logs through the core (core.Server.StartLog).
package streams

import (
	"net/http"

	"github.com/streamgate/streamgate/gateway/core"
)

// API is the resumable streams' surface, on the gateway's core.
type API struct{ *core.Server }

// New returns the surface on c.
func New(c *core.Server) *API { return &API{c} }

// TokenQuery lets a browser's EventSource, which cannot set headers, give
// its API key as ?token=KEY: it becomes the request's Authorization
// header when it has none.
func TokenQuery(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if tok := r.URL.Query().Get("token"); tok != "" && r.Header.Get("Authorization") == "" {
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		h(w, r)
	}
}

// GetStream serves GET /v1/streams/{sid}: the events after Last-Event-ID
// (or ?last_event_id=), then the live ones until the stream's end, as an
// event stream in the original route's format. A stream that has ended
// with nothing after that id answers 204, which tells EventSource to stop
// reconnecting.
func (s *API) GetStream(w http.ResponseWriter, r *http.Request) error {
	after, err := core.ParseLastEventID(r.Header.Get(core.HeaderLastEvent), r.URL.Query().Get("last_event_id"))
	if err != nil {
		return err
	}
	return s.FollowStream(w, r, core.URLParam(r, "sid"), after)
}

// DeleteStream serves DELETE /v1/streams/{sid}: the replica producing the
// stream cancels its request at once. 204 also for a stream that has
// already ended.
func (s *API) DeleteStream(w http.ResponseWriter, r *http.Request) error {
	if err := s.Resume.Cancel(r.Context(), core.URLParam(r, "sid"), core.CallerKey(r.Context())); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
