package openaiapi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/streamgate/streamgate/gateway/core"
	"github.com/streamgate/streamgate/gateway/store"
)

// chargeStorage counts size bytes for stored response id against its
// owner's budget and the gateway's cap (Options.StorageCap), for as long
// as the record lives. With limit false (a response's later record, its
// request admitted) it counts without refusing.
func (s *API) chargeStorage(ctx context.Context, id string, size int64, limit bool) error {
	budget, capacity := s.StorageBudget(ctx), s.Opts.StorageCap
	if !limit {
		budget, capacity = 0, 0
	}
	owner := core.CallerKey(ctx)
	ttl := s.Opts.ResponseTTL
	if owner != "" {
		ok, err := s.Opts.Store.ChargeStorage(ctx, owner, id, size, ttl, budget)
		if err != nil {
			return s.ResponseStoreError(ctx, err)
		}
		if !ok {
			return errStorageFull("this API key", budget, "keys create --storage, or --key-storage for every key")
		}
	}
	ok, err := s.Opts.Store.ChargeStorage(ctx, store.GlobalOwner, id, size, ttl, capacity)
	switch {
	case err != nil:
		err = s.ResponseStoreError(ctx, err)
	case !ok:
		err = errStorageFull("this gateway", capacity, "--storage-cap")
	}
	if err != nil && owner != "" { // what the key's budget counted goes back
		_ = s.ResponseStoreError(ctx, s.Opts.Store.ReleaseStorage(context.WithoutCancel(ctx), owner, id))
	}
	return err
}

// releaseStorage gives back what deleted response id counted.
func (s *API) releaseStorage(ctx context.Context, id string) {
	if owner := core.CallerKey(ctx); owner != "" {
		_ = s.ResponseStoreError(ctx, s.Opts.Store.ReleaseStorage(ctx, owner, id))
	}
	_ = s.ResponseStoreError(ctx, s.Opts.Store.ReleaseStorage(ctx, store.GlobalOwner, id))
}

// errStorageFull is the answer to a response that would not fit in the
// stored bytes whose limit is limit.
func errStorageFull(whose string, limit int64, setting string) *core.HTTPError {
	return &core.HTTPError{Status: http.StatusBadRequest, Code: "storage_limit_exceeded", Param: "store",
		Msg: fmt.Sprintf("Storing this response would take the stored responses of %s past their limit of %d bytes (%s): delete stored responses, wait for them to expire, or send store: false.",
			whose, limit, setting)}
}
