package core

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// Requests from other sites. A browser lets any page send "simple"
// requests (a POST whose body is text/plain, a form, or untyped) to any
// address without asking it first, and a page whose name the attacker's
// DNS rebinds to 127.0.0.1 reaches a local server as its own origin. The
// guard stops both before any route runs:
//
//   - an open gateway (no API keys), or one with Options.AllowedHosts,
//     answers only requests whose Host is a loopback name, an IP address
//     (a rebound name is never one) or an allowed name: 403
//     host_not_allowed otherwise;
//   - a POST whose body is text/plain or multipart/form-data is 415 on
//     every route (every body here is JSON or Triton's binary format); a
//     form or untyped body from a page of another origin (Origin neither
//     the gateway's own nor allowed by Options.CORSOrigins) is 415 too.
//
// /v1/ws checks Origin the same way (originAllowed).

var errSimpleBody = &HTTPError{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type", Param: "Content-Type",
	Msg: "send the body as application/json (or application/octet-stream on /infer): a browser page on another site can send text, form and untyped bodies without asking"}

// Guard is the middleware that refuses, before any route runs, a Host an
// open gateway does not answer and a body a browser page on another site
// could send without asking (see above).
func (s *Server) Guard(next http.Handler) http.Handler {
	checkHost := s.Opts.Keys == nil || len(s.Opts.AllowedHosts) > 0
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if checkHost && !s.hostAllowed(r.Host) {
			e := &HTTPError{Status: http.StatusForbidden, Code: "host_not_allowed",
				Msg: "Host '" + Truncate(r.Host, 64) + "' is not allowed: this gateway answers loopback names, IP addresses and the names of --allowed-hosts only"}
			s.writeError(w, r, guardErrors(r), e)
			return
		}
		if r.Method == http.MethodPost && s.simpleBody(r) {
			s.writeError(w, r, guardErrors(r), errSimpleBody)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// guardErrors is the error format of r's route: /v1/ws answers in
// Triton's, as its handler does; the others as pathErrors says.
func guardErrors(r *http.Request) ErrorFormat {
	if r.URL.Path == "/v1/ws" {
		return TritonErrors
	}
	return PathErrors(r)
}

// hostAllowed reports whether a request's Host may reach the gateway:
// empty (HTTP/1.0), localhost or a name under it, an IP address, or a
// name one of Options.AllowedHosts (path.Match patterns, "*" any) matches.
func (s *Server) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "" || host == "localhost" || strings.HasSuffix(host, ".localhost") || net.ParseIP(host) != nil {
		return true
	}
	for _, p := range s.Opts.AllowedHosts {
		if ok, _ := path.Match(strings.ToLower(p), host); ok {
			return true
		}
	}
	return false
}

// simpleBody reports whether r's body is one a page of any site may send
// without a preflight that the gateway refuses: text/plain or
// multipart/form-data always, a form or untyped body from another origin.
func (s *Server) simpleBody(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	switch {
	case ct == "":
		mt = ""
	case err != nil:
		return false // not a type a browser sends without asking
	}
	switch mt {
	case "text/plain", "multipart/form-data":
		return true
	case "", "application/x-www-form-urlencoded":
		origin := r.Header.Get("Origin")
		return origin != "" && !s.OriginAllowed(r, origin)
	}
	return false
}

// OriginAllowed reports whether a page of origin may call the gateway
// answering r: its own origin (the origin's host:port is r's Host), or one
// Options.CORSOrigins allows; on /v1/ws also one of
// Options.WebSocketOriginPatterns.
func (s *Server) OriginAllowed(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) || s.corsAllowed(origin) {
		return true
	}
	for _, p := range s.Opts.WebSocketOriginPatterns {
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(u.Host)); ok {
			return true
		}
	}
	return false
}
