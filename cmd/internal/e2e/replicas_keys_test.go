package e2e

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/streamgate/streamgate/gateway/store"
	"github.com/streamgate/streamgate/gateway/store/redistest"
)

// keyRequest makes one request with the API key secret ("" for none) and
// a JSON body ("" for none) and reads the reply. A failed request is an
// error of t and a zero reply (it may run on any goroutine).
func keyRequest(t *testing.T, c *http.Client, secret, method, url, body string) reply {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, url, err)
		return reply{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("%s %s: reading the body: %v", method, url, err)
	}
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// createKeyCLI runs `streamgate keys create --redis url args...` and
// returns the secret it prints alone on stdout.
func createKeyCLI(t *testing.T, bin, url string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"keys", "create", "--redis", url}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("keys create: %v\n%s", err, stderr.String())
	}
	secret, ok := strings.CutSuffix(string(out), "\n")
	if !ok || strings.ContainsAny(secret, "\n ") || secret == "" {
		t.Fatalf("keys create printed %q, want the secret alone", out)
	}
	return secret
}

// Two gateway processes share one Redis in front of one engine, with
// nginx (deploy/nginx.conf) in front of both: a key's requests per
// minute, tokens per minute and concurrent streams hold across the
// replicas, whichever one a request reaches. Then Redis is killed under
// load: the streams running keep flowing; the keys both replicas have
// cached still work, and their limits follow each replica's policy: gw1
// (--limits-on-store-failure closed) answers 503 at once, gw2 (open, the
// default) admits by its share of the limits; both replicas recover by
// themselves once Redis is back.
func TestKeysAcrossReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs streamgate processes")
	}
	bin := buildStreamgate(t)
	rd := redistest.Start(t)
	eng := startEngineProc(t, bin, "")
	gw1 := startGatewayProc(t, bin, eng.addr, "--redis", rd.URL(), "--limits-on-store-failure", "closed")
	gw2 := startGatewayProc(t, bin, eng.addr, "--redis", rd.URL())
	ng := startNginx(t, gw1.addr+";\n    server "+gw2.addr)
	c := httpClient(t)
	completion := `{"model":"echo","prompt":"one two three","max_tokens":3}`

	t.Run("401 without a key", func(t *testing.T) {
		for _, base := range []string{gw1.url, gw2.url, ng.url} {
			if r := keyRequest(t, c, "", "POST", base+"/v1/completions", completion); r.status != 401 || !strings.Contains(r.body, "invalid_api_key") {
				t.Errorf("%s: %d %s", base, r.status, r.body)
			}
		}
	})

	t.Run("--no-keys", func(t *testing.T) {
		// A replica behind a proxy that authenticates: Redis, no keys.
		open := startGatewayProc(t, bin, eng.addr, "--redis", rd.URL(), "--no-keys")
		if r := keyRequest(t, c, "", "POST", open.url+"/v1/completions", completion); r.status != 200 || r.header.Get("X-Ratelimit-Limit-Requests") != "" {
			t.Errorf("--no-keys: %d %v %s", r.status, r.header, r.body)
		}
	})

	t.Run("rpm", func(t *testing.T) {
		secret := createKeyCLI(t, bin, rd.URL(), "--name", "rpm", "--rpm", "4")
		for i, base := range []string{gw1.url, gw2.url, ng.url, gw2.url} {
			r := keyRequest(t, c, secret, "POST", base+"/v1/completions", completion)
			if r.status != 200 || r.header.Get("X-Ratelimit-Remaining-Requests") != string(rune('3'-i)) {
				t.Fatalf("request %d on %s: %d remaining %q %s", i+1, base, r.status, r.header.Get("X-Ratelimit-Remaining-Requests"), r.body)
			}
		}
		// The fifth is refused on every replica, and through nginx.
		for _, base := range []string{gw1.url, gw2.url, ng.url} {
			r := keyRequest(t, c, secret, "POST", base+"/v1/completions", completion)
			if r.status != 429 || r.header.Get("Retry-After") == "" || !strings.Contains(r.body, "rate_limit_exceeded") ||
				r.header.Get("X-Ratelimit-Limit-Requests") != "4" || r.header.Get("X-Ratelimit-Remaining-Requests") != "0" {
				t.Errorf("5th request on %s: %d %v %s", base, r.status, r.header, r.body)
			}
		}
		if n := metric(t, c, gw1.url, `streamgate_gateway_rate_limited_total{limit="requests"}`) +
			metric(t, c, gw2.url, `streamgate_gateway_rate_limited_total{limit="requests"}`); n != 3 {
			t.Errorf("rate_limited counted %v, want 3", n)
		}
	})

	t.Run("concurrency", func(t *testing.T) {
		secret := createKeyCLI(t, bin, rd.URL(), "--name", "conc", "--concurrency", "1")
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw1.url+"/v2/models/repeat_int32/generate_stream", strings.NewReader(progressing))
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := c.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("the held stream: %v %v", resp, err)
		}
		defer resp.Body.Close()
		r := keyRequest(t, c, secret, "POST", gw2.url+"/v1/completions", completion)
		if r.status != 429 || !strings.Contains(r.body, "in flight") {
			t.Errorf("beside a stream on the other replica: %d %s", r.status, r.body)
		}
		cancel()
		resp.Body.Close()
		waitFor(t, "the slot to come back", func() bool {
			return keyRequest(t, c, secret, "POST", gw2.url+"/v1/completions", completion).status == 200
		})
	})

	t.Run("tpm", func(t *testing.T) {
		// 100 one-letter words reserve about 50 tokens but cost 100 (echo
		// counts words): the key's minute of 60 is overdrawn on one
		// replica, and the other refuses the next request.
		secret := createKeyCLI(t, bin, rd.URL(), "--name", "tpm", "--tpm", "60")
		prompt := strings.TrimSpace(strings.Repeat("a ", 100))
		if r := keyRequest(t, c, secret, "POST", gw1.url+"/v1/completions", `{"model":"echo","prompt":"`+prompt+`","max_tokens":5}`); r.status != 200 {
			t.Fatalf("first: %d %s", r.status, r.body)
		}
		r := keyRequest(t, c, secret, "POST", gw2.url+"/v1/completions", completion)
		if r.status != 429 || !strings.Contains(r.body, "tokens per minute") || r.header.Get("X-Ratelimit-Remaining-Tokens") != "0" {
			t.Errorf("on the other replica: %d %v %s", r.status, r.header, r.body)
		}
	})

	t.Run("revoked everywhere", func(t *testing.T) {
		// Both replicas have the key cached; `streamgate keys revoke`, a
		// process of its own, reaches them through Redis pub/sub.
		secret := createKeyCLI(t, bin, rd.URL(), "--name", "revoked")
		for _, base := range []string{gw1.url, gw2.url} {
			if r := keyRequest(t, c, secret, "POST", base+"/v1/completions", completion); r.status != 200 {
				t.Fatalf("before revoking, %s: %d %s", base, r.status, r.body)
			}
		}
		revoke := exec.Command(bin, "keys", "revoke", "--redis", rd.URL(), "revoked")
		if out, err := revoke.CombinedOutput(); err != nil {
			t.Fatalf("keys revoke: %v\n%s", err, out)
		}
		revoked := time.Now()
		for _, base := range []string{gw1.url, gw2.url} {
			waitFor(t, "the revocation to reach "+base, func() bool {
				r := keyRequest(t, c, secret, "POST", base+"/v1/completions", completion)
				return r.status == 401 && strings.Contains(r.body, "invalid_api_key")
			})
		}
		t.Logf("both replicas refused the revoked key %v after it was revoked", time.Since(revoked))
	})

	t.Run("redis stopped and restarted", func(t *testing.T) {
		secret := createKeyCLI(t, bin, rd.URL(), "--name", "live", "--rpm", "1000", "--tpm", "100000", "--concurrency", "10")
		st, err := store.Open(rd.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		key, err := st.LookupKey(t.Context(), store.HashSecret(secret))
		if err != nil {
			t.Fatal(err)
		}
		// A stream of 30 events, 100ms apart, runs on each replica.
		body := repeatBody(30, 0, 0, 100)
		type result struct {
			events int
			err    error
		}
		results := make(chan result, 2)
		started := make(chan struct{}, 2)
		for _, base := range []string{gw1.url, gw2.url} {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v2/models/repeat_int32/generate_stream", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+secret)
			resp, err := c.Do(req)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("stream on %s: %v %v", base, resp, err)
			}
			go func() {
				defer resp.Body.Close()
				n := 0
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					if strings.HasPrefix(sc.Text(), "data:") {
						if n++; n == 1 {
							started <- struct{}{}
						}
						if strings.Contains(sc.Text(), `"error"`) {
							results <- result{n, io.ErrUnexpectedEOF}
							return
						}
					}
				}
				results <- result{n, sc.Err()}
			}()
		}
		<-started
		<-started
		rd.Stop()
		start := time.Now()
		if r := keyRequest(t, c, secret, "POST", gw1.url+"/v1/completions", completion); r.status != 503 || r.header.Get("Retry-After") == "" || !strings.Contains(r.body, "unavailable") {
			t.Errorf("with Redis down, closed gw1: %d %s, want 503", r.status, r.body)
		}
		t.Logf("with Redis down, closed gw1 answered 503 in %v", time.Since(start))
		start = time.Now()
		if r := keyRequest(t, c, secret, "POST", gw2.url+"/v1/completions", completion); r.status != 200 || r.header.Get("X-Ratelimit-Limit-Requests") == "" {
			t.Errorf("with Redis down, open gw2 and a cached key: %d %v %s, want 200 within its share", r.status, r.header, r.body)
		}
		t.Logf("with Redis down, open gw2 answered 200 in %v", time.Since(start))
		// An unknown key cannot be checked anywhere: 503.
		if r := keyRequest(t, c, "sg-unknown", "POST", gw2.url+"/v1/completions", completion); r.status != 503 {
			t.Errorf("with Redis down, an uncached key on gw2: %d %s, want 503", r.status, r.body)
		}
		// Under load too: requests at once on both replicas get their
		// replica's answer (closed 503; open 200, or 429 past its share
		// of the key's 10 concurrent streams) and none hangs.
		var wg sync.WaitGroup
		statuses := make(chan int, 20)
		for i := range 20 {
			base := []string{gw1.url, gw2.url}[i%2]
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions",
					strings.NewReader(`{"model":"echo","messages":[{"role":"user","content":"hi"}],"stream":true}`))
				req.Header.Set("Authorization", "Bearer "+secret)
				resp, err := c.Do(req)
				if err != nil {
					statuses <- 0
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				statuses <- resp.StatusCode
			})
		}
		wg.Wait()
		close(statuses)
		got := map[int]int{}
		for st := range statuses {
			got[st]++
		}
		if got[503] != 10 || got[200] == 0 || got[200]+got[429] != 10 {
			t.Errorf("requests under load with Redis down, by status: %v, want 10 503s (gw1) and 200s or 429s (gw2)", got)
		}
		// The streams that were running flow on to their end.
		for range 2 {
			if r := <-results; r.err != nil || r.events != 30 {
				t.Errorf("a stream running while Redis died: %d events, %v", r.events, r.err)
			}
		}
		if n := metric(t, c, gw1.url, `streamgate_gateway_store_errors_total{op="limits"}`); n < 1 {
			t.Errorf("store errors on gw1: %v", n)
		}
		if n := metric(t, c, gw2.url, `streamgate_gateway_limits_local_total{result="admitted"}`); n < 1 {
			t.Errorf("local admissions on gw2: %v", n)
		}
		// Redis returns (empty: the test's Redis keeps nothing): with the
		// key back, both replicas serve it again by themselves.
		rd.Restart()
		if err := st.CreateKey(t.Context(), key); err != nil {
			t.Fatal(err)
		}
		back := time.Now()
		for _, base := range []string{gw1.url, gw2.url} {
			waitFor(t, "the gateway to use Redis again", func() bool {
				return keyRequest(t, c, secret, "POST", base+"/v1/completions", completion).status == 200
			})
		}
		t.Logf("both replicas served the key again %v after Redis was back", time.Since(back))
	})
}
