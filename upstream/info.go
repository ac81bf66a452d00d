package upstream

import (
	"context"
	"slices"
	"time"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// cancelExtension is the ServerMetadata extension of targets that accept
// in-band cancellation.
const cancelExtension = "streamgate_cancel"

// infoCache is what a target caches about itself.
type infoCache struct {
	server   *cache[*pb.ServerMetadataResponse]
	metadata *cache[*pb.ModelMetadataResponse]
	config   *cache[*pb.ModelConfig]
	index    *cache[[]*pb.RepositoryIndexResponse_ModelIndex] // last answer only
}

func (ic *infoCache) init(ttl time.Duration) {
	ic.server = newCache[*pb.ServerMetadataResponse](ttl)
	ic.metadata = newCache[*pb.ModelMetadataResponse](ttl)
	ic.config = newCache[*pb.ModelConfig](ttl)
	ic.index = newCache[[]*pb.RepositoryIndexResponse_ModelIndex](-1)
}

func modelKey(name, version string) string { return name + "\x00" + version }

// lookup answers one metadata question about t from c, asking t with
// rpc, bounded by Options.MetadataTimeout, when c has no live answer. A
// target whose last health check failed is not asked while c knows an
// earlier answer, and an earlier answer stands in when asking fails
// because t does not answer (see cache.get): a stopped target's metadata
// stays readable, at once. A silent target (down, or ejected with its
// last health check unanswered: see silentNow) is never asked: without
// an earlier answer the lookup fails at once with errNoHealthy
// (KindUnavailable).
func lookup[V any](ctx context.Context, t *target, c *cache[V], key string, rpc func(context.Context) (V, error)) (V, error) {
	if t.silentNow() {
		// pick chose a silent target: no target is healthy. Asking
		// would wait MetadataTimeout for nothing; refuse at once.
		if v, ok := c.peek(key); ok {
			return v, nil
		}
		var zero V
		return zero, errNoHealthy
	}
	return c.get(ctx, key, func(ctx context.Context) (V, error) {
		ctx, cancel := context.WithTimeout(ctx, t.c.opts.MetadataTimeout)
		defer cancel()
		return rpc(ctx)
	})
}

func (t *target) serverMetadata(ctx context.Context) (*pb.ServerMetadataResponse, error) {
	return lookup(ctx, t, t.info.server, "", func(ctx context.Context) (*pb.ServerMetadataResponse, error) {
		return t.rpc.ServerMetadata(ctx, &pb.ServerMetadataRequest{})
	})
}

func (t *target) modelMetadata(ctx context.Context, name, version string) (*pb.ModelMetadataResponse, error) {
	return lookup(ctx, t, t.info.metadata, modelKey(name, version), func(ctx context.Context) (*pb.ModelMetadataResponse, error) {
		return t.rpc.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: name, Version: version})
	})
}

func (t *target) modelConfig(ctx context.Context, name, version string) (*pb.ModelConfig, error) {
	return lookup(ctx, t, t.info.config, modelKey(name, version), func(ctx context.Context) (*pb.ModelConfig, error) {
		r, err := t.rpc.ModelConfig(ctx, &pb.ModelConfigRequest{Name: name, Version: version})
		return r.GetConfig(), err
	})
}

func (t *target) repositoryIndex(ctx context.Context) ([]*pb.RepositoryIndexResponse_ModelIndex, error) {
	return lookup(ctx, t, t.info.index, "", func(ctx context.Context) ([]*pb.RepositoryIndexResponse_ModelIndex, error) {
		r, err := t.rpc.RepositoryIndex(ctx, &pb.RepositoryIndexRequest{})
		return r.GetModels(), err
	})
}

// inband reports whether t advertises in-band cancellation, asking it if
// the cached answer is missing or stale.
func (t *target) inband(ctx context.Context) bool {
	md, err := t.serverMetadata(ctx)
	return err == nil && slices.Contains(md.GetExtensions(), cancelExtension)
}

// cancelModeCached is CancelAuto's choice for t without asking it.
func (t *target) cancelModeCached() CancelMode {
	if md, ok := t.info.server.peek(""); ok && slices.Contains(md.GetExtensions(), cancelExtension) {
		return CancelInband
	}
	return CancelStream
}

