package engine

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/streamgate/streamgate/engine/backend"
)

// errorf returns an engine error of class code (a *backend.Error).
func errorf(code codes.Code, format string, args ...any) error {
	return backend.Errorf(code, format, args...)
}

// Triton's texts (and classes) for requests turned away.
var (
	errQueueFull        = errorf(codes.Unavailable, "Exceeds maximum queue size")
	errTimeout          = errorf(codes.Unavailable, "Request timeout expired")
	errSchedulerStopped = errorf(codes.Unavailable, "Server is stopping, scheduler for model has stopped accepting new inference requests")
	errShuttingDown     = errorf(codes.Unavailable, "GRPC server is shutting down and has stopped accepting new requests.")
)

func errUnknownModel(name, version string) error {
	if version != "" {
		return errorf(codes.NotFound, "Request for unknown model: '%s' version %s is not found", name, version)
	}
	return errorf(codes.NotFound, "Request for unknown model: '%s' is not found", name)
}

// toStatus maps an engine error to a gRPC status: the one place errors
// become statuses (unary RPCs, and the stream's triton_grpc_error mode).
// An error without a class gets fallback.
func toStatus(err error, fallback codes.Code) error {
	if err == nil {
		return nil
	}
	return status.Error(classOf(err, fallback), err.Error())
}

// classOf returns err's class, or fallback when it has none.
func classOf(err error, fallback codes.Code) codes.Code {
	if c, ok := backend.CodeOf(err); ok {
		return c
	}
	return fallback
}
