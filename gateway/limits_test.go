package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/streamgate/streamgate/gateway/core"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/upstream"
	"github.com/streamgate/streamgate/upstream/upstreamtest"
)

// The per-client limit counts a request against the API key that
// authentication put in its context (core.WithLimitKey), across connections;
// without one, against its connection.
func TestPerClientLimitKey(t *testing.T) {
	started := make(chan struct{}, 4)
	start := upstreamtest.Client(func(context.Context, *pb.ModelInferRequest, *upstream.Feed) error {
		started <- struct{}{}
		return nil // held until its context ends
	})
	srv := testServer(start, fakeUpstream{}, &Options{MaxStreamsPerConn: 1})
	// authenticate stands in for the API key hook: the X-Test-Key header
	// names the key.
	authenticate := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k := r.Header.Get("X-Test-Key"); k != "" {
			r = r.WithContext(core.WithLimitKey(r.Context(), k))
		}
		srv.Handler().ServeHTTP(w, r)
	})
	do := func(ctx context.Context, remote, key string) *httptest.ResponseRecorder {
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v2/models/repeat_int32/generate", strings.NewReader(`{"IN":[1],"DELAY":[0],"WAIT":0}`))
		req.RemoteAddr = remote
		if key != "" {
			req.Header.Set("X-Test-Key", key)
		}
		rec := httptest.NewRecorder()
		authenticate.ServeHTTP(rec, req)
		return rec
	}

	// One request of key k1 holds k1's only slot, from connection A.
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { do(ctx, "10.0.0.1:1000", "k1") })
	<-started

	for _, tc := range []struct {
		remote, key string
		status      int
		body        string
	}{
		// k1 from another connection, even another address: refused.
		{"10.0.0.2:2000", "k1", 429, `{"error":"too many requests in flight for this API key"}`},
		// Another key, or no key, from the same connection: admitted.
		{"10.0.0.1:1000", "k2", 0, ""},
		{"10.0.0.1:1000", "", 0, ""},
	} {
		rctx, rcancel := context.WithCancel(t.Context())
		done := make(chan *httptest.ResponseRecorder, 1)
		go func() { done <- do(rctx, tc.remote, tc.key) }()
		select {
		case <-started: // admitted: it reached upstream
			rcancel()
			<-done
			if tc.status != 0 {
				t.Errorf("%s key %q: admitted, want %d %s", tc.remote, tc.key, tc.status, tc.body)
			}
		case rec := <-done:
			rcancel()
			if rec.Code != tc.status || rec.Body.String() != tc.body || rec.Header().Get("Retry-After") != "1" {
				t.Errorf("%s key %q: %d %s (Retry-After %q), want %d %s", tc.remote, tc.key, rec.Code, rec.Body, rec.Header().Get("Retry-After"), tc.status, tc.body)
			}
		}
	}
	cancel()
	wg.Wait()
}

// HTTP/2 lets a connection open more streams than the per-client limit,
// so the limit's 429 is what a client sees, with room for other requests.
func TestHTTP2ConfigLeavesRoomForTheLimit(t *testing.T) {
	for per, want := range map[int]int{0: 128, 1: 100, 64: 128, 500: 1000} {
		srv := testServer(nil, fakeUpstream{}, &Options{MaxStreamsPerConn: per})
		if got := srv.HTTP2Config().MaxConcurrentStreams; got != want {
			t.Errorf("MaxStreamsPerConn %d: MaxConcurrentStreams %d, want %d", per, got, want)
		}
	}
}
