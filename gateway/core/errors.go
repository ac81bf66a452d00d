package core

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"time"

	"github.com/streamgate/streamgate/gateway/generate"
	"github.com/streamgate/streamgate/gateway/internal/jsonobj"
	"github.com/streamgate/streamgate/gateway/openai"
	"github.com/streamgate/streamgate/gateway/textmodel"
	"github.com/streamgate/streamgate/gateway/tritonhttp"
	"github.com/streamgate/streamgate/upstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// StatusClientClosed is the status logged for requests whose client went
// away (nginx's 499); it is never written.
const StatusClientClosed = 499

// HTTPError is an error with what the client is told: a status, a
// machine-readable code, a message safe to show, and for OpenAI routes the
// parameter at fault. Err is the internal cause, logged and never sent.
type HTTPError struct {
	Status     int
	Code       string
	Msg        string
	Param      string
	RetryAfter bool
	// RetryIn, if set, is the Retry-After to send instead of the
	// configured one (a key's rate limit knows when it frees up).
	RetryIn time.Duration
	Err     error
}

// Error says the status, code and message (and the cause, if any).
func (e *HTTPError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%d %s: %s: %v", e.Status, e.Code, e.Msg, e.Err)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Msg)
}

// Unwrap is the cause, if any.
func (e *HTTPError) Unwrap() error { return e.Err }

var (
	ErrDraining   = &HTTPError{Status: http.StatusServiceUnavailable, Code: "unavailable", Msg: "server is shutting down", RetryAfter: true}
	ErrClientGone = errors.New("client went away")
	ErrNotOne     = &HTTPError{Status: http.StatusBadRequest, Code: "bad_request", Msg: "generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses"}
)

// codeForStatus is the code of errors that carry none of their own.
func codeForStatus(st int) string {
	switch st {
	case http.StatusBadRequest:
		return "bad_request"
	case http.StatusUnauthorized:
		return "invalid_api_key"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusMethodNotAllowed:
		return "method_not_allowed"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusUnsupportedMediaType:
		return "unsupported_media_type"
	case http.StatusTooManyRequests:
		return "too_many_requests"
	case StatusClientClosed:
		return "cancelled"
	case http.StatusNotImplemented:
		return "unimplemented"
	case http.StatusServiceUnavailable:
		return "unavailable"
	case http.StatusGatewayTimeout:
		return "deadline_exceeded"
	case http.StatusRequestTimeout:
		return "request_timeout"
	}
	return "internal"
}

// grpcStatus maps a gRPC code to the HTTP status of its error's answer.
func grpcStatus(c codes.Code) int {
	switch c {
	case codes.InvalidArgument, codes.Unknown, codes.AlreadyExists, codes.OutOfRange, codes.FailedPrecondition:
		return http.StatusBadRequest
	case codes.NotFound:
		return http.StatusNotFound
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.Canceled:
		return StatusClientClosed
	}
	return http.StatusInternalServerError
}

