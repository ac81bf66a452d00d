// Package ws implements the streamgate.v1 WebSocket protocol: many
// concurrent requests on one socket, each named by a client-chosen id.
//
// Frames are text messages holding one JSON object each, discriminated by
// "type". The client sends "generate", "chat.completions", "completions",
// "responses" and "cancel"; the server answers "data" frames (with a per-id seq from
// 0) and exactly one terminal frame per id: "done" (reason "final" or
// "cancelled") or "error". A frame the session refuses without it being a
// request's end (a duplicate of a running id, a cancel of an id not
// running) gets an "error" frame that names the id inside its "error"
// object only (RefusalFrame), never as its "id": a running request with
// that id goes on. Start with NewSession: the gateway accepts the
// socket and runs one Session per connection, giving it a Handler that
// runs one request.
//
// Client-side streaming (sequence.go): "sequence.start" opens a sequence
// under an id with its first chunk, "sequence.data" frames and binary
// frames (ParseBinary) add chunks, "sequence.end" adds the last; the
// Handler of the sequence.start request reads them in order from
// Request.Sequence, and the id's data frames and terminal frame are those
// of one request.
package ws

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/streamgate/streamgate/gateway/internal/jsonobj"
	"github.com/streamgate/streamgate/gateway/internal/jsonstr"
)

// Subprotocol is the Sec-WebSocket-Protocol value of this protocol.
const Subprotocol = "streamgate.v1"

// Client frame types.
const (
	TypeGenerate    = "generate"
	TypeChat        = "chat.completions"
	TypeCompletions = "completions"
	TypeResponses   = "responses"
	TypeCancel      = "cancel"
	// TypeResume reads a resumable stream again: "stream" (its sid) and
	// "after" (the last event the client has; seq after+1 comes next).
	TypeResume = "resume"

	TypeSequenceStart = "sequence.start"
	TypeSequenceData  = "sequence.data"
	TypeSequenceEnd   = "sequence.end"
)

// Error codes the session itself produces; handlers add their own through
// Options.ErrorInfo.
const (
	CodeBadRequest      = "bad_request"
	CodeDuplicateID     = "duplicate_id"
	CodeUnknownID       = "unknown_id"
	CodeTooManyRequests = "too_many_requests"
	CodeUnavailable     = "unavailable"

	// A sequence frame names no open sequence.
	CodeUnknownSequence = "unknown_sequence"
	// A sequence.start beyond Options.MaxSequences.
	CodeTooManySequences = "too_many_sequences"
	// A chunk larger than Options.MaxChunkBytes: it ends its sequence.
	CodeChunkTooLarge = "chunk_too_large"
	// Chunks beyond Options.ChunkRate, or more waiting than
	// Options.SequenceQueue: the chunk's sequence ends.
	CodeTooManyChunks = "too_many_chunks"
	// No chunk for Options.SequenceIdle (or the model's shorter idle
	// limit): the sequence ends.
	CodeSequenceIdle = "sequence_idle"
)

// MaxIDLength bounds client ids, in bytes.
const MaxIDLength = 256

// Request is one request frame.
type Request struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Model   string          `json:"model,omitempty"`
	Version string          `json:"version,omitempty"`
	Body    json.RawMessage `json:"body,omitempty"`

	// Resumable: the request asked for a resumable stream
	// ("resumable": true; generate, chat.completions, completions).
	Resumable bool `json:"resumable,omitempty"`
	// Stream and After: a resume frame's stream id and the id of the
	// last event the client has (its last data frame's seq + 1).
	Stream string `json:"stream,omitempty"`
	After  uint64 `json:"after,omitempty"`

	// Sequence is the rest of a sequence.start request's input: set by
	// the session for the Handler, nil for other requests.
	Sequence *Sequence `json:"-"`

	seq      uint64 // the seq of the next data frame
	announce string // the stream id the next data frame carries
	// end ends the request (set by the session); later: the Handler
	// called Later, and end waits for the function Later gave.
	end   func(error)
	later bool
	// cancel cancels the context the Handler is given.
	cancel context.CancelCauseFunc
}

// Cancel cancels the context the request's Handler was given, with
// cause, as a cancel frame does with ErrCancelled.
func (r *Request) Cancel(cause error) { r.cancel(cause) }

