package tritonhttp

import (
	"fmt"

	"google.golang.org/grpc/codes"
)

// Error is a request Triton's HTTP endpoint refuses. Msg is Triton's text,
// safe to show the client; Code is its class (InvalidArgument, NotFound,
// Unimplemented, Internal), which sets the HTTP status as Triton maps it.
type Error struct {
	Code codes.Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func invalid(format string, args ...any) *Error {
	return &Error{Code: codes.InvalidArgument, Msg: fmt.Sprintf(format, args...)}
}

// wrap prefixes an accessor's error as Triton's RETURN_MSG_IF_ERR does:
// "<prefix>: <msg>", same class.
func wrap(prefix string, err *Error) *Error {
	return &Error{Code: err.Code, Msg: prefix + ": " + err.Msg}
}
