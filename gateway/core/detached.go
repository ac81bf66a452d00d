package core

import (
	"context"
	"net/http"
	"sync/atomic"

	"github.com/streamgate/streamgate/gateway/detach"
)

// Detached streams (Options.Detach): a held event stream in net/http's
// handler goroutine costs that goroutine's stack under net/http's and the
// router's frames, net/http's background reader and its connection's
// buffers (about 21 KB). Detached, it costs a goroutine whose stack holds
// only the stream's own frames, one small reader goroutine, and a
// detach.Response.

// DetachStream runs run, the rest of an event stream's request, on a
// goroutine of its own over r's connection taken from net/http, and
// reports true; the handler must then return at once, writing nothing.
// run's error, if any, is answered in format f there, and the request's
// server span, metrics and access log line are ended there too, as
// instrument ends them. A request that cannot be detached (not plaintext
// HTTP/1.1, Options.Detach unset) runs shallow instead (runShallow). It
// reports false, doing nothing, when neither can be done (already
// answered, draining): run it in place.
func (s *Server) DetachStream(w http.ResponseWriter, r *http.Request, f ErrorFormat, run HandlerFunc) bool {
	if s.Opts.Detach == nil || r.ProtoMajor != 1 || r.TLS != nil {
		return s.runShallow(w, r, f, run)
	}
	sw := instrumented(w)
	if sw == nil || sw.status != 0 {
		return false
	}
	// Registered for Drain from before the connection leaves net/http
	// (which no longer closes it at shutdown) until it is handed back or
	// closed: Drain's cut closes it.
	var resp atomic.Pointer[detach.Response]
	remove, ok := s.streams.Add(&LiveStream{Hard: func() {}, Cut: func() {
		if d := resp.Load(); d != nil {
			d.Close()
		}
	}})
	if !ok {
		return false
	}
	d, err := detach.Hijack(sw.ResponseWriter, r)
	if err != nil {
		remove()
		return false
	}
	resp.Store(d)
	sw.detached = true
	// As runShallow's rest, the stream holds net/http's request rather
	// than the router's copy of it, which holds the route's path values
	// (the rest reads none), and the router's context when nothing came
	// after it.
	base, parent := r, r.Context()
	if sw.top != nil {
		base = sw.top
		if parent == sw.routed {
			parent = sw.top.Context()
		}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	dr := base.WithContext(ctx) // net/http ends r's context as the handler returns
	dr.Body = http.NoBody       // read; and it holds net/http's read buffer
	w2 := &statusWriter{ResponseWriter: d, since: sw.since, span: sw.span, start: sw.start}
	go s.runDetached(d, w2, dr, cancel, f, run, routePattern(r), remove)
	return true
}

// runDetached is a detached request's goroutine.
func (s *Server) runDetached(d *detach.Response, w *statusWriter, r *http.Request, cancel context.CancelFunc, f ErrorFormat, run HandlerFunc, route string, remove func()) {
	defer remove()
	defer func() {
		if v := recover(); v != nil { // as net/http answers a handler's panic
			s.Log.Error("panic serving a detached stream", "method", r.Method, "path", r.URL.Path,
				"panic", v, "stack", stack())
			d.Close()
		}
	}()
	d.Watch(cancel) // the client leaving ends the request, as in net/http
	if err := run(w, r); err != nil {
		s.writeError(w, r, f, err)
	}
	s.endServerSpan(r.Context(), r, w, route)
	cancel()
	var back *detach.Listener
	if !s.draining.Load() {
		back = s.Opts.Detach
	}
	d.Finish(back)
}

// runShallow leaves run, the rest of an event stream's request, to
// topHandler, which runs it once the router has returned, and reports
// true; the handler must then return at once, writing nothing. A stream
// that stays in net/http (HTTP/2, TLS) then waits with none of the
// router's, instrument's and its route's frames under it: the handler
// goroutine's stack, grown by parsing the request, shrinks at the next
// collections to what the wait uses (2 or 4 KB rather than 8). run's
// error, if any, is answered in format f there, and the request's server
// span, metrics and access log line are ended there too, as instrument
// ends them. It reports false, doing nothing, when the request did not
// come through topHandler or is answered already: run it in place.
func (s *Server) runShallow(w http.ResponseWriter, r *http.Request, f ErrorFormat, run HandlerFunc) bool {
	sw := instrumented(w)
	if sw == nil || sw.top == nil || sw.rest != nil || sw.status != 0 {
		return false
	}
	sw.detached = true
	route := routePattern(r) // chi reuses its routing context once the router returns
	// The rest runs with the request as net/http gave it, in the
	// handler's context: the router's copy of it (and the copies made
	// for contexts after it) would hold the route's path values, a map,
	// for the stream's whole life, and the rest reads none. When nothing
	// was added to the context after the router (no trace, request id or
	// API key), net/http's request itself will do: the router's context
	// only adds its routing state, which it reuses once it returns.
	if r.Context() == sw.routed {
		r = sw.top
	} else {
		r = sw.top.WithContext(r.Context())
	}
	sw.rest = func() {
		if err := run(w, r); err != nil {
			s.writeError(w, r, f, err)
		}
		s.endServerSpan(r.Context(), r, sw, route)
	}
	return true
}

// runsShallow says whether w is the writer of a request running as
// topHandler's rest (runShallow).
func runsShallow(w http.ResponseWriter) bool {
	sw := instrumented(w)
	return sw != nil && sw.rest != nil
}

// instrumented is the statusWriter instrument gave the request whose
// ResponseWriter is w, nil if none.
func instrumented(w http.ResponseWriter) *statusWriter {
	for {
		if sw, ok := w.(*statusWriter); ok {
			return sw
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
}
