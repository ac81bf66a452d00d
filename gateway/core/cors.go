package core

import (
	"net/http"
	"net/url"
	"path"
)

// corsExposed are the response headers a page on another origin may
// read: Retry-After on 429 and 503, the resumable stream's id.
const corsExposed = "Retry-After, Streamgate-Stream-Id, X-Ratelimit-Limit-Requests, X-Ratelimit-Remaining-Requests, X-Ratelimit-Reset-Requests, X-Ratelimit-Limit-Tokens, X-Ratelimit-Remaining-Tokens, X-Ratelimit-Reset-Tokens"

// corsMaxAge is how long, in seconds, a browser may cache a preflight.
const corsMaxAge = "600"

// CORS lets browser pages on the origins Options.CORSOrigins allows call
// every route. A preflight (OPTIONS with Access-Control-Request-Method) is
// answered here, whatever its path: 204 with the methods and the request
// headers asked for, or 403 in the route's error shape for an origin not
// allowed. Any other request from an allowed origin gets
// Access-Control-Allow-Origin and the headers it may read. With no
// origins configured it does nothing: preflights reach the router (405).
func (s *Server) CORS(next http.Handler) http.Handler {
	if len(s.Opts.CORSOrigins) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			next.ServeHTTP(w, r)
			return
		}
		allowed := s.corsAllowed(origin)
		h := w.Header()
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Add("Vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers")
			if !allowed {
				s.noCORS(w, r, origin)
				return
			}
			h.Set("Access-Control-Allow-Origin", origin)
			h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE")
			if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
				h.Set("Access-Control-Allow-Headers", req)
			}
			h.Set("Access-Control-Max-Age", corsMaxAge)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.Add("Vary", "Origin")
		if allowed {
			h.Set("Access-Control-Allow-Origin", origin)
			h.Set("Access-Control-Expose-Headers", corsExposed)
		}
		next.ServeHTTP(w, r)
	})
}

// corsAllowed reports whether a pattern of Options.CORSOrigins matches
// origin (scheme://host[:port]) or its host[:port].
func (s *Server) corsAllowed(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	for _, p := range s.Opts.CORSOrigins {
		if ok, _ := path.Match(p, origin); ok {
			return true
		}
		if ok, _ := path.Match(p, u.Host); ok {
			return true
		}
	}
	return false
}

// noCORS refuses the preflight of a page on an origin not allowed.
func (s *Server) noCORS(w http.ResponseWriter, r *http.Request, origin string) {
	e := &HTTPError{Status: http.StatusForbidden, Code: "origin_not_allowed",
		Msg: "origin " + origin + " may not call this server from a browser (see --origins)"}
	WriteJSON(w, e.Status, PathErrors(r)(e))
}
