package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// sseReader reads the data of Server-Sent Events from a stream. It follows
// the event-stream format: "data:" lines (one optional space after the
// colon) are joined with "\n", other fields (id, event, retry) and
// comments (": keepalive") are skipped, a blank line ends an event; lines
// end in "\n" or "\r\n".
type sseReader struct {
	r      *bufio.Reader
	data   []byte
	has    bool
	line   []byte
	lastID string // the last "id:" field read
}

// newSSEReader reads r through a 4 KB buffer: dozens of events per read,
// and little memory for each of 100,000 held streams (longer lines are
// put together in line).
func newSSEReader(r io.Reader) *sseReader { return &sseReader{r: bufio.NewReaderSize(r, 4<<10)} }

// next returns the data of the next event. The slice is valid until the
// next call. At the end of the stream it returns io.EOF; an event cut off
// by the end is dropped, as the format says.
func (e *sseReader) next() ([]byte, error) {
	e.data, e.has = e.data[:0], false
	for {
		line, err := e.readLine()
		if err != nil {
			return nil, err
		}
		if len(line) == 0 {
			if e.has {
				return bytes.TrimSuffix(e.data, []byte{'\n'}), nil
			}
			continue
		}
		if line[0] == ':' {
			continue // comment
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		if string(field) == "id" {
			e.lastID = string(value)
		}
		if string(field) == "data" {
			e.data = append(e.data, value...)
			e.data = append(e.data, '\n')
			e.has = true
		}
	}
}

// readLine returns one line without its terminator.
func (e *sseReader) readLine() ([]byte, error) {
	b, err := e.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		e.line = append(e.line[:0], b...)
		for errors.Is(err, bufio.ErrBufferFull) {
			b, err = e.r.ReadSlice('\n')
			e.line = append(e.line, b...)
		}
		b = e.line
	}
	if err != nil {
		if err == io.EOF && len(b) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	b = b[:len(b)-1]
	return bytes.TrimSuffix(b, []byte{'\r'}), nil
}

// eventKind classifies one event's data.
type eventKind int

const (
	evOther    eventKind = iota // no content (role chunk, finish chunk, empty piece)
	evResponse                  // a response carrying content
	evError                     // an error event: the request failed
	evDone                      // OpenAI's [DONE]
)

// nonEmptyString reports whether data holds key (e.g. `"OUT"`) followed by
// ':' and a value other than the empty string. Keys in JSON text can only
// be matched outside strings, since quotes inside strings are escaped.
func nonEmptyValue(data []byte, key string) bool {
	i := bytes.Index(data, []byte(key))
	if i < 0 {
		return false
	}
	rest := bytes.TrimLeft(data[i+len(key):], " \t")
	if len(rest) == 0 || rest[0] != ':' {
		return false
	}
	rest = bytes.TrimLeft(rest[1:], " \t")
	return len(rest) > 0 && !bytes.HasPrefix(rest, []byte(`""`)) && !bytes.HasPrefix(rest, []byte("null"))
}

// errorMessage decodes the "error" member of an event, if it has one:
// Triton's {"error":"text"} or OpenAI's {"error":{"message":..,"code":..}}.
func errorMessage(data []byte) (string, bool) {
	if !bytes.Contains(data, []byte(`"error"`)) {
		return "", false // fast path: no such key anywhere
	}
	var v struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &v) != nil || len(v.Error) == 0 || string(v.Error) == "null" {
		return "", false
	}
	var s string
	if json.Unmarshal(v.Error, &s) == nil {
		return s, true
	}
	var o struct {
		Message string `json:"message"`
		Code    any    `json:"code"`
	}
	if json.Unmarshal(v.Error, &o) == nil && o.Message != "" {
		if o.Code != nil {
			return fmt.Sprintf("%v: %s", o.Code, o.Message), true
		}
		return o.Message, true
	}
	return string(v.Error), true
}

// classifyGenerate classifies a generate_stream event (or a WebSocket data
// frame's data): text models count non-empty text_output, repeat counts
// events with OUT.
func classifyGenerate(data []byte, text bool) (eventKind, string) {
	if msg, ok := errorMessage(data); ok {
		return evError, msg
	}
	key := `"OUT"`
	if text {
		key = `"text_output"`
	}
	if nonEmptyValue(data, key) {
		return evResponse, ""
	}
	return evOther, ""
}

// classifyChat classifies an OpenAI streaming chunk: a non-empty
// delta.content (or completions' text) is a response.
func classifyChat(data []byte) (eventKind, string) {
	if string(bytes.TrimSpace(data)) == "[DONE]" {
		return evDone, ""
	}
	if msg, ok := errorMessage(data); ok {
		return evError, msg
	}
	if nonEmptyValue(data, `"content"`) || nonEmptyValue(data, `"text"`) {
		return evResponse, ""
	}
	return evOther, ""
}

// newHTTPClient returns a client for many concurrent streams to one host:
// it keeps up to conns idle connections (so closed-loop requests reuse
// them) and never asks for compression.
func newHTTPClient(conns int, apiKey string) *http.Client {
	return clientWithKey(&http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns + 16,
		MaxIdleConnsPerHost: conns + 16,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}, apiKey)
}

// clientWithKey is a client of rt that sends apiKey, when there is one,
// with every request.
func clientWithKey(rt http.RoundTripper, apiKey string) *http.Client {
	if apiKey != "" {
		rt = keyed{key: apiKey, next: rt}
	}
	return &http.Client{Transport: rt}
}

// keyed sends an API key with every request.
type keyed struct {
	key  string
	next http.RoundTripper
}

