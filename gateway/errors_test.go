package gateway

import (
	"net/http"
	"testing"

	"github.com/streamgate/streamgate/upstream"
	"google.golang.org/grpc/codes"
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
		e := classify(&upstream.Error{Kind: upstream.KindModel, Code: tc.code, Message: "the model says no"})
		if e.Status != tc.status || e.Code != tc.errCode || e.RetryAfter != tc.retryAfter || e.Msg != "the model says no" {
			t.Errorf("%v: %d %s retry-after %v %q, want %d %s %v", tc.code, e.Status, e.Code, e.RetryAfter, e.Msg, tc.status, tc.errCode, tc.retryAfter)
		}
	}
	if e := classify(errDraining); e.Status != http.StatusServiceUnavailable || !e.RetryAfter {
		t.Errorf("draining: %+v", e)
	}
}

// A target that went silent is a gateway timeout with its own code, which
// the client sees as the status before the stream starts and as the error
// event or frame's code after.
func TestClassifyIdleTimeout(t *testing.T) {
	e := classify(&upstream.Error{Kind: upstream.KindIdleTimeout, Code: codes.DeadlineExceeded, Message: "the target sent nothing for 1m0s"})
	if e.Status != http.StatusGatewayTimeout || e.Code != "upstream_timeout" || e.RetryAfter ||
		e.Msg != "upstream timeout: the target sent nothing for 1m0s" {
		t.Errorf("idle timeout: %+v", e)
	}
}
