package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/streamgate/streamgate/gateway/core"
	"github.com/streamgate/streamgate/gateway/sse"
	"github.com/streamgate/streamgate/gateway/store"
)

// FuzzKeyedRoutes sends any Authorization header to a gateway with keys:
// the answer is the route's 401, or with the right key its normal answer;
// never a server error or a malformed body.
func FuzzKeyedRoutes(f *testing.F) {
	st := store.NewMemory()
	k, secret, err := store.NewKey("k", time.Now())
	if err != nil {
		f.Fatal(err)
	}
	k.Limit = store.Limit{TPM: 1 << 30}
	if err := st.CreateKey(f.Context(), k); err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"Bearer " + secret, "Bearer sg-nope", "", "Bearer", "bearer " + secret + " x", "Basic " + secret} {
		f.Add(s)
	}
	srv := testServer(fakeClient, fakeUpstream{}, &Options{MaxBodyBytes: 4096, SSE: &sse.Options{KeepAlive: -1}, Store: st, Keys: st})
	h := srv.Handler()
	f.Fuzz(func(t *testing.T, auth string) {
		for _, p := range []struct{ path, body string }{
			{"/v1/completions", `{"model":"echo","prompt":"hi","max_tokens":2}`},
			{"/v2/models/echo/generate_stream", `{"text_input":"hi"}`},
		} {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, p.path, strings.NewReader(p.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header["Authorization"] = []string{auth}
			h.ServeHTTP(rec, req)
			checkResponse(t, rec)
			valid := false
			if key, ok := core.BearerKey(auth); ok && key == secret {
				valid = true
			}
			if valid != (rec.Code == http.StatusOK) || (!valid && rec.Code != http.StatusUnauthorized) {
				t.Fatalf("%s with %q: %d %s", p.path, auth, rec.Code, rec.Body)
			}
		}
	})
}
