package core

import (
	"bytes"
	"net/http"
	"time"

	"github.com/streamgate/streamgate/gateway/metrics"
	"github.com/streamgate/streamgate/gateway/resume"
	"github.com/streamgate/streamgate/gateway/sse"
)

// The sinks a request's relay writes into (LogSink, a background
// response's, is in responses.go). Each is used by one request, from one
// goroutine at a time: its relay's step (on the upstream reader while
// flush need not wait, else on a goroutine of the request's own), then
// its end.

// maxBatch bounds how many bytes of events an event stream buffers before
// it flushes, however many responses are ready.
const maxBatch = 32 << 10

// countEvery is how many events a flush on the upstream reader leaves
// uncounted at most: the counter's Add costs as much as the rest of an
// event's framing, and a paced stream flushes every event. A stream at
// 20 events a second is counted about once a second; a flush that may
// wait, a failure and the end count what is left.
const countEvery = 16

// headerWait is how long an event stream whose keepalives are disabled
// waits for its first response before its headers go out anyway.
const headerWait = 15 * time.Second

// SSESink writes a request as an event stream. As in Triton, the first
// response sets the status: the headers go out with the first batch, or
// when the keepalive interval passes first, and an error that comes before
// them is answered with its own status.
type SSESink struct {
	// What every event touches comes first: the sink's own state, then
	// the writer, part of the sink rather than an object of its own to
	// load, whose hot fields start it: 58 bytes, one cache line (the
	// sink's 192 bytes take a size class whose objects start on a line;
	// TestSSESinkLayout).
	//
	// log, when set, is the resumable stream's log: every event goes to
	// it as well, and a client that leaves is no failure (gone).
	log *resume.Producer
	// unflushed is the events appended since they were last counted:
	// events are counted once per flush that may wait, at most
	// countEvery apart on the reader's flushes, and at the end, not one
	// by one (the counter's Add is dearer than the rest of an event's
	// framing).
	unflushed int64
	started   bool // the headers are out
	// Named gives every event an "event:" line naming it by the "type"
	// its payload starts with (the Responses API's semantic events).
	Named bool
	gone  bool // the live client left (resumable streams only)
	// firstErrorAsEvent answers an error that comes first with its status
	// and a body of one error event (Triton's generate_stream); without it
	// such an error is the caller's to answer.
	firstErrorAsEvent bool
	sw                sse.Writer

	s      *Server
	w      http.ResponseWriter
	r      *http.Request
	errs   ErrorFormat
	events *metrics.CounterValue
	failed *HTTPError // the error whose event ended the log, if any
	_      [16]byte   // to 192 bytes: see above
}

// NewSSESink returns the sink of an event stream answering r on w, whose
// errors are errs's events; firstErrorAsEvent answers an error that comes
// first with its status and one error event (Triton's generate_stream)
// instead of leaving it to the caller.
func (s *Server) NewSSESink(w http.ResponseWriter, r *http.Request, errs ErrorFormat, firstErrorAsEvent bool) *SSESink {
	o := &SSESink{
		s: s, w: w, r: r, errs: errs, firstErrorAsEvent: firstErrorAsEvent,
		events: s.metrics.Events.With("sse"),
	}
	o.sw.Init(w, s.Opts.SSE)
	return o
}

func (o *SSESink) protocol() string { return "sse" }

// writer is the response the stream goes to (noteRequest).
func (o *SSESink) writer() http.ResponseWriter { return o.w }
func (o *SSESink) cut()                        { o.sw.Abort() }

func (o *SSESink) keepAlive() time.Duration {
	if ka := o.sw.KeepAliveInterval(); ka > 0 {
		return ka
	}
	return headerWait
}

// leave notes that the live client of a resumable stream left: the
// stream runs on into its log.
func (o *SSESink) leave() error {
	if o.log == nil {
		return ErrClientGone
	}
	o.gone = true
	o.log.Detach()
	return nil
}

// append buffers one event for the live client.
func (o *SSESink) append(p []byte) {
	if o.Named {
		o.sw.AppendNamed(eventType(p), p)
		return
	}
	o.sw.Append(p)
}

// eventType is the "type" a payload starts with ({"type":"NAME",...}),
// nil if it has none.
func eventType(p []byte) []byte {
	const prefix = `{"type":"`
	if !bytes.HasPrefix(p, []byte(prefix)) {
		return nil
	}
	rest := p[len(prefix):]
	if i := bytes.IndexByte(rest, '"'); i > 0 && bytes.IndexAny(rest[:i], "\\\r\n") < 0 {
		return rest[:i]
	}
	return nil
}

