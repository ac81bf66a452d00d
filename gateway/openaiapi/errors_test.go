package openaiapi

import (
	"fmt"
	"testing"

	"github.com/streamgate/streamgate/gateway/core"
	"github.com/streamgate/streamgate/gateway/jobs"
	"github.com/streamgate/streamgate/gateway/store"
)

// The shared store unreachable is the core's one answer for stored
// responses too (core's TestClassifyStoreUnavailable: keys and limits,
// resumable streams).
func TestResponsesStoreUnavailable(t *testing.T) {
	s := New(jobs.New(core.New(nil, nil, nil)))
	down := fmt.Errorf("%w: dial tcp: connection refused", store.ErrUnavailable)
	want := core.Classify(down)
	for name, err := range map[string]error{
		"responses": s.ResponseStoreError(t.Context(), down),
	} {
		if e := core.Classify(err); e.Status != want.Status || e.Code != want.Code || e.Msg != want.Msg || e.RetryAfter != want.RetryAfter {
			t.Errorf("%s: %+v, want %+v", name, e, want)
		}
	}
}
