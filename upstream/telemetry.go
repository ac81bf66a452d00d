package upstream

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tracectx"
)

// Trace context and metrics. A call's span is the one in Start's context
// (the caller's: the gateway's upstream span); the client records its
// events there (retry, behind) and propagates its context: as request
// parameters (traceparent, tracestate) on every request, since a shared
// stream carries many traces, and as gRPC metadata on a dedicated stream
// and on unary calls, where a real Triton in OpenTelemetry trace mode
// reads it.

// scope is the instrumentation scope of the client's meter.
const scope = "github.com/streamgate/streamgate/upstream"

// injectParams writes the trace context of ctx into req's parameters;
// nothing when ctx carries none.
func (c *Client) injectParams(ctx context.Context, req *pb.ModelInferRequest) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	c.opts.Propagator.Inject(ctx, tracectx.Params{Req: req})
}

// traceMetadata is the trace context of ctx as gRPC metadata; nil when
// ctx carries none.
func (c *Client) traceMetadata(ctx context.Context) metadata.MD {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	md := metadata.MD{}
	c.opts.Propagator.Inject(ctx, tracectx.Metadata(md))
	return md
}

// injectUnary is a unary client interceptor that sends the trace context
// of each call's ctx as metadata.
func (c *Client) injectUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if md := c.traceMetadata(ctx); md != nil {
		if out, ok := metadata.FromOutgoingContext(ctx); ok {
			md = metadata.Join(out, md)
		}
		ctx = metadata.NewOutgoingContext(ctx, md)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// registerMetrics declares the client's instruments on its meter. They
// are observed from Stats at each collection; the returned function
// unregisters them.
func (c *Client) registerMetrics() (unregister func(), err error) {
	m := c.opts.MeterProvider.Meter(scope)
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, e := m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if e != nil && err == nil {
			err = e
		}
		return g
	}
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, e := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if e != nil && err == nil {
			err = e
		}
		return c
	}
	inFlight := gauge("streamgate.upstream.in_flight", "{request}", "Requests placed on upstream streams, by target.")
	streams := gauge("streamgate.upstream.streams_open", "{stream}", "Open upstream streams, pooled and dedicated, by target.")
	healthy := gauge("streamgate.upstream.target_healthy", "", "1 if the target passes health checks.")
	down := gauge("streamgate.upstream.target_down", "", "1 if the target's health checks get no answer: requests to it are refused at once.")
	started := counter("streamgate.upstream.requests", "{request}", "Requests placed by Start.")
	retries := counter("streamgate.upstream.retries", "{request}", "Requests re-sent after their stream broke or their target refused them.")
	breaks := counter("streamgate.upstream.stream_breaks", "{stream}", "Streams that ended with an error.")
	overflows := counter("streamgate.upstream.queue_overflows", "{request}", "Requests failed because their client stalled or the queue memory was spent.")
	behind := counter("streamgate.upstream.behind_requests", "{request}", "Requests whose client fell behind by more than their own queue bytes, so that their queue borrowed from the shared memory.")
	memory := gauge("streamgate.upstream.queue_memory", "By", "Memory requests borrow beyond their own queue bytes for responses their clients have not read (the budget shared with WebSocket send queues).")
	dropped := counter("streamgate.upstream.dropped_responses", "{response}", "Responses for requests no longer waited for.")
	idle := counter("streamgate.upstream.idle_timeouts", "{request}", "Requests ended because the target sent nothing for the idle timeout.")
	cancels := counter("streamgate.upstream.cancels", "{request}", "Requests cancelled upstream, by mechanism (inband, stream, none).")
	if err != nil {
		return nil, err
	}
	modes := [...]metric.ObserveOption{
		metric.WithAttributes(attribute.String("mode", "inband")),
		metric.WithAttributes(attribute.String("mode", "stream")),
		metric.WithAttributes(attribute.String("mode", "none")),
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := c.Stats()
		for _, t := range st.Targets {
			target := metric.WithAttributes(attribute.String("target", t.Addr))
			o.ObserveInt64(inFlight, int64(t.InFlight), target)
			o.ObserveInt64(streams, int64(len(t.Streams)), target)
			h := int64(0)
			if t.Healthy {
				h = 1
			}
			o.ObserveInt64(healthy, h, target)
			d := int64(0)
			if t.Down {
				d = 1
			}
			o.ObserveInt64(down, d, target)
		}
		o.ObserveInt64(started, int64(st.Started))
		o.ObserveInt64(retries, int64(st.Retries))
		o.ObserveInt64(breaks, int64(st.StreamBreaks))
		o.ObserveInt64(overflows, int64(st.QueueOverflows))
		o.ObserveInt64(behind, int64(st.Behind))
		o.ObserveInt64(memory, st.MemoryUsed)
		o.ObserveInt64(dropped, int64(st.Dropped))
		o.ObserveInt64(idle, int64(st.IdleTimeouts))
		o.ObserveInt64(cancels, int64(st.CancelsInband), modes[0])
		o.ObserveInt64(cancels, int64(st.CancelsStream), modes[1])
		o.ObserveInt64(cancels, int64(st.CancelsNone), modes[2])
		return nil
	}, inFlight, streams, healthy, down, started, retries, breaks, overflows, behind, memory, dropped, idle, cancels)
	if err != nil {
		return nil, err
	}
	return func() { reg.Unregister() }, nil
}