// Classify is the one place an error becomes what the client sees.
func Classify(err error) *HTTPError {
	var (
		he  *HTTPError
		ge  *generate.Error
		te  *tritonhttp.Error
		se  *jsonobj.SyntaxError
		oe  *openai.RequestError
		mbe *http.MaxBytesError
		be  *bodyError
		ue  *textmodel.UnsupportedError
	)
	if errors.As(err, &he) { // an answer already made
		return he
	}
	if e := classifyResume(err); e != nil {
		return e
	}
	switch {
	case errors.As(err, &oe):
		return &HTTPError{Status: http.StatusBadRequest, Code: oe.Code, Msg: oe.Message, Param: oe.Param}
	case errors.As(err, &se):
		return &HTTPError{Status: http.StatusBadRequest, Code: "invalid_json", Msg: se.Error()}
	case errors.As(err, &ge):
		return &HTTPError{Status: http.StatusBadRequest, Code: "bad_request", Msg: ge.Msg}
	case errors.As(err, &te): // Triton's text, with the status Triton gives its class
		st := grpcStatus(te.Code)
		return &HTTPError{Status: st, Code: codeForStatus(st), Msg: te.Msg}
	case errors.As(err, &mbe):
		return &HTTPError{Status: http.StatusRequestEntityTooLarge, Code: "request_too_large",
			Msg: "request body too large: the limit is " + strconv.FormatInt(mbe.Limit, 10) + " bytes"}
	case errors.As(err, &be):
		return be.classify()
	case errors.As(err, &ue):
		return &HTTPError{Status: http.StatusBadRequest, Code: "unsupported_parameter", Msg: ue.Error(), Param: ue.Param}
	case errors.Is(err, textmodel.ErrNotText):
		return &HTTPError{Status: http.StatusBadRequest, Code: "model_not_supported", Msg: err.Error(), Param: "model"}
	case errors.Is(err, ErrClientGone), errors.Is(err, context.Canceled):
		return &HTTPError{Status: StatusClientClosed, Code: "cancelled", Msg: "request cancelled", Err: err}
	case errors.Is(err, context.DeadlineExceeded):
		return &HTTPError{Status: http.StatusGatewayTimeout, Code: "deadline_exceeded", Msg: "deadline exceeded", Err: err}
	}
	if ue, ok := upstream.AsError(err); ok {
		return classifyUpstream(ue)
	}
	if s, ok := status.FromError(err); ok && s.Code() != codes.OK {
		st := grpcStatus(s.Code())
		e := &HTTPError{Status: st, Code: codeForStatus(st), Msg: s.Message(), Err: err}
		if st >= 500 {
			e.Msg = http.StatusText(st)
			e.RetryAfter = st == http.StatusServiceUnavailable
		}
		return e
	}
	return &HTTPError{Status: http.StatusInternalServerError, Code: "internal", Msg: "internal error", Err: err}
}

func classifyUpstream(ue *upstream.Error) *HTTPError {
	e := &HTTPError{Code: ue.Kind.String(), Err: ue}
	switch ue.Kind {
	case upstream.KindModel:
		// The model's own text is what the client needs (Triton sends it
		// too); its class sets the status. An overloaded or stopping
		// target is the one model error worth retrying: 429 or 503 with
		// Retry-After and the status's own code.
		e.Msg = ue.Message
		e.Status = grpcStatus(ue.Code)
		switch e.Status {
		case http.StatusTooManyRequests, http.StatusServiceUnavailable:
			e.Code, e.RetryAfter = codeForStatus(e.Status), true
		case StatusClientClosed: // the target cancelled it, not the client
			e.Status, e.Code, e.RetryAfter = http.StatusServiceUnavailable, codeForStatus(http.StatusServiceUnavailable), true
		}
	case upstream.KindUnavailable:
		e.Status, e.Msg, e.RetryAfter = http.StatusServiceUnavailable, "upstream unavailable", true
	case upstream.KindRejected:
		e.Status, e.Msg, e.RetryAfter = http.StatusServiceUnavailable, "upstream at capacity", true
	case upstream.KindTooSlow: // the client's fault: it did not read
		e.Status, e.Msg = StatusClientClosed, "the client read nothing while responses waited for it, for longer than the stall timeout"
	case upstream.KindBudget:
		e.Status, e.Msg, e.RetryAfter = http.StatusServiceUnavailable, "the server's memory for responses waiting for slow clients is spent", true
	case upstream.KindDeadline:
		e.Status, e.Msg = http.StatusGatewayTimeout, "deadline exceeded"
	case upstream.KindIdleTimeout:
		e.Status, e.Msg = http.StatusGatewayTimeout, "upstream timeout: "+ue.Message
	case upstream.KindCancelled:
		e.Status, e.Msg = StatusClientClosed, "request cancelled"
	case upstream.KindSequenceLost:
		// Retrying will not help: the sequence must start again.
		e.Status, e.Msg = http.StatusConflict, ue.Message
	default:
		e.Status, e.Code, e.Msg = http.StatusInternalServerError, "internal", "internal error"
	}
	return e
}