func (k keyed) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+k.key)
	return k.next.RoundTrip(r)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// transport.
func (k keyed) CloseIdleConnections() {
	if c, ok := k.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// httpStream is a streaming HTTP transport: the gateway's generate_stream
// (SSE) or OpenAI streaming chat. Every request is one POST on its own
// HTTP/1.1 connection (reused by later requests), or with overHTTP2 one
// stream of a shared HTTP/2 connection; leaving drops the connection (the
// stream: RST_STREAM).
type httpStream struct {
	client   *http.Client
	h2       *h2Pool // set by overHTTP2
	url      string
	body     func(serial int32) []byte
	classify func([]byte) (eventKind, string)
	needDone bool // the stream must end with [DONE]

	// resumable, when set, asks for resumable streams
	// (Streamgate-Resumable: true), and says what the client does when
	// it leaves (--cancel-after): "resumable" leaves as any client does,
	// "resume" reads the rest with GET base/v1/streams/{sid}, "delete"
	// cancels the stream with DELETE and reads the live stream to its
	// end.
	resumable string
	base      string
}

func newSSETransport(base string, wl workload, conns int) *httpStream {
	return &httpStream{
		client:   newHTTPClient(conns, wl.APIKey),
		url:      base + "/v2/models/" + wl.Model + "/generate_stream",
		body:     wl.generateBody,
		classify: func(b []byte) (eventKind, string) { return classifyGenerate(b, wl.textModel()) },
	}
}

func newChatTransport(base string, wl workload, conns int) *httpStream {
	body := wl.chatBody()
	return &httpStream{
		client:   newHTTPClient(conns, wl.APIKey),
		url:      base + "/v1/chat/completions",
		body:     func(int32) []byte { return body },
		classify: classifyChat,
		needDone: true,
	}
}

// overHTTP2 makes h send its requests over HTTP/2 without TLS (h2c) to
// addr (host:port), perConn on each connection.
func (h *httpStream) overHTTP2(addr string, perConn int, apiKey string) *httpStream {
	h.h2 = newH2Pool(addr, perConn)
	h.client = clientWithKey(h.h2, apiKey)
	return h
}

func (h *httpStream) close() { h.client.CloseIdleConnections() }

func (h *httpStream) do(ctx context.Context, serial int32, s *stream) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(h.body(serial)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if h.resumable != "" {
		req.Header.Set("Streamgate-Resumable", "true")
	}
	s.begin()
	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errKind("connect", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		return errKindf(fmt.Sprintf("http_%d", resp.StatusCode), "%s", strings.TrimSpace(string(b)))
	}
	sid := resp.Header.Get("Streamgate-Stream-Id")
	if h.resumable != "" && sid == "" {
		return errKindf("protocol", "no Streamgate-Stream-Id on a resumable stream")
	}
	rd := newSSEReader(resp.Body)
	done := false
	for {
		data, err := rd.next()
		if err == io.EOF {
			if h.needDone && !done {
				return errKindf("protocol", "stream ended without [DONE]")
			}
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return errKind("read", err)
		}
		switch kind, msg := h.classify(data); kind {
		case evResponse:
			if s.response() {
				switch h.resumable {
				case "resume":
					cancel() // leave: drops the connection
					return h.resume(ctx, s, sid, rd.lastID)
				case "delete":
					return h.delete(ctx, s, sid, rd)
				}
				cancel() // leave: drops the connection
				return errClientCancel
			}
		case evError:
			return errKindf("error_event", "%s", msg)
		case evDone:
			done = true // read on to the end, so the connection is reused
		}
	}
}

// resume reads stream sid again with GET /v1/streams/{sid}, after half
// the events the client saw (last: the id of the last one), so that its
// first event comes from the stored log at once; it records the time to
// that first event, and reads the stream to its end.
func (h *httpStream) resume(ctx context.Context, s *stream, sid, last string) error {
	s.left = time.Time{} // the request runs on: no engine stop to wait for
	n, err := strconv.ParseUint(last, 10, 64)
	if err != nil {
		return errKindf("protocol", "event id %q", last)
	}
	after := strconv.FormatUint(n/2, 10)
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodGet, h.base+"/v1/streams/"+sid, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Last-Event-ID", after)
	start := time.Now()
	resp, err := h.client.Do(req)
	if err != nil {
		return errKind("resume", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		return errKindf(fmt.Sprintf("resume_http_%d", resp.StatusCode), "%s", strings.TrimSpace(string(b)))
	}
	rd := newSSEReader(resp.Body)
	for first := true; ; first = false {
		data, err := rd.next()
		if err == io.EOF {
			if first {
				return errKindf("resume", "the resumed stream had no event")
			}
			return nil
		}
		if err != nil {
			return errKind("resume_read", err)
		}
		if first {
			s.resumed(time.Since(start))
		}
		if kind, msg := h.classify(data); kind == evError {
			return errKindf("error_event", "%s", msg)
		}
	}
}

// delete cancels stream sid with DELETE /v1/streams/{sid} (its client
// has left at s.left, just before) and reads the live stream rd to its
// end.
func (h *httpStream) delete(ctx context.Context, s *stream, sid string, rd *sseReader) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, h.base+"/v1/streams/"+sid, nil)
	if err != nil {
		return err
	}
	s.left = time.Now()
	resp, err := h.client.Do(req)
	if err != nil {
		return errKind("delete", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return errKindf(fmt.Sprintf("delete_http_%d", resp.StatusCode), "DELETE answered %d", resp.StatusCode)
	}
	for {
		if _, err := rd.next(); err != nil {
			return errClientCancel
		}
	}
}
