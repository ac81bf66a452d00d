package gateway

import (
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/streamgate/streamgate/gateway/internal/nearest"
)

// routeHint is "; did you mean METHOD PATH?" for the route nearest to a
// path that no route takes (a typo such as /v1/chat/completion), "" when
// none is near. Only routes of the same API (first segment) and as many
// segments count; their {parameters} take the request's own segments, so
// only a route's fixed parts count as edits.
func (s *Server) routeHint(method, path string) string {
	var paths []string
	segs := strings.Split(path, "/")
	chi.Walk(s.router, func(m, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if m != method {
			return nil
		}
		parts := strings.Split(strings.TrimSuffix(route, "/*"), "/")
		if len(parts) != len(segs) || len(parts) < 2 || parts[1] != segs[1] {
			return nil // another API (/v1 for /v2) is never the typo's fix
		}
		for i, p := range parts {
			if strings.HasPrefix(p, "{") {
				parts[i] = segs[i]
			}
		}
		paths = append(paths, strings.Join(parts, "/"))
		return nil
	})
	if alt := nearest.Name(path, paths); alt != "" {
		return "; did you mean " + method + " " + alt + "?"
	}
	return ""
}