// ServerLive reports whether any target is live, asking healthy targets
// first. The error is the last target's when none answered.
func (c *Client) ServerLive(ctx context.Context) (bool, error) {
	return c.anyTarget(ctx, func(t *target) (bool, error) {
		r, err := t.rpc.ServerLive(ctx, &pb.ServerLiveRequest{})
		return r.GetLive(), err
	})
}

// ServerReady reports whether any target is ready, asking healthy targets
// first. The error is the last target's when none answered. A target that
// answers is no longer down, and one that answers ready is admitted, as
// by a health check.
func (c *Client) ServerReady(ctx context.Context) (bool, error) {
	return c.anyTarget(ctx, func(t *target) (bool, error) {
		r, err := t.rpc.ServerReady(ctx, &pb.ServerReadyRequest{})
		if err == nil {
			t.answered() // as a health check would find
		}
		if r.GetReady() {
			t.ready()
		}
		return r.GetReady(), err
	})
}

func (c *Client) anyTarget(ctx context.Context, ask func(*target) (bool, error)) (bool, error) {
	_, release, err := c.pickTarget(ctx, nil) // waits for dns names to resolve
	if err != nil {
		return false, err
	}
	release()
	ts := slices.Clone(c.targetList())
	slices.SortStableFunc(ts, func(a, b *target) int {
		ha, hb := a.healthy.Load(), b.healthy.Load()
		switch {
		case ha == hb:
			return 0
		case ha:
			return -1
		}
		return 1
	})
	var lastErr error
	for _, t := range ts {
		if !t.pin() {
			continue // reaped meanwhile
		}
		ok, err := ask(t)
		t.unpin()
		if err == nil && ok {
			return true, nil
		}
		if err != nil {
			lastErr = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return false, lastErr
}

// ServerMetadata returns one target's ServerMetadata (cached). The answer
// is shared: do not modify it.
func (c *Client) ServerMetadata(ctx context.Context) (*pb.ServerMetadataResponse, error) {
	t, release, err := c.pickTarget(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer release()
	return t.serverMetadata(ctx)
}

// ModelReady asks one target whether a model version ("" = the target's
// choice) is ready. Errors are gRPC status errors.
func (c *Client) ModelReady(ctx context.Context, name, version string) (bool, error) {
	t, release, err := c.pickTarget(ctx, nil)
	if err != nil {
		return false, err
	}
	defer release()
	r, err := t.rpc.ModelReady(ctx, &pb.ModelReadyRequest{Name: name, Version: version})
	return r.GetReady(), err
}

// ModelMetadata returns a model's metadata from one target, cached per
// target for Options.MetadataTTL (and served stale while the target is
// down or does not answer, see Options.MetadataTTL). Errors from the target are gRPC status
// errors (status.FromError gives the code, e.g. NotFound). The answer is
// shared: do not modify it.
func (c *Client) ModelMetadata(ctx context.Context, name, version string) (*pb.ModelMetadataResponse, error) {
	t, release, err := c.pickTarget(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer release()
	return t.modelMetadata(ctx, name, version)
}

// ModelConfig returns a model's configuration from one target (decoupled
// or not, inputs, outputs), cached like ModelMetadata. The answer is
// shared: do not modify it.
func (c *Client) ModelConfig(ctx context.Context, name, version string) (*pb.ModelConfig, error) {
	t, release, err := c.pickTarget(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer release()
	return t.modelConfig(ctx, name, version)
}

// RepositoryIndex returns one target's model list, every model with its
// state ("READY" for servable ones). It asks the target each time; only
// while the target is down or does not answer is its last answer given
// instead. The answer is shared: do not modify it.
func (c *Client) RepositoryIndex(ctx context.Context) ([]*pb.RepositoryIndexResponse_ModelIndex, error) {
	t, release, err := c.pickTarget(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer release()
	return t.repositoryIndex(ctx)
}

// ModelStatistics returns one target's statistics of a model version
// (name "": every model; version "": every version it serves); not
// cached. Errors are gRPC status errors.
func (c *Client) ModelStatistics(ctx context.Context, name, version string) (*pb.ModelStatisticsResponse, error) {
	t, release, err := c.pickTarget(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer release()
	return t.rpc.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: name, Version: version})
}