// openAIType is the OpenAI error "type" for a status.
func openAIType(st int) string {
	switch {
	case st == http.StatusTooManyRequests:
		return "rate_limit_error"
	case st >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

func (s *Server) setRetryAfter(w http.ResponseWriter, e *HTTPError) {
	if e.RetryIn > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(e.RetryIn)))
		return
	}
	if e.RetryAfter || e.Status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", strconv.Itoa(int((s.Opts.RetryAfter+999_999_999)/1_000_000_000)))
	}
}

// WriteJSON answers status with body, a JSON document.
func WriteJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	writeBody(w, status, body)
}

// writeBody writes a whole body whose Content-Type is already set.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

// ErrorFormat renders a classified error as one protocol's JSON error
// object. The gateway answers errors in three formats: Triton's
// (tritonErrors, on /v2 and the WebSocket upgrade), OpenAI's
// (openAIErrors, on /v1) and the WebSocket error frame (wsErrorInfo).
type ErrorFormat func(e *HTTPError) []byte

// TritonErrors is Triton's {"error":"..."}.
func TritonErrors(e *HTTPError) []byte { return generate.ErrorBody(e.Msg) }

// OpenAIErrors is OpenAI's {"error":{"message","type","param","code"}}.
func OpenAIErrors(e *HTTPError) []byte {
	return openai.ErrorBody(e.Msg, openAIType(e.Status), e.Param, e.Code)
}

// HandlerFunc serves one request: it answers it, or returns the error to
// answer.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// Handle adapts h to net/http: an error h returns is answered in format
// f, with its status (and Retry-After), unless the client has gone. With
// API keys (Options.Keys) the request must have one (door) before h runs.
func (s *Server) Handle(f ErrorFormat, h HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.Opts.Keys != nil {
			kr, err := s.door(w, r)
			if err != nil {
				s.writeError(w, r, f, err)
				return
			}
			r = kr
		}
		if err := h(w, r); err != nil { // as handleOpen, one frame less
			s.writeError(w, r, f, err)
		}
	}
}

// HandleOpen is handle without API keys: for /v1/ws, which answers a
// missing or bad key with an error frame (websocket).
func (s *Server) HandleOpen(f ErrorFormat, h HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeError(w, r, f, err)
		}
	}
}

// writeError answers err in format f.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, f ErrorFormat, err error) {
	e := s.LogError(r.Context(), r, err, 0)
	if e.Status == StatusClientClosed {
		return
	}
	if e.Status == http.StatusRequestTimeout {
		w.Header().Set("Connection", "close") // what is left of the body is not read
	}
	s.setRetryAfter(w, e)
	WriteJSON(w, e.Status, f(e))
}

// WSErrorInfo is the WebSocket error frame's code and message for err
// (wsRequest has logged it).
func WSErrorInfo(err error) (code, msg string) {
	e := Classify(err)
	return e.Code, e.Msg
}

// LogError classifies err and logs what the client will not see, with
// ctx (the request's: its trace) and r (the HTTP request, or the
// WebSocket upgrade). sent is the HTTP status the client has, when not
// the error's own (0): 200 for an error delivered in band in a stream
// that had started, 101 for a WebSocket request's error frame. The log
// shows that status, and the error's own as error_status.
func (s *Server) LogError(ctx context.Context, r *http.Request, err error, sent int) *HTTPError {
	e := Classify(err)
	if e.Status >= 500 && e.Err != nil {
		if sent == 0 {
			sent = e.Status
		}
		s.Log.WarnContext(ctx, "request failed", "method", r.Method, "path", r.URL.Path, "status", sent,
			"error_status", e.Status, "code", e.Code, "err", e.Err)
	}
	return e
}

// stack is the calling goroutine's stack, for the log line of a panic
// recovered where net/http would not (a goroutine of the gateway's own).
func stack() string {
	buf := make([]byte, 64<<10)
	return string(buf[:runtime.Stack(buf, false)])
}
