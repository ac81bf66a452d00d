package engine

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// statusError is an engine error with the gRPC code it maps to at the
// unary boundary; on streams only its text travels (in-band error_message).
type statusError struct {
	code codes.Code
	msg  string
}

func (e *statusError) Error() string { return e.msg }

func errorf(code codes.Code, format string, args ...any) error {
	return &statusError{code: code, msg: fmt.Sprintf(format, args...)}
}

var (
	errQueueFull    = errorf(codes.Unavailable, "Exceeds maximum queue size")
	errShuttingDown = errorf(codes.Unavailable, "GRPC server is shutting down and has stopped accepting new requests.")
)

func errUnknownModel(name, version string) error {
	if version != "" {
		return errorf(codes.NotFound, "Request for unknown model: '%s' version %s is not found", name, version)
	}
	return errorf(codes.NotFound, "Request for unknown model: '%s' is not found", name)
}

// toStatus maps an engine error to a gRPC status: the one place unary RPCs
// translate errors. Validation errors (plain errors from request decoding)
// are InvalidArgument; model errors default to Unknown, as Triton's
// backends report them.
func toStatus(err error, fallback codes.Code) error {
	var se *statusError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		return status.Error(se.code, se.msg)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	return status.Error(fallback, err.Error())
}
