package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/streamgate/streamgate/gateway"
	"github.com/streamgate/streamgate/gateway/store"
	"github.com/streamgate/streamgate/gateway/store/redistest"
	"github.com/streamgate/streamgate/gateway/ws"
)

// newKeyedStack is a stack whose gateway needs API keys, kept with their
// limits in st (a fresh in-process store when nil).
func newKeyedStack(t *testing.T, st store.Store) *testStack {
	t.Helper()
	if st == nil {
		st = store.NewMemory()
	}
	return newStack(t, &gateway.Options{Store: st, Keys: st, Now: fixedNow})
}

// addKey creates a key in st and returns its secret.
func addKey(t testing.TB, st store.Keys, name string, l store.Limit, models ...string) string {
	t.Helper()
	k, secret, err := store.NewKey(name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	k.Limit, k.Models = l, models
	if err := st.CreateKey(t.Context(), k); err != nil {
		t.Fatal(err)
	}
	return secret
}

func bearer(secret string) http.Header {
	return http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + secret}}
}

// A gateway with keys answers a request without a valid key 401 in its
// route's shape: OpenAI's invalid_api_key on /v1, Triton's {"error"} on
// /v2, and on /v1/ws an error frame before any request runs.
func TestKeysRequired(t *testing.T) {
	st := store.NewMemory()
	s := newKeyedStack(t, st)
	secret := addKey(t, st, "good", store.Limit{})
	expired, oldSecret, _ := store.NewKey("old", time.Now())
	expired.Expires = time.Now().Add(-time.Second)
	if err := st.CreateKey(t.Context(), expired); err != nil {
		t.Fatal(err)
	}
	chat := `{"model":"echo","messages":[{"role":"user","content":"hi there"}],"max_tokens":4}`
	for _, tc := range []struct {
		name, auth string
	}{
		{"no key", ""},
		{"wrong key", "Bearer sg-nope"},
		{"not bearer", "Basic " + secret},
		{"expired", "Bearer " + oldSecret},
	} {
		h := http.Header{"Content-Type": {"application/json"}}
		if tc.auth != "" {
			h.Set("Authorization", tc.auth)
		}
		resp, body := s.do(t, http.MethodPost, "/v1/chat/completions", []byte(chat), h)
		var oe struct {
			Error struct{ Message, Type, Code string }
		}
		json.Unmarshal(body, &oe)
		if resp.StatusCode != 401 || oe.Error.Code != "invalid_api_key" || oe.Error.Type != "invalid_request_error" || oe.Error.Message == "" {
			t.Errorf("%s on /v1: %d %s", tc.name, resp.StatusCode, body)
		}
		resp, body = s.do(t, http.MethodPost, "/v2/models/echo/generate", []byte(`{"text_input":"hi"}`), h)
		var te map[string]any
		json.Unmarshal(body, &te)
		if msg, _ := te["error"].(string); resp.StatusCode != 401 || msg == "" || len(te) != 1 {
			t.Errorf("%s on /v2: %d %s", tc.name, resp.StatusCode, body)
		}
		if resp.Header.Get("X-Ratelimit-Limit-Requests") != "" {
			t.Errorf("%s: rate limit headers on a request with no key", tc.name)
		}
	}
	// Health and metrics need no key.
	for _, path := range []string{"/healthz", "/readyz", "/v2/health/ready"} {
		if resp, _ := s.get(t, path); resp.StatusCode != 200 {
			t.Errorf("%s: %d", path, resp.StatusCode)
		}
	}
	// With the key, every route works.
	if resp, body := s.do(t, http.MethodPost, "/v1/chat/completions", []byte(chat), bearer(secret)); resp.StatusCode != 200 {
		t.Errorf("with the key: %d %s", resp.StatusCode, body)
	}
	if resp, body := s.do(t, http.MethodGet, "/v1/models", nil, bearer(secret)); resp.StatusCode != 200 {
		t.Errorf("models with the key: %d %s", resp.StatusCode, body)
	}

	wsURL := "ws" + strings.TrimPrefix(s.url, "http") + "/v1/ws"
	frame := `{"type":"completions","id":"a","body":{"model":"echo","prompt":"one two","max_tokens":2}}`
	// No key, or a bad one: one error frame, then the close, before any
	// request runs.
	for name, opts := range map[string]*websocket.DialOptions{
		"no key":      {Subprotocols: []string{ws.Subprotocol}},
		"bad key":     {Subprotocols: []string{ws.Subprotocol, "streamgate.key.sg-nope"}},
		"bad bearer":  {Subprotocols: []string{ws.Subprotocol}, HTTPHeader: http.Header{"Authorization": {"Bearer sg-nope"}}},
		"expired key": {Subprotocols: []string{ws.Subprotocol, "streamgate.key." + oldSecret}},
	} {
		c, _, err := websocket.Dial(t.Context(), wsURL, opts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		f, raw, err := wsRead(t, c)
		if err != nil || f.Type != "error" || !strings.Contains(string(raw), `"code":"invalid_api_key"`) || strings.Contains(string(raw), `"id"`) {
			t.Errorf("ws %s: %s %v", name, raw, err)
		}
		_, _, err = c.Read(t.Context())
		if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
			t.Errorf("ws %s: after the error frame %v, want close 1008", name, err)
		}
		c.CloseNow()
	}
	// The key as a subprotocol (browsers) or a header: the socket works,
	// and speaks streamgate.v1 (never echoing the key).
	for name, opts := range map[string]*websocket.DialOptions{
		"subprotocol": {Subprotocols: []string{ws.Subprotocol, "streamgate.key." + secret}},
		"header":      {Subprotocols: []string{ws.Subprotocol}, HTTPHeader: http.Header{"Authorization": {"Bearer " + secret}}},
	} {
		c, resp, err := websocket.Dial(t.Context(), wsURL, opts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.Subprotocol() != ws.Subprotocol || resp.Header.Get("Sec-WebSocket-Protocol") != ws.Subprotocol {
			t.Errorf("ws %s: subprotocol %q", name, resp.Header.Get("Sec-WebSocket-Protocol"))
		}
		frames := wsAsk(t, c, frame)
		if !strings.Contains(frames[len(frames)-1], `"type":"done"`) {
			t.Errorf("ws %s: %v", name, frames)
		}
		c.CloseNow()
	}
}

// A key's limits: the request after its requests per minute gets 429 with
// Retry-After and the x-ratelimit headers, on every route and on the
// WebSocket; a model the key may not use is 404, as OpenAI answers.
func TestKeyLimits(t *testing.T) {
	st := store.NewMemory()
	s := newKeyedStack(t, st)
	chat := `{"model":"echo","messages":[{"role":"user","content":"hi there"}],"max_tokens":4}`

	t.Run("rpm", func(t *testing.T) {
		secret := addKey(t, st, "rpm", store.Limit{RPM: 3, TPM: 10000})
		for i := range 3 {
			resp, body := s.do(t, http.MethodPost, "/v1/chat/completions", []byte(chat), bearer(secret))
			h := resp.Header
			if resp.StatusCode != 200 || h.Get("X-Ratelimit-Limit-Requests") != "3" || h.Get("X-Ratelimit-Remaining-Requests") != strconv.Itoa(2-i) ||
				h.Get("X-Ratelimit-Reset-Requests") == "" || h.Get("X-Ratelimit-Limit-Tokens") != "10000" || h.Get("X-Ratelimit-Remaining-Tokens") == "" {
				t.Fatalf("request %d: %d %v %s", i+1, resp.StatusCode, h, body)
			}
		}
		resp, body := s.do(t, http.MethodPost, "/v1/chat/completions", []byte(chat), bearer(secret))
		var oe struct{ Error struct{ Type, Code string } }
		json.Unmarshal(body, &oe)
		ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != 429 || oe.Error.Code != "rate_limit_exceeded" || oe.Error.Type != "rate_limit_error" ||
			ra < 1 || ra > 20 || resp.Header.Get("X-Ratelimit-Remaining-Requests") != "0" {
			t.Fatalf("4th request: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		resp, body = s.do(t, http.MethodPost, "/v2/models/echo/generate", []byte(`{"text_input":"hi"}`), bearer(secret))
		if resp.StatusCode != 429 || !strings.HasPrefix(string(body), `{"error":"Rate limit reached`) {
			t.Fatalf("4th request on /v2: %d %s", resp.StatusCode, body)
		}
	})
	t.Run("ws", func(t *testing.T) {
		secret := addKey(t, st, "ws", store.Limit{RPM: 2})
		c, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(s.url, "http")+"/v1/ws",
			&websocket.DialOptions{Subprotocols: []string{ws.Subprotocol, "streamgate.key." + secret}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		for i, want := range []string{`"type":"done"`, `"type":"done"`, `"code":"rate_limit_exceeded"`} {
			frames := wsAsk(t, c, `{"type":"completions","id":"r`+strconv.Itoa(i)+`","body":{"model":"echo","prompt":"a b","max_tokens":2}}`)
			if last := frames[len(frames)-1]; !strings.Contains(last, want) {
				t.Errorf("ws request %d: %s, want %s", i+1, last, want)
			}
		}
	})
	t.Run("ws revoked", func(t *testing.T) {
		// A socket opened with a key stops working for new requests once
		// the key is revoked.
		secret := addKey(t, st, "ws-revoked", store.Limit{})
		c, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(s.url, "http")+"/v1/ws",
			&websocket.DialOptions{Subprotocols: []string{ws.Subprotocol, "streamgate.key." + secret}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		frame := `{"type":"completions","id":"x","body":{"model":"echo","prompt":"a b","max_tokens":2}}`
		if frames := wsAsk(t, c, frame); !strings.Contains(frames[len(frames)-1], `"type":"done"`) {
			t.Fatalf("before revoking: %v", frames)
		}
		if err := st.RevokeKey(t.Context(), "ws-revoked"); err != nil {
			t.Fatal(err)
		}
		if frames := wsAsk(t, c, frame); !strings.Contains(frames[len(frames)-1], `"code":"invalid_api_key"`) {
			t.Errorf("after revoking: %v", frames)
		}
	})
	t.Run("models", func(t *testing.T) {
		secret := addKey(t, st, "models", store.Limit{}, "echo")
		resp, body := s.do(t, http.MethodPost, "/v1/completions", []byte(`{"model":"echo_slow","prompt":"a","max_tokens":1}`), bearer(secret))
		if resp.StatusCode != 404 || !strings.Contains(string(body), `"code":"model_not_found"`) {
			t.Errorf("a model the key may not use: %d %s", resp.StatusCode, body)
		}
		if resp, body := s.do(t, http.MethodPost, "/v1/completions", []byte(`{"model":"echo","prompt":"a","max_tokens":1}`), bearer(secret)); resp.StatusCode != 200 {
			t.Errorf("an allowed model: %d %s", resp.StatusCode, body)
		}
		_, body = s.do(t, http.MethodGet, "/v1/models", nil, bearer(secret))
		var list struct{ Data []struct{ ID string } }
		json.Unmarshal(body, &list)
		if len(list.Data) != 1 || list.Data[0].ID != "echo" {
			t.Errorf("models the key sees: %s", body)
		}
		if resp, _ := s.do(t, http.MethodGet, "/v1/models/echo_slow", nil, bearer(secret)); resp.StatusCode != 404 {
			t.Errorf("GET a model the key may not use: %d", resp.StatusCode)
		}
	})
	t.Run("concurrency", func(t *testing.T) {
		secret := addKey(t, st, "conc", store.Limit{Concurrency: 1})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/completions",
			strings.NewReader(`{"model":"echo_slow","prompt":"`+words(500)+`","stream":true}`))
		req.Header = bearer(secret)
		resp, err := httpClient(t).Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("the held stream: %v %v", resp, err)
		}
		defer resp.Body.Close()
		r, body := s.do(t, http.MethodPost, "/v1/completions", []byte(`{"model":"echo","prompt":"a","max_tokens":1}`), bearer(secret))
		if r.StatusCode != 429 || !strings.Contains(string(body), "in flight") || r.Header.Get("Retry-After") == "" {
			t.Errorf("a second request beside the held one: %d %s", r.StatusCode, body)
		}
		cancel()
		resp.Body.Close()
		// The slot comes back when the stream ends.
		waitFor(t, "the slot to come back", func() bool {
			r, _ := s.do(t, http.MethodPost, "/v1/completions", []byte(`{"model":"echo","prompt":"a","max_tokens":1}`), bearer(secret))
			return r.StatusCode == 200
		})
	})
	t.Run("tpm", func(t *testing.T) {
		// 60 tokens a minute. A request reserves its prompt (about 4 bytes
		// a token) plus max_tokens and is settled from the model's count
		// (echo: one token a word): 100 one-letter words cost 100 tokens
		// although they reserved 50, so the key's next minute is spent.
		secret := addKey(t, st, "tpm", store.Limit{TPM: 60})
		prompt := strings.TrimSpace(strings.Repeat("a ", 100))
		resp, body := s.do(t, http.MethodPost, "/v1/completions", []byte(`{"model":"echo","prompt":"`+prompt+`","max_tokens":5}`), bearer(secret))
		if resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Limit-Tokens") != "60" {
			t.Fatalf("first: %d %v %s", resp.StatusCode, resp.Header, body)
		}
		resp, body = s.do(t, http.MethodPost, "/v1/completions", []byte(`{"model":"echo","prompt":"a","max_tokens":1}`), bearer(secret))
		if resp.StatusCode != 429 || !strings.Contains(string(body), "tokens per minute") || resp.Header.Get("X-Ratelimit-Remaining-Tokens") != "0" {
			t.Fatalf("after the overdraft: %d %v %s", resp.StatusCode, resp.Header, body)
		}
	})
}

// BenchmarkKeyedRequest is one non-streaming completion through a whole
// stack: open, with a key kept in process, and with a key and its limits
// in Redis (a key lookup and the request's count at the door, then a
// reservation at the start and a settlement at the end: four round
// trips).
func BenchmarkKeyedRequest(b *testing.B) {
	body := []byte(`{"model":"echo","prompt":"one two three","max_tokens":3}`)
	run := func(b *testing.B, s *testStack, secret string) {
		c := &http.Client{Transport: &http.Transport{}}
		defer c.CloseIdleConnections()
		for b.Loop() {
			req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/completions", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if secret != "" {
				req.Header.Set("Authorization", "Bearer "+secret)
			}
			resp, err := c.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	}
	limits := store.Limit{RPM: 1 << 30, TPM: 1 << 30, Concurrency: 1 << 20}
	b.Run("open", func(b *testing.B) { run(b, newStack(b, nil), "") })
	b.Run("memory", func(b *testing.B) {
		st := store.NewMemory()
		s := newStack(b, &gateway.Options{Store: st, Keys: st})
		run(b, s, addKey(b, st, "bench", limits))
	})
	// redis caches the key (as --key-cache-ttl does by default);
	// redis-uncached looks it up in Redis for every request.
	for _, ttl := range []time.Duration{store.DefaultKeyCacheTTL, 0} {
		name := "redis"
		if ttl == 0 {
			name = "redis-uncached"
		}
		b.Run(name, func(b *testing.B) {
			st, err := store.Open(redistest.Start(b).URL())
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			st.(*store.Redis).SetKeyCacheTTL(ttl)
			s := newStack(b, &gateway.Options{Store: st, Keys: st})
			run(b, s, addKey(b, st, "bench", limits))
		})
	}
}
