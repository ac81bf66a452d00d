package upstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/streamgate/streamgate/proto/errclass"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// Kind says how a call ended when it did not end with io.EOF.
type Kind int

const (
	// KindUnknown is the zero Kind; no error from this package has it.
	KindUnknown Kind = iota
	// KindModel: the target answered the request with an error_message.
	KindModel
	// KindUnavailable: the target or the stream carrying the request went
	// away and the request could not be retried, or the Client is closed
	// (the calls Close ended, and Start after Close).
	KindUnavailable
	// KindCancelled: Call.Cancel was called or Start's context was
	// cancelled.
	KindCancelled
	// KindTooSlow: the request's consumer took no response for
	// Options.StallTimeout while responses waited for it; the request was
	// cancelled upstream.
	KindTooSlow
	// KindDeadline: Start's context passed its deadline.
	KindDeadline
	// KindRejected: the request was not placed: it is malformed, or no
	// stream of the chosen target has room left.
	KindRejected
	// KindSequenceLost: the request belongs to a sequence whose target or
	// stream went away after it started: the sequence's state is gone, and
	// every request of it fails so until a new START.
	KindSequenceLost
	// KindIdleTimeout: the target sent nothing for the request for its
	// idle timeout (Options.IdleTimeout); the request was cancelled
	// upstream.
	KindIdleTimeout
	// KindBudget: the request's queue had to grow beyond its own
	// Options.QueueBytes while the shared Options.Memory was spent; the
	// request was cancelled upstream.
	KindBudget
)

var kindNames = [...]string{
	KindUnknown:      "unknown",
	KindModel:        "model_error",
	KindUnavailable:  "upstream_unavailable",
	KindCancelled:    "cancelled",
	KindTooSlow:      "too_slow",
	KindDeadline:     "deadline_exceeded",
	KindRejected:     "rejected",
	KindSequenceLost: "sequence_lost",
	KindIdleTimeout:  "upstream_timeout",
	KindBudget:       "memory_budget",
}

// String returns the snake_case name of k, e.g. "upstream_unavailable".
func (k Kind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return "unknown"
	}
	return kindNames[k]
}

// Error is how a call ends other than with io.EOF, and how Start refuses a
// request. Message is safe to log; it may hold upstream text.
type Error struct {
	Kind Kind
	// Message says what happened; for KindModel it is the target's
	// error_message verbatim.
	Message string
	// Code is the error's class as a gRPC code. For KindModel it is the
	// class the target sent with the error (streamgate's engine adds
	// errclass.Param to every in-band error); a target that sends none (a
	// real Triton) is read by its documented texts: NotFound for an
	// unknown model, Unavailable for a full queue or a shutdown, otherwise
	// Unknown. For KindUnavailable it is the stream's status; for the
	// other kinds the obvious one.
	Code codes.Code
}

// Error returns "upstream: <kind>: <message>".
func (e *Error) Error() string {
	return "upstream: " + e.Kind.String() + ": " + e.Message
}

// Is reports whether target is an *Error of the same Kind, so that
// errors.Is(err, &upstream.Error{Kind: upstream.KindTooSlow}) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind
}

// AsError returns the *Error in err's chain, if there is one.
func AsError(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}

func newError(k Kind, code codes.Code, msg string) *Error {
	return &Error{Kind: k, Message: msg, Code: code}
}

// inbandError is the error for an in-band error_message with the
// response parameters that came with it: of the class the target sent, or
// of the class Triton's text implies when it sent none (classed false).
func inbandError(msg string, params map[string]*pb.InferParameter) (e *Error, classed bool) {
	code, classed := errclass.FromParams(params)
	if !classed {
		code = tritonTextCode(msg)
	}
	return newError(KindModel, code, msg), classed
}

// tritonTextCode reads the class of an in-band error from a target that
// sends none (a real Triton) by the texts Triton documents: an unknown
// model (core), a full queue and a shutting down server (both UNAVAILABLE
// in Triton's own status).
func tritonTextCode(msg string) codes.Code {
	switch {
	case strings.Contains(msg, "unknown model"), strings.Contains(msg, "is not found"):
		return codes.NotFound
	case strings.Contains(msg, "Exceeds maximum queue size"), isShuttingDown(msg):
		return codes.Unavailable
	}
	return codes.Unknown
}

// isShuttingDown recognises the in-band refusal of a draining Triton
// ("GRPC server is shutting down and has stopped accepting new
// requests."). Only a target that sends no error class is read this way.
func isShuttingDown(msg string) bool {
	return strings.Contains(msg, "server is shutting down")
}

// unavailable turns a stream or RPC failure into KindUnavailable, keeping
// the gRPC code when there is one.
func unavailable(what string, err error) *Error {
	code := codes.Unavailable
	msg := what
	if err != nil {
		if s, ok := status.FromError(err); ok && s.Code() != codes.OK {
			code = s.Code()
			if code == codes.Canceled || code == codes.DeadlineExceeded {
				code = codes.Unavailable // our own stream teardown, not the caller's
			}
			msg += ": " + s.Message()
		} else {
			msg += ": " + err.Error()
		}
	}
	return newError(KindUnavailable, code, msg)
}

// ctxError is the error for a call whose context ended.
func ctxError(ctx context.Context) *Error {
	if errors.Is(context.Cause(ctx), context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return newError(KindDeadline, codes.DeadlineExceeded, "deadline exceeded")
	}
	return newError(KindCancelled, codes.Canceled, "context cancelled")
}

var (
	errCancelled = newError(KindCancelled, codes.Canceled, "cancelled by caller")
	// errNoHealthy refuses Start while every target is down.
	errNoHealthy = newError(KindUnavailable, codes.Unavailable, "no upstream target answers its health checks")
	errMalformed = newError(KindUnavailable, codes.Internal, "malformed response from upstream")
	// errClosed ends the calls Close finds and refuses Start after it.
	errClosed = newError(KindUnavailable, codes.Unavailable, "client closed")
)

// stallError is KindTooSlow for a stall timeout of d.
func stallError(d time.Duration) *Error {
	return newError(KindTooSlow, codes.ResourceExhausted,
		"the client took no response for "+d.String()+" while responses waited for it")
}

// overBudget is KindBudget for cl, whose queue could not grow.
func (c *Client) overBudget(cl *Call) *Error {
	n, size := cl.q.queued()
	return newError(KindBudget, codes.ResourceExhausted, fmt.Sprintf(
		"the gateway's memory for waiting responses (%s) is spent; this request's client was %d responses (%s) behind",
		byteSize(c.lim.bud.Limit()), n, byteSize(int64(size))))
}

// byteSize formats n bytes in KiB, MiB or GiB.
func byteSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// GRPCStatus makes status.FromError and status.Code work on an *Error.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Error()) }
