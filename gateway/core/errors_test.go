package core

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/streamgate/streamgate/gateway/store"
	"github.com/streamgate/streamgate/upstream"
)

// A model error's class sets its status; overload (a full queue, a
// stopping target, a model out of capacity) is 429 or 503 with
// Retry-After and the status's own code, everything else keeps the
// model's text under code model_error.
func TestClassifyModelErrors(t *testing.T) {
	for _, tc := range []struct {
		code       codes.Code
		status     int
		errCode    string
		retryAfter bool
	}{
		{codes.InvalidArgument, 400, "model_error", false},
		{codes.Unknown, 400, "model_error", false},
		{codes.FailedPrecondition, 400, "model_error", false},
		{codes.NotFound, 404, "model_error", false},
		{codes.ResourceExhausted, 429, "too_many_requests", true},
		{codes.Unavailable, 503, "unavailable", true},
		{codes.Canceled, 503, "unavailable", true},
		{codes.Unimplemented, 501, "model_error", false},
		{codes.DeadlineExceeded, 504, "model_error", false},
		{codes.Internal, 500, "model_error", false},
	} {
		e := Classify(&upstream.Error{Kind: upstream.KindModel, Code: tc.code, Message: "the model says no"})
		if e.Status != tc.status || e.Code != tc.errCode || e.RetryAfter != tc.retryAfter || e.Msg != "the model says no" {
			t.Errorf("%v: %d %s retry-after %v %q, want %d %s %v", tc.code, e.Status, e.Code, e.RetryAfter, e.Msg, tc.status, tc.errCode, tc.retryAfter)
		}
	}
	if e := Classify(ErrDraining); e.Status != http.StatusServiceUnavailable || !e.RetryAfter {
		t.Errorf("draining: %+v", e)
	}
}

// A target that went silent is a gateway timeout with its own code, which
// the client sees as the status before the stream starts and as the error
// event or frame's code after.
func TestClassifyIdleTimeout(t *testing.T) {
	e := Classify(&upstream.Error{Kind: upstream.KindIdleTimeout, Code: codes.DeadlineExceeded, Message: "the target sent nothing for 1m0s"})
	if e.Status != http.StatusGatewayTimeout || e.Code != "upstream_timeout" || e.RetryAfter ||
		e.Msg != "upstream timeout: the target sent nothing for 1m0s" {
		t.Errorf("idle timeout: %+v", e)
	}
}

// An answer already made (an *HTTPError) is kept as it is, even when it
// wraps a store error classifyResume knows: a key lookup with the store
// down says so, not that the stream store is down.
func TestClassifyKeepsHTTPError(t *testing.T) {
	want := errStore(fmt.Errorf("%w: i/o timeout", store.ErrUnavailable))
	if e := Classify(fmt.Errorf("keys: %w", want)); e != want {
		t.Errorf("classify(errStore) = %+v, want %+v", e, want)
	}
}

// Faults of the client are the client's: a body too slow is 408, one cut
// short or a connection lost mid-upload 499 (nothing is written), bad
// framing 400, and a client that does not read its responses 499 with
// code too_slow. None is a 5xx.
func TestClassifyClientFaults(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	for _, tc := range []struct {
		err    error
		status int
		code   string
		msg    string
	}{
		{&bodyError{fmt.Errorf("read: %w", os.ErrDeadlineExceeded)}, 408, "request_timeout", "the request body arrived too slowly"},
		{&bodyError{io.ErrUnexpectedEOF}, StatusClientClosed, "cancelled", "the client went away during the upload"},
		{&bodyError{reset}, StatusClientClosed, "cancelled", "the client went away during the upload"},
		{&bodyError{errors.New("invalid byte in chunk length")}, 400, "bad_request", "malformed request body: invalid byte in chunk length"},
		{&bodyError{&http.MaxBytesError{Limit: 10}}, 413, "request_too_large", "request body too large: the limit is 10 bytes"},
		{ErrClientGone, StatusClientClosed, "cancelled", "request cancelled"},
		{&upstream.Error{Kind: upstream.KindTooSlow, Code: codes.ResourceExhausted}, StatusClientClosed, "too_slow",
			"the client read nothing while responses waited for it, for longer than the stall timeout"},
	} {
		e := Classify(tc.err)
		if e.Status != tc.status || e.Code != tc.code || e.Msg != tc.msg {
			t.Errorf("%v: %d %s %q, want %d %s %q", tc.err, e.Status, e.Code, e.Msg, tc.status, tc.code, tc.msg)
		}
	}
}

// The shared store unreachable is one answer, whichever feature found it
// (keys and limits, resumable streams, stored responses): 503 with
// Retry-After, code unavailable, one message that names no one feature.
func TestClassifyStoreUnavailable(t *testing.T) {
	down := fmt.Errorf("%w: dial tcp: connection refused", store.ErrUnavailable)
	want := Classify(down)
	if want.Status != http.StatusServiceUnavailable || want.Code != "unavailable" || !want.RetryAfter || !errors.Is(want.Err, store.ErrUnavailable) ||
		want.Msg != "the gateway's shared store is unavailable; try again shortly" {
		t.Fatalf("classify: %+v", want)
	}
	for name, err := range map[string]error{
		"keys":   errStore(down),
		"resume": fmt.Errorf("open stream: %w", down),
	} {
		if e := Classify(err); e.Status != want.Status || e.Code != want.Code || e.Msg != want.Msg || e.RetryAfter != want.RetryAfter {
			t.Errorf("%s: %+v, want %+v", name, e, want)
		}
	}
}
