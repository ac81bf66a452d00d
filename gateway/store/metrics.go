package store

import (
	"context"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Instrument counts every command r sends to Redis, by its name (get,
// evalsha, xadd, ...; each command of a pipeline), as the counter
// streamgate.gateway.store_commands of m: the store's operations per
// second beside streamgate.gateway.store_errors.
func (r *Redis) Instrument(m metric.Meter) error {
	n, err := m.Int64Counter("streamgate.gateway.store_commands", metric.WithUnit("{command}"),
		metric.WithDescription("Commands sent to the shared store (Redis), by command name."))
	if err != nil {
		return err
	}
	r.c.AddHook(commandCounter{n})
	local, err := m.Int64Counter("streamgate.gateway.limits_local", metric.WithUnit("{request}"),
		metric.WithDescription("Admissions decided by this replica's share of a key's limits while the shared store failed (--limits-on-store-failure open), by result: admitted, or the limit that refused."))
	if err != nil {
		return err
	}
	r.redisLimits.localUsed = func(ctx context.Context, limited string) {
		result := limited
		if result == "" {
			result = "admitted"
		}
		local.Add(ctx, 1, metric.WithAttributes(attribute.String("result", result)))
	}
	return nil
}

// commandCounter is the go-redis hook of Instrument.
type commandCounter struct{ n metric.Int64Counter }

func (h commandCounter) count(ctx context.Context, cmd redis.Cmder) {
	h.n.Add(ctx, 1, metric.WithAttributes(attribute.String("command", cmd.Name())))
}

func (h commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(ctx, cmd)
		return next(ctx, cmd)
	}
}

func (h commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(ctx, cmd)
		}
		return next(ctx, cmds)
	}
}
