package core

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
)

// ReadBody reads the request body: at most Options.MaxBodyBytes (a larger
// body gives an *http.MaxBytesError), within a read deadline of
// Options.BodyTimeout plus the time Options.BodyMinRate allows for the
// bytes read so far, so that a client trickling its body cannot hold a
// connection. A failed read is a *bodyError. The deadline is lifted once
// the body is in: the connection's reads then only watch for the client
// going away.
func (s *Server) ReadBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if enc := r.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		return nil, &HTTPError{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type", Msg: "unsupported Content-Encoding " + strconv.Quote(enc) + ": only identity is accepted"}
	}
	return s.ReadRaw(w, r)
}

// ReadRaw is readBody whatever the body's Content-Encoding: its bytes as
// they came.
func (s *Server) ReadRaw(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body := io.Reader(http.MaxBytesReader(w, r.Body, s.Opts.MaxBodyBytes))
	var lift func() error
	if s.Opts.BodyTimeout > 0 {
		rc := http.NewResponseController(w)
		dr := &deadlineReader{r: body, rc: rc, start: time.Now(), base: s.Opts.BodyTimeout, rate: s.Opts.BodyMinRate}
		if err := dr.extend(); err == nil {
			body = dr
			lift = func() error { return rc.SetReadDeadline(time.Time{}) }
		}
		// else the connection cannot take deadlines (a test recorder)
	}
	b, err := io.ReadAll(body)
	if err == nil && lift != nil {
		lift()
	}
	// A body that failed keeps its deadline: net/http then gives up
	// reading its rest at once and closes the connection, instead of
	// waiting for a trickling client.
	if err != nil {
		// A failed read also cancels the request's context: only a
		// context ended otherwise says that the client went away.
		if r.Context().Err() != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, ErrClientGone
		}
		return nil, &bodyError{err}
	}
	return b, nil
}

// deadlineReader moves the connection's read deadline on as the body
// arrives: base after start, plus one second per rate bytes read.
type deadlineReader struct {
	r     io.Reader
	rc    *http.ResponseController
	start time.Time
	base  time.Duration
	rate  int64 // bytes per second
	n     int64 // bytes read
}

func (d *deadlineReader) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	if n > 0 {
		d.n += int64(n)
		d.extend() // a deadline already passed stays passed
	}
	return n, err
}

func (d *deadlineReader) extend() error {
	return d.rc.SetReadDeadline(d.start.Add(d.base + time.Duration(d.n)*time.Second/time.Duration(d.rate)))
}

// bodyError is a request body that could not be read. classify tells the
// client's faults apart: too slow (408), gone mid-upload (499), malformed
// framing such as bad chunked encoding (400).
type bodyError struct{ err error }

func (e *bodyError) Error() string { return "reading the request body: " + e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

// classify maps the read error to what the client is told.
func (e *bodyError) classify() *HTTPError {
	switch {
	case errors.Is(e.err, os.ErrDeadlineExceeded):
		return &HTTPError{Status: http.StatusRequestTimeout, Code: "request_timeout", Err: e,
			Msg: "the request body arrived too slowly"}
	case errors.Is(e.err, io.ErrUnexpectedEOF), errors.As(e.err, new(*net.OpError)):
		// The body ended early, or the connection failed (reset, closed).
		return &HTTPError{Status: StatusClientClosed, Code: "cancelled", Err: e,
			Msg: "the client went away during the upload"}
	}
	// What is left is the body's framing, such as "malformed chunked
	// encoding": net/http's words for it are precise and safe to show.
	return &HTTPError{Status: http.StatusBadRequest, Code: "bad_request", Err: e,
		Msg: "malformed request body: " + e.err.Error()}
}

// URLParam is the decoded path parameter key. chi matches the escaped
// path when the request has one that differs from the default encoding
// (r.URL.RawPath, e.g. for %2F), and its parameters are then still
// escaped; otherwise it matches the decoded path. Decoding here makes
// "a%2Fb" the model "a/b" as "a%00b" is "a\x00b".
func URLParam(r *http.Request, key string) string {
	v := chi.URLParam(r, key)
	if r.URL.RawPath == "" {
		return v
	}
	if d, err := url.PathUnescape(v); err == nil {
		return d
	}
	return v
}
