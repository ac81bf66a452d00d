package backend

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
)

// Error is an error with its class, as a gRPC code: what Triton's
// TRITONSERVER_Error codes become on the wire (INVALID_ARG is
// InvalidArgument, UNAVAILABLE Unavailable, UNSUPPORTED Unimplemented, ...).
// The engine sends the class with every in-band error and uses it as the
// status wherever an error ends an RPC.
type Error struct {
	Code codes.Code
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error of class code.
func Errorf(code codes.Code, format string, args ...any) error {
	return &Error{Code: code, Err: fmt.Errorf(format, args...)}
}

// WithCode classifies err as code unless it already has a class; nil
// stays nil.
func WithCode(code codes.Code, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := CodeOf(err); ok {
		return err
	}
	return &Error{Code: code, Err: err}
}

// CodeOf returns err's class: an *Error's code, Canceled or
// DeadlineExceeded for context errors, and false when err has none.
func CodeOf(err error) (codes.Code, bool) {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e.Code, true
	case errors.Is(err, context.Canceled), errors.Is(err, ErrCancelled):
		return codes.Canceled, true
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded, true
	}
	return codes.Unknown, false
}