// Later lets the request go on after its Handler returns: the session
// ends it (its terminal frame, its id free again) when the returned
// function is called, with the error the Handler would have returned,
// instead of when the Handler returns (the Handler then returns nil).
// Until then emit may be called from any goroutine, one call at a time.
// The function must be called exactly once, soon after the request's
// context is done. Only the Handler calls Later, at most once.
func (r *Request) Later() (end func(error)) {
	r.later = true
	return r.end
}

// Announce makes the request's next data frame carry "stream": sid, as
// the first frame of a resumable request does. Only the Handler calls it.
func (r *Request) Announce(sid string) { r.announce = sid }

// SetSeq sets the seq of the request's next data frame (a resumed
// stream's frames continue its numbering). Only the Handler calls it.
func (r *Request) SetSeq(seq uint64) { r.seq = seq }

// FrameError is a client frame the session refuses. ID is "" when the
// frame names no valid id.
type FrameError struct {
	ID      string
	Code    string
	Message string
}

func (e *FrameError) Error() string { return e.Message }

// ParseFrame decodes and checks one client frame.
func ParseFrame(data []byte) (*Request, *FrameError) {
	members, err := jsonobj.Members(data)
	if err == jsonobj.ErrNotObject {
		err = errors.New("a frame must be a JSON object")
	}
	if err != nil {
		return nil, &FrameError{Code: CodeBadRequest, Message: "invalid frame: " + err.Error()}
	}
	var r Request
	fields := map[string]json.RawMessage{}
	for _, m := range members {
		fields[m.Key] = m.Value
	}
	str := func(name string, dst *string) *FrameError {
		raw, ok := fields[name]
		if !ok {
			return nil
		}
		if json.Unmarshal(raw, dst) != nil {
			return &FrameError{Code: CodeBadRequest, Message: fmt.Sprintf("frame field '%s' must be a string", name)}
		}
		return nil
	}
	if fe := str("id", &r.ID); fe != nil {
		return nil, fe
	}
	if r.ID == "" || len(r.ID) > MaxIDLength {
		return nil, &FrameError{Code: CodeBadRequest, Message: "frame needs an 'id': a non-empty string of at most " + strconv.Itoa(MaxIDLength) + " bytes"}
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"type", &r.Type}, {"model", &r.Model}, {"version", &r.Version}} {
		if fe := str(f.name, f.dst); fe != nil {
			fe.ID = r.ID
			return nil, fe
		}
	}
	bad := func(format string, args ...any) (*Request, *FrameError) {
		return nil, &FrameError{ID: r.ID, Code: CodeBadRequest, Message: fmt.Sprintf(format, args...)}
	}
	for k := range fields {
		switch k {
		case "type", "id", "model", "version", "body":
		case "resumable":
			if r.Type != TypeGenerate && r.Type != TypeChat && r.Type != TypeCompletions {
				return bad("frame field 'resumable' is for generate, chat.completions and completions frames")
			}
			if json.Unmarshal(fields[k], &r.Resumable) != nil {
				return bad("frame field 'resumable' must be a boolean")
			}
		case "stream", "after":
			if r.Type != TypeResume {
				return bad("frame field '%s' is for resume frames", k)
			}
		default:
			return bad("unknown frame field '%s'", k)
		}
	}
	switch r.Type {
	case TypeCancel:
		return &r, nil
	case TypeResume:
		if fe := str("stream", &r.Stream); fe != nil || r.Stream == "" {
			return bad("a resume frame needs 'stream': the stream id (Streamgate-Stream-Id)")
		}
		if raw, ok := fields["after"]; ok && json.Unmarshal(raw, &r.After) != nil {
			return bad("frame field 'after' must be a whole number: the id of the last event the client has")
		}
		if r.Model != "" || r.Version != "" {
			return bad("a resume frame takes no model")
		}
		if _, ok := fields["body"]; ok {
			return bad("a resume frame takes no body")
		}
		return &r, nil
	case TypeGenerate, TypeSequenceStart:
		if r.Model == "" {
			return bad("a %s frame needs 'model'", r.Type)
		}
	case TypeSequenceData, TypeSequenceEnd:
		if r.Model != "" || r.Version != "" {
			return bad("a %s frame takes the model of its sequence.start", r.Type)
		}
	case TypeChat, TypeCompletions, TypeResponses:
		if r.Model != "" || r.Version != "" {
			return bad("a %s frame names its model in 'body'", r.Type)
		}
	case "":
		return bad("frame needs a 'type'")
	default:
		return bad("unknown frame type '%s'", r.Type)
	}
	body, ok := fields["body"]
	if !ok || string(body) == "null" {
		switch r.Type {
		case TypeGenerate, TypeSequenceStart, TypeSequenceEnd:
		default:
			return bad("a %s frame needs a 'body' object", r.Type)
		}
		body = json.RawMessage("{}")
	}
	if len(body) == 0 || body[0] != '{' {
		return bad("frame field 'body' must be an object")
	}
	r.Body = body
	return &r, nil
}