func (o *SSESink) send(p []byte) error {
	if o.log != nil {
		o.log.Append(p)
		if o.gone {
			return nil
		}
	}
	o.append(p)
	o.unflushed++
	if o.sw.Buffered() >= maxBatch {
		_, err := o.flush(false) // the batch's end flushes the rest
		return err
	}
	return nil
}

func (o *SSESink) start() error {
	o.started = true
	if o.log != nil {
		<-o.log.Created() // the stream id goes out once others can find it
	}
	if o.sw.Start() != nil {
		return o.leave()
	}
	return nil
}

// countEvents counts the events appended since the last count, as they
// go to the client.
func (o *SSESink) countEvents() {
	if o.unflushed > 0 {
		o.events.Add(o.unflushed)
		o.unflushed = 0
	}
}

func (o *SSESink) flush(wait bool) (bool, error) {
	if !wait {
		if o.log != nil { // the log may wait
			return false, nil
		}
		var done bool
		var err error
		if o.started {
			done, err = o.sw.FlushNow()
		} else if o.started, done, err = o.sw.StartNow(); !o.started {
			return false, nil // the headers wait for a flush that may wait
		}
		if err != nil {
			return false, o.leave()
		}
		if done && o.unflushed >= countEvery {
			o.countEvents()
		}
		return done, nil
	}
	return true, o.flushWait()
}

// flushLast hands the last events to a detached response, to go out
// with its last chunk (sse.Writer.FlushLast); not for a resumable
// stream, whose log is flushed first.
func (o *SSESink) flushLast() bool {
	if o.log != nil || !o.sw.FlushLast(!o.started) {
		return false
	}
	o.started = true
	return true
}

func (o *SSESink) flushWait() error {
	o.countEvents()
	if o.log != nil {
		defer o.log.Flush() // behind the live client
	}
	if o.gone {
		return nil
	}
	if !o.started {
		if err := o.start(); err != nil || o.gone {
			return err
		}
	}
	// What the socket takes at once goes out without a deadline to set
	// and clear; only the rest waits, under the write timeout.
	if done, err := o.sw.FlushNow(); err == nil && done {
		return nil
	}
	if o.sw.Flush() != nil {
		return o.leave()
	}
	return nil
}

func (o *SSESink) idle() error {
	o.countEvents()
	if o.gone {
		return nil
	}
	if !o.started { // the first response is late: the headers go out now
		return o.flushWait()
	}
	if o.sw.KeepAliveInterval() == 0 {
		return nil
	}
	if o.sw.KeepAlive() != nil {
		return o.leave()
	}
	return nil
}

func (o *SSESink) fail(err error) bool {
	o.countEvents()
	if o.log != nil {
		o.failed = Classify(err)
		o.log.Append(o.errs(o.failed))
		o.log.Flush()
		if o.gone {
			return true
		}
	}
	inBand := o.started || o.sw.Buffered() > 0
	if !inBand && !o.firstErrorAsEvent {
		return false
	}
	sent := 0
	if inBand {
		sent = http.StatusOK
	}
	e := o.s.LogError(o.r.Context(), o.r, err, sent)
	body := o.errs(e)
	if !inBand {
		id := uint64(1) // the first event
		if o.log != nil {
			id = o.log.NextID() - 1 // the error event's id in the log
		}
		sse.SetHeaders(o.w.Header())
		o.s.setRetryAfter(o.w, e)
		o.w.WriteHeader(e.Status)
		_, _ = o.w.Write(sse.AppendEvent(nil, id, body))
		return true
	}
	if !o.started && o.start() != nil {
		return true
	}
	o.append(body)
	if o.sw.Flush() == nil {
		o.events.Inc()
	}
	return true
}

// BodySink answers a request with one body, once its call has ended.
type BodySink struct {
	W    http.ResponseWriter
	body []byte
	// header, if set, sets the body's Content-Type (and any other header
	// its form needs) just before it is written; nil means JSON.
	Header func(http.Header)
}

func (o *BodySink) protocol() string            { return "http" }
func (o *BodySink) writer() http.ResponseWriter { return o.W }
func (o *BodySink) cut()                        { _ = http.NewResponseController(o.W).SetWriteDeadline(time.Now()) }
func (o *BodySink) keepAlive() time.Duration    { return 0 }
func (o *BodySink) idle() error                 { return nil }
func (o *BodySink) fail(error) bool             { return false }
func (o *BodySink) countEvents()                {}
func (o *BodySink) flushLast() bool             { return false }

