package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/streamgate/streamgate/gateway/sse"
	"github.com/streamgate/streamgate/gateway/store"
)

func TestBearerKey(t *testing.T) {
	for h, want := range map[string]string{
		"Bearer sg-abc":   "sg-abc",
		"bearer sg-abc":   "sg-abc",
		"BEARER   sg-abc": "sg-abc",
		"Bearer":          "",
		"Bearer ":         "",
		"Basic sg-abc":    "",
		"Bearer a b":      "",
		"Bearer a\tb":     "",
		"sg-abc":          "",
		"":                "",
	} {
		got, ok := bearerKey(h)
		if got != want || ok != (want != "") {
			t.Errorf("bearerKey(%q) = %q, %v; want %q", h, got, ok, want)
		}
	}
}

func TestSubprotocolKey(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   string
	}{
		{[]string{"streamgate.v1, streamgate.key.sg-abc"}, "sg-abc"},
		{[]string{"streamgate.v1", "streamgate.key.sg-abc"}, "sg-abc"},
		{[]string{"streamgate.key.sg-abc,streamgate.v1"}, "sg-abc"},
		{[]string{"streamgate.v1, streamgate.key."}, ""},
		{[]string{"streamgate.v1"}, ""},
		{nil, ""},
	} {
		got, ok := subprotocolKey(tc.values)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("subprotocolKey(%q) = %q, %v; want %q", tc.values, got, ok, tc.want)
		}
	}
}

func FuzzBearerKey(f *testing.F) {
	for _, s := range []string{"Bearer sg-abc", "bearer  x", "Basic x", "Bearer", "Bearer a b", "\x00Bearer x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		key, ok := bearerKey(h)
		if !ok {
			if key != "" {
				t.Fatalf("%q: key %q without ok", h, key)
			}
			return
		}
		if !validKey(key) || !strings.HasSuffix(h, key) {
			t.Fatalf("%q: key %q", h, key)
		}
		if again, ok := bearerKey("Bearer " + key); !ok || again != key {
			t.Fatalf("%q: key %q does not round-trip (%q)", h, key, again)
		}
	})
}

func FuzzSubprotocolKey(f *testing.F) {
	for _, s := range []string{"streamgate.v1, streamgate.key.sg-abc", "streamgate.key.", ",,", "streamgate.key.a,streamgate.key.b", " streamgate.key.x ", "streamgate.key. 0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, ok := subprotocolKey([]string{v})
		if !ok {
			if key != "" {
				t.Fatalf("%q: key %q without ok", v, key)
			}
			return
		}
		if !validKey(key) || !strings.Contains(v, keyProtocol+key) {
			t.Fatalf("%q: key %q", v, key)
		}
	})
}

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
			if key, ok := bearerKey(auth); ok && key == secret {
				valid = true
			}
			if valid != (rec.Code == http.StatusOK) || (!valid && rec.Code != http.StatusUnauthorized) {
				t.Fatalf("%s with %q: %d %s", p.path, auth, rec.Code, rec.Body)
			}
		}
	})
}
