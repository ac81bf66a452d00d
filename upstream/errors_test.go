package upstream

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/streamgate/streamgate/proto/errclass"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

func TestKindNames(t *testing.T) {
	for k, want := range map[Kind]string{
		KindModel:       "model_error",
		KindUnavailable: "upstream_unavailable",
		KindCancelled:   "cancelled",
		KindTooSlow:     "too_slow",
		KindBudget:      "memory_budget",
		KindDeadline:    "deadline_exceeded",
		KindRejected:    "rejected",
		KindIdleTimeout: "upstream_timeout",
		Kind(99):        "unknown",
	} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d) = %q, want %q", int(k), got, want)
		}
	}
}

func TestErrorHelpers(t *testing.T) {
	errTooSlow := stallError(30 * time.Second)
	err := fmt.Errorf("relay: %w", errTooSlow)
	e, ok := AsError(err)
	if !ok || e.Kind != KindTooSlow {
		t.Fatalf("AsError = %v, %v", e, ok)
	}
	if !errors.Is(err, &Error{Kind: KindTooSlow}) || errors.Is(err, &Error{Kind: KindModel}) {
		t.Fatal("Is does not match by kind")
	}
	if _, ok := AsError(errors.New("other")); ok {
		t.Fatal("AsError matched a foreign error")
	}
	if got := errTooSlow.Error(); got != "upstream: too_slow: the client took no response for 30s while responses waited for it" {
		t.Fatalf("Error() = %q", got)
	}
	if c := status.Code(errClosed); c != codes.Unavailable {
		t.Fatalf("status.Code = %v", c)
	}
	if e, classed := inbandError("Request for unknown model: 'x' is not found", nil); e.Code != codes.NotFound || classed {
		t.Fatalf("unknown model code %v", e.Code)
	}
	if e := unavailable("stream ended", status.Error(codes.Internal, "boom")); e.Code != codes.Internal || e.Message != "stream ended: boom" {
		t.Fatalf("unavailable = %+v", e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	if e := ctxError(ctx); e.Kind != KindDeadline {
		t.Fatalf("ctxError(deadline) = %v", e)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if e := ctxError(ctx); e.Kind != KindCancelled {
		t.Fatalf("ctxError(cancel) = %v", e)
	}
}

func TestOptions(t *testing.T) {
	o := (*Options)(nil).withDefaults()
	if o.MaxStreamsPerTarget != 64 || o.MaxRequestsPerStream != 256 || o.QueueBytes != 64<<10 || o.Memory.Limit() != 1<<30 || o.StallTimeout != 30*time.Second ||
		o.Cancel != CancelAuto || o.KeepaliveTime != 10*time.Second || o.KeepaliveTimeout != 5*time.Second ||
		o.IdleTimeout != time.Minute || o.MetadataTimeout != 5*time.Second || o.Logger == nil {
		t.Fatalf("defaults %+v", o)
	}
	// Without health checks nothing else is read from a quiet connection:
	// keepalive then stays within a default Triton's ping policy (no ping
	// more often than every 5m without data).
	if o := (&Options{HealthInterval: -1}).withDefaults(); o.KeepaliveTime < 5*time.Minute {
		t.Fatalf("keepalive without health checks %v", o.KeepaliveTime)
	}
	if o := (&Options{HealthInterval: time.Minute}).withDefaults(); o.KeepaliveTime < 5*time.Minute {
		t.Fatalf("keepalive with rare health checks %v", o.KeepaliveTime)
	}
	if o.MaxStreamsPerTarget*o.MaxRequestsPerStream < 10000 {
		t.Fatal("defaults cannot carry 10,000 requests to one target")
	}
	in := &Options{HealthInterval: 100 * time.Millisecond}
	o = in.withDefaults()
	// A short interval does not shorten the checks' deadline: on a busy
	// machine, a check bounded by it would eject a healthy target.
	if o.HealthTimeout != DefaultHealthTimeout || in.HealthTimeout != 0 {
		t.Fatalf("health timeout %v, caller's options changed: %v", o.HealthTimeout, in.HealthTimeout)
	}
	for _, m := range []CancelMode{CancelAuto, CancelInband, CancelStream, CancelNone} {
		if got, err := ParseCancelMode(m.String()); got != m || err != nil {
			t.Errorf("ParseCancelMode(%q) = %v, %v", m, got, err)
		}
	}
	if _, err := ParseCancelMode("sometimes"); err == nil {
		t.Error("ParseCancelMode accepted a bad name")
	}
	if _, err := New(nil, nil); err == nil {
		t.Error("New accepted no targets")
	}
	if _, err := New([]string{"dns:///no-port"}, nil); err == nil {
		t.Error("New accepted a dns name without a port")
	}
}

func TestCheckRequest(t *testing.T) {
	bad := "\xff"
	for name, req := range map[string]*pb.ModelInferRequest{
		"nil":           nil,
		"model":         {ModelName: bad},
		"parameter key": {ModelName: "m", Parameters: map[string]*pb.InferParameter{bad: {}}},
		"parameter value": {ModelName: "m", Parameters: map[string]*pb.InferParameter{
			"k": {ParameterChoice: &pb.InferParameter_StringParam{StringParam: bad}}}},
		"input":  {ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: bad}}},
		"output": {ModelName: "m", Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: bad}}},
	} {
		if e, ok := AsError(checkRequest(req)); !ok || e.Kind != KindRejected || e.Code != codes.InvalidArgument {
			t.Errorf("%s: %v", name, e)
		}
	}
	if err := checkRequest(repeatN(0, 2, 0)); err != nil {
		t.Fatal(err)
	}
}

// An in-band error takes the class the target sent; from a target that
// sends none (a real Triton) the class is read from Triton's texts.
func TestInbandErrorClass(t *testing.T) {
	classed := func(name string) map[string]*pb.InferParameter {
		return map[string]*pb.InferParameter{errclass.Param: {ParameterChoice: &pb.InferParameter_StringParam{StringParam: name}}}
	}
	for _, tc := range []struct {
		msg        string
		params     map[string]*pb.InferParameter
		code       codes.Code
		wasClassed bool
	}{
		{"Exceeds maximum queue size", classed("UNAVAILABLE"), codes.Unavailable, true},
		{"llama2: too many requests", classed("RESOURCE_EXHAUSTED"), codes.ResourceExhausted, true},
		{"bad shape", classed("INVALID_ARGUMENT"), codes.InvalidArgument, true},
		{"no response", classed("INTERNAL"), codes.Internal, true},
		// The class wins over the text.
		{"Request for unknown model: 'x' is not found", classed("INVALID_ARGUMENT"), codes.InvalidArgument, true},
		{"GRPC server is shutting down and has stopped accepting new requests.", classed("UNAVAILABLE"), codes.Unavailable, true},
		// A real Triton: its documented texts.
		{"Request for unknown model: 'x' is not found", nil, codes.NotFound, false},
		{"Exceeds maximum queue size", nil, codes.Unavailable, false},
		{"GRPC server is shutting down and has stopped accepting new requests.", nil, codes.Unavailable, false},
		{"simulated failure", nil, codes.Unknown, false},
		// An unreadable class is no class.
		{"Exceeds maximum queue size", classed("SOMETIMES"), codes.Unavailable, false},
	} {
		e, c := inbandError(tc.msg, tc.params)
		if e.Kind != KindModel || e.Code != tc.code || e.Message != tc.msg || c != tc.wasClassed {
			t.Errorf("%q %v: %+v classed %v, want %v classed %v", tc.msg, tc.params, e, c, tc.code, tc.wasClassed)
		}
	}
}