// DataFrame is {"type":"data","id":id,"seq":seq,"data":data}; data must be
// one JSON value.
func DataFrame(id string, seq uint64, data []byte) []byte {
	return AppendDataFrame(make([]byte, 0, len(data)+len(id)+48), id, seq, data)
}

// AppendStreamDataFrame appends the first data frame of a resumable
// request, which names its stream:
// {"type":"data","id":id,"seq":seq,"stream":sid,"data":data}.
func AppendStreamDataFrame(b []byte, id string, seq uint64, sid string, data []byte) []byte {
	return appendDataFrame(b, id, seq, sid, data)
}

// AppendDataFrame appends DataFrame(id, seq, data) to b.
func AppendDataFrame(b []byte, id string, seq uint64, data []byte) []byte {
	return appendDataFrame(b, id, seq, "", data)
}

func appendDataFrame(b []byte, id string, seq uint64, sid string, data []byte) []byte {
	b = append(b, `{"type":"data","id":`...)
	b = jsonstr.Append(b, id)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	if sid != "" {
		b = append(b, `,"stream":`...)
		b = jsonstr.Append(b, sid)
	}
	b = append(b, `,"data":`...)
	b = append(b, data...)
	return append(b, '}')
}

// Done reasons.
const (
	ReasonFinal     = "final"
	ReasonCancelled = "cancelled"
)

// DoneFrame is {"type":"done","id":id,"reason":reason}.
func DoneFrame(id, reason string) []byte {
	b := append([]byte(`{"type":"done","id":`), jsonstr.Append(nil, id)...)
	b = append(b, `,"reason":`...)
	b = jsonstr.Append(b, reason)
	return append(b, '}')
}

// ErrorFrame is {"type":"error","id":id,"error":{"code":code,"message":msg}},
// without "id" when id is "": the terminal frame of request id, or the
// refusal of a frame that names no valid id.
func ErrorFrame(id, code, msg string) []byte {
	return errorFrame(id, "", code, msg)
}

// RefusalFrame is {"type":"error","error":{"code":code,"message":msg,"id":about}}:
// the refusal of a frame naming id about that must not read as the end of
// a request with that id (a duplicate of a running id, a cancel of an id
// not running).
func RefusalFrame(about, code, msg string) []byte {
	return errorFrame("", about, code, msg)
}

func errorFrame(id, about, code, msg string) []byte {
	b := []byte(`{"type":"error",`)
	if id != "" {
		b = append(b, `"id":`...)
		b = jsonstr.Append(b, id)
		b = append(b, ',')
	}
	b = append(b, `"error":{"code":`...)
	b = jsonstr.Append(b, code)
	b = append(b, `,"message":`...)
	b = jsonstr.Append(b, msg)
	if about != "" {
		b = append(b, `,"id":`...)
		b = jsonstr.Append(b, about)
	}
	return append(b, "}}"...)
}

// Serve runs req through h alone, as a session runs it but with no
// socket: emit takes its data frames, and Serve returns the error that
// ends it once it has ended (when the function Later gave is called, if
// h called Later). It is for testing Handlers.
func Serve(ctx context.Context, req *Request, h Handler, emit func(data []byte) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan error, 1)
	req.cancel = cancel
	req.end = func(err error) { done <- err }
	if err := h(ctx, req, emit); !req.later {
		return err
	}
	return <-done
}