func (o *BodySink) send(p []byte) error {
	o.body = append(o.body[:0], p...)
	return nil
}

func (o *BodySink) flush(wait bool) (bool, error) {
	if !wait {
		return o.body == nil, nil
	}
	if o.body != nil {
		if o.Header != nil {
			o.Header(o.W.Header())
			writeBody(o.W, http.StatusOK, o.body)
		} else {
			WriteJSON(o.W, http.StatusOK, o.body)
		}
		o.body = nil
	}
	return true, nil
}

// WSSink sends a request's payloads as data frames of its WebSocket
// session (emit); the session writes the terminal frame.
type WSSink struct {
	Emit   func(data []byte) error
	Events *metrics.CounterValue
	// unflushed is the payloads emitted since they were last counted:
	// counted as SSESink counts its events (at most countEvery apart on
	// the reader), at fail and when the request finishes.
	unflushed int64

	// log, when set, is the resumable request's log: every payload goes
	// to it as well, and a socket that closes is no failure (gone).
	log    *resume.Producer
	gone   bool
	failed *HTTPError // the error that ended the request, if any
	// announce, if set, is called before the first data frame (to name
	// the stream in it).
	announce func()
}

func (o *WSSink) protocol() string            { return "ws" }
func (o *WSSink) writer() http.ResponseWriter { return nil }
func (o *WSSink) cut()                        {} // the socket is cut, with all its requests
func (o *WSSink) keepAlive() time.Duration    { return 0 }
func (o *WSSink) idle() error                 { return nil }
func (o *WSSink) flushLast() bool             { return false }

// countEvents counts the payloads emitted since the last count.
func (o *WSSink) countEvents() {
	if o.unflushed > 0 {
		o.Events.Add(o.unflushed)
		o.unflushed = 0
	}
}

func (o *WSSink) flush(wait bool) (bool, error) {
	if o.log != nil {
		if !wait {
			return false, nil
		}
		o.log.Flush()
	}
	if wait || o.unflushed >= countEvery {
		o.countEvents()
	}
	return true, nil
}

func (o *WSSink) fail(err error) bool {
	o.countEvents()
	if o.log != nil {
		o.failed = Classify(err)
		return o.gone // nobody to tell
	}
	return false
}

func (o *WSSink) send(p []byte) error {
	if o.log != nil {
		o.log.Append(p)
		if o.gone {
			return nil
		}
	}
	if o.announce != nil {
		o.announce()
		o.announce = nil
	}
	if o.Emit(p) != nil { // the request or its socket has ended
		if o.log != nil {
			o.gone = true
			o.log.Detach()
			return nil
		}
		return ErrClientGone
	}
	o.unflushed++
	return nil
}

// LogSink sends a background response's events to its stream's log
// only: the response was answered at once, queued, and runs with no
// client. StartLog gives it its log.
type LogSink struct{ p *resume.Producer }

func (o *LogSink) protocol() string            { return "http" }
func (o *LogSink) keepAlive() time.Duration    { return 0 }
func (o *LogSink) idle() error                 { return nil }
func (o *LogSink) fail(error) bool             { return false }
func (o *LogSink) cut()                        {}
func (o *LogSink) countEvents()                {}
func (o *LogSink) flushLast() bool             { return false }
func (o *LogSink) writer() http.ResponseWriter { return nil }

func (o *LogSink) send(p []byte) error {
	o.p.Append(p)
	return nil
}

func (o *LogSink) flush(wait bool) (bool, error) {
	if !wait { // the log's flush may wait
		return false, nil
	}
	o.p.Flush()
	return true, nil
}

// LoggedSink is a sink whose payloads can go to a resumable stream's log
// as well (StartLog, EndLog): SSESink, WSSink, LogSink.
type LoggedSink interface {
	Sink
	// logTo sends every later payload to p's log as well.
	logTo(p *resume.Producer)
	// logFailed is the error whose event ended the log, if any.
	logFailed() *HTTPError
}

func (o *SSESink) logTo(p *resume.Producer) {
	o.log = p
	o.sw.SetNextID(p.NextID())
}
func (o *SSESink) logFailed() *HTTPError    { return o.failed }
func (o *WSSink) logTo(p *resume.Producer)  { o.log = p }
func (o *WSSink) logFailed() *HTTPError     { return o.failed }
func (o *LogSink) logTo(p *resume.Producer) { o.p = p }
func (o *LogSink) logFailed() *HTTPError    { return nil }

// ClientLeft says that the live client of a resumable stream left (which
// is no failure: the stream runs on for its readers).
func (o *SSESink) ClientLeft() bool { return o.gone }
