package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/gateway"
	"github.com/streamgate/streamgate/gateway/store"
	"github.com/streamgate/streamgate/gateway/store/redistest"
	"github.com/streamgate/streamgate/gateway/ws"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// The hostile-tenant suite: two gateway replicas share one real Redis,
// and a tenant holding one key (or none, on an open gateway) tries what
// the security review of issue 33 found: resumes on a socket whose key
// was revoked or has expired, or past the key's limits; guessing ids;
// inflating storage with previous_response_id chains; tokens on routes
// tpm did not count; models on routes --models did not restrict; and
// requests from other sites to an open gateway.

// hostileSet is two replicas with API keys on one Redis, and the store
// client the test manages keys with.
type hostileSet struct {
	st   store.Store
	a, b *testStack
}

func startHostile(t *testing.T, opts func(*gateway.Options)) *hostileSet {
	t.Helper()
	rd := redistest.Start(t)
	open := func() store.Store {
		st, err := store.Open(rd.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	replica := func() *testStack {
		st := open()
		o := &gateway.Options{Store: st, Keys: st}
		if opts != nil {
			opts(o)
		}
		return newStack(t, o, func(c *stack.Config) {
			// echo answering once: a text model /infer can run.
			one := echoSlowConfig(t)
			one.Name, one.Parameters = "echo_one", nil
			one.ModelTransactionPolicy = &pb.ModelTransactionPolicy{Decoupled: false}
			c.Engine.Extra = append(c.Engine.Extra, one)
		})
	}
	return &hostileSet{st: open(), a: replica(), b: replica()}
}

// dialKeyed opens /v1/ws on s with the key secret.
func dialKeyed(t *testing.T, s *testStack, secret string) *websocket.Conn {
	t.Helper()
	c, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(s.url, "http")+"/v1/ws",
		&websocket.DialOptions{Subprotocols: []string{ws.Subprotocol, "streamgate.key." + secret}})
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(1 << 22)
	t.Cleanup(func() { c.CloseNow() })
	return c
}

// resumableStream runs a short resumable completion on s with the key
// secret to its end and returns its stream id.
func resumableStream(t *testing.T, s *testStack, secret string) string {
	t.Helper()
	h := bearer(secret)
	h.Set("Streamgate-Resumable", "true")
	resp, body := s.do(t, http.MethodPost, "/v1/completions",
		[]byte(`{"model":"echo","prompt":"one two three","max_tokens":3,"stream":true}`), h)
	sid := resp.Header.Get("Streamgate-Stream-Id")
	if resp.StatusCode != 200 || sid == "" {
		t.Fatalf("resumable stream: %d %q %s", resp.StatusCode, sid, body)
	}
	return sid
}

// lastFrame sends frame on c and returns the request's terminal frame.
func lastFrame(t *testing.T, c *websocket.Conn, frame string) string {
	t.Helper()
	frames := wsAsk(t, c, frame)
	return frames[len(frames)-1]
}

func TestHostileTenant(t *testing.T) {
	hs := startHostile(t, nil)
	ctx := t.Context()

	t.Run("resume frames recheck the key", func(t *testing.T) {
		secret := addKey(t, hs.st, "revoked-on-socket", store.Limit{})
		sid := resumableStream(t, hs.a, secret)
		c := dialKeyed(t, hs.b, secret)
		resume := fmt.Sprintf(`{"type":"resume","id":"r","stream":%q}`, sid)
		if f := lastFrame(t, c, resume); !strings.Contains(f, `"type":"done"`) {
			t.Fatalf("resume with a live key: %s", f)
		}
		if err := hs.st.RevokeKey(ctx, "revoked-on-socket"); err != nil {
			t.Fatal(err)
		}
		// hs.st is another Redis client than b's: the revocation reaches
		// b's key cache through pub/sub, within about a second. Once a
		// new request on b is refused, a resume on the open socket must be
		// too.
		waitFor(t, "the revocation to reach replica b", func() bool {
			resp, _ := hs.b.do(t, http.MethodGet, "/v1/models", nil, bearer(secret))
			return resp.StatusCode == http.StatusUnauthorized
		})
		if f := lastFrame(t, c, resume); !strings.Contains(f, `"code":"invalid_api_key"`) {
			t.Errorf("resume after the key was revoked: %s", f)
		}
	})

	t.Run("resume frames stop when the key expires", func(t *testing.T) {
		k, secret, err := store.NewKey("expiring-on-socket", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		k.Expires = time.Now().Add(time.Second)
		if err := hs.st.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		sid := resumableStream(t, hs.a, secret)
		c := dialKeyed(t, hs.b, secret)
		resume := fmt.Sprintf(`{"type":"resume","id":"r","stream":%q}`, sid)
		waitFor(t, "the key to expire", func() bool { return time.Now().After(k.Expires) })
		if f := lastFrame(t, c, resume); !strings.Contains(f, `"code":"invalid_api_key"`) || !strings.Contains(f, "expired") {
			t.Errorf("resume after the key expired: %s", f)
		}
	})

	t.Run("resume frames count against rpm", func(t *testing.T) {
		secret := addKey(t, hs.st, "resume-rpm", store.Limit{RPM: 3})
		sid := resumableStream(t, hs.a, secret) // the first request of the minute
		c := dialKeyed(t, hs.b, secret)
		resume := fmt.Sprintf(`{"type":"resume","id":"r","stream":%q}`, sid)
		for i := range 2 {
			if f := lastFrame(t, c, resume); !strings.Contains(f, `"type":"done"`) {
				t.Fatalf("resume %d: %s", i+1, f)
			}
		}
		if f := lastFrame(t, c, resume); !strings.Contains(f, `"code":"rate_limit_exceeded"`) {
			t.Errorf("the fourth request of a key with rpm 3: %s", f)
		}
	})

	t.Run("ids cannot be guessed", func(t *testing.T) {
		secret := addKey(t, hs.st, "ids", store.Limit{})
		var ids []string
		for range 2 {
			resp, body := hs.a.do(t, http.MethodPost, "/v1/responses", []byte(`{"model":"echo","input":"one two","max_output_tokens":2}`), bearer(secret))
			var r struct{ ID string }
			if err := json.Unmarshal(body, &r); err != nil || resp.StatusCode != 200 {
				t.Fatalf("response: %d %s", resp.StatusCode, body)
			}
			ids = append(ids, r.ID, resp.Header.Get("X-Request-Id"))
		}
		// A request refused at the door names itself too.
		resp, _ := hs.b.do(t, http.MethodGet, "/v1/models", nil, bearer("sg-nope"))
		ids = append(ids, resp.Header.Get("X-Request-Id"))
		// Each id is a kind and 128 random bits: 32 hex digits, no part
		// shared with another id (the old ids shared a 12-digit prefix
		// and counted up).
		shape := regexp.MustCompile(`^(resp|req)-[0-9a-f]{32}$`)
		for i, id := range ids {
			if !shape.MatchString(id) {
				t.Errorf("id %q: want resp- or req- and 32 hex digits", id)
				continue
			}
			_, a, _ := strings.Cut(id, "-")
			for _, other := range ids[:i] {
				_, b, _ := strings.Cut(other, "-")
				if n := commonPrefix(a, b); n >= 6 {
					t.Errorf("ids %s and %s share %d leading digits", other, id, n)
				}
			}
		}
	})

	t.Run("a chain stores its history once", func(t *testing.T) {
		secret := addKey(t, hs.st, "chain", store.Limit{})
		big := strings.Repeat("word ", 20000) // 100 KB
		id := createStored(t, hs.a, secret, `{"model":"echo","input":"`+big+`","max_output_tokens":2}`, 200)
		first := storedBytes(t, hs.st, id)
		for i := range 10 {
			s := []*testStack{hs.a, hs.b}[i%2]
			id = createStored(t, s, secret, `{"model":"echo","input":"more","max_output_tokens":2,"previous_response_id":"`+id+`"}`, 200)
			if n := storedBytes(t, hs.st, id); n > 4<<10 {
				t.Fatalf("turn %d after a %d-byte first turn stored %d bytes", i+2, first, n)
			}
		}
	})

	t.Run("stored responses count against the key's budget", func(t *testing.T) {
		k, secret, err := store.NewKey("budget", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		k.Storage = 250_000
		if err := hs.st.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		body := `{"model":"echo","input":"` + strings.Repeat("word ", 20000) + `","max_output_tokens":2}`
		a := createStored(t, hs.a, secret, body, 200)
		createStored(t, hs.b, secret, body, 200)
		resp, got := hs.a.do(t, http.MethodPost, "/v1/responses", []byte(body), bearer(secret))
		if resp.StatusCode != 400 || !strings.Contains(string(got), `"code":"storage_limit_exceeded"`) ||
			!strings.Contains(string(got), `"param":"store"`) || !strings.Contains(string(got), "250000 bytes") {
			t.Fatalf("a third 100 KB response in a 250 KB budget: %d %s", resp.StatusCode, got)
		}
		// Not stored, it runs; another key has its own budget.
		if resp, got := hs.a.do(t, http.MethodPost, "/v1/responses", []byte(strings.Replace(body, `{`, `{"store":false,`, 1)), bearer(secret)); resp.StatusCode != 200 {
			t.Errorf("store false: %d %s", resp.StatusCode, got)
		}
		other := addKey(t, hs.st, "budget-other", store.Limit{})
		createStored(t, hs.b, other, body, 200)
		// A deleted response gives its bytes back.
		if resp, got := hs.b.do(t, http.MethodDelete, "/v1/responses/"+a, nil, bearer(secret)); resp.StatusCode != 200 {
			t.Fatalf("delete: %d %s", resp.StatusCode, got)
		}
		createStored(t, hs.a, secret, body, 200)
	})

	t.Run("tpm counts every route that generates tokens", func(t *testing.T) {
		// 100 words reserve about 150 tokens of a minute of 60 (one
		// request may take the whole minute) and cost more (echo counts
		// words): the next request of the key, on the other replica, is
		// refused, whatever the routes.
		prompt := strings.TrimSpace(strings.Repeat("a ", 100))
		sampling := `"sampling_parameters":"{\"max_tokens\":100}"`
		generate := `{"text_input":"` + prompt + `",` + sampling + `}`
		infer := `{"inputs":[{"name":"text_input","shape":[1],"datatype":"BYTES","data":["` + prompt + `"]}]}`
		routes := []struct{ name, path, body string }{
			{"generate", "/v2/models/echo/generate", strings.Replace(generate, `{`, `{"stream":false,`, 1)},
			{"generate_stream", "/v2/models/echo/generate_stream", generate},
			{"infer", "/v2/models/echo_one/infer", infer},
		}
		for _, r := range routes {
			secret := addKey(t, hs.st, "tpm-"+r.name, store.Limit{TPM: 60})
			resp, got := hs.a.do(t, http.MethodPost, r.path, []byte(r.body), bearer(secret))
			if resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Limit-Tokens") != "60" {
				t.Fatalf("%s: %d %v %s", r.name, resp.StatusCode, resp.Header, got)
			}
			resp, got = hs.b.do(t, http.MethodPost, r.path, []byte(r.body), bearer(secret))
			if resp.StatusCode != 429 || !strings.Contains(string(got), "tokens per minute") || resp.Header.Get("X-Ratelimit-Remaining-Tokens") != "0" {
				t.Errorf("%s again: %d %v %s", r.name, resp.StatusCode, resp.Header, got)
			}
		}
		secret := addKey(t, hs.st, "tpm-ws", store.Limit{TPM: 60})
		c := dialKeyed(t, hs.b, secret)
		frame := `{"type":"generate","id":"g","model":"echo","body":` + generate + `}`
		if f := lastFrame(t, c, frame); !strings.Contains(f, `"type":"done"`) {
			t.Fatalf("ws generate: %s", f)
		}
		if f := lastFrame(t, c, frame); !strings.Contains(f, `"code":"rate_limit_exceeded"`) || !strings.Contains(f, "tokens per minute") {
			t.Errorf("ws generate again: %s", f)
		}
	})

	t.Run("a key limited to some models sees no others", func(t *testing.T) {
		secret := addKey(t, hs.st, "echo-only", store.Limit{}, "echo")
		h := bearer(secret)
		for _, path := range []string{"/v2/models/repeat_int32", "/v2/models/repeat_int32/versions/1", "/v2/models/repeat_int32/config"} {
			resp, got := hs.a.do(t, http.MethodGet, path, nil, h)
			if resp.StatusCode != 404 || !strings.Contains(string(got), "unknown model") {
				t.Errorf("%s: %d %s", path, resp.StatusCode, got)
			}
		}
		// Statistics answer as for a model upstream does not have.
		for _, path := range []string{"/v2/models/repeat_int32/stats", "/v2/models/repeat_int32/versions/1/stats"} {
			resp, got := hs.a.do(t, http.MethodGet, path, nil, h)
			if resp.StatusCode != 400 || !strings.Contains(string(got), "not available") {
				t.Errorf("%s: %d %s", path, resp.StatusCode, got)
			}
		}
		for _, path := range []string{"/v2/models/repeat_int32/ready", "/v2/models/repeat_int32/versions/1/ready"} {
			if resp, got := hs.a.do(t, http.MethodGet, path, nil, h); resp.StatusCode != 503 {
				t.Errorf("%s: %d %s", path, resp.StatusCode, got)
			}
		}
		if resp, got := hs.b.do(t, http.MethodGet, "/v2/models/echo/ready", nil, h); resp.StatusCode != 200 {
			t.Errorf("its own model ready: %d %s", resp.StatusCode, got)
		}
		if resp, got := hs.b.do(t, http.MethodGet, "/v2/models/echo/config", nil, h); resp.StatusCode != 200 {
			t.Errorf("its own model's config: %d %s", resp.StatusCode, got)
		}
		// Lists and statistics name its models only.
		resp, got := hs.b.do(t, http.MethodPost, "/v2/repository/index", []byte(`{}`), h)
		var index []struct{ Name string }
		if err := json.Unmarshal(got, &index); err != nil || resp.StatusCode != 200 || len(index) != 1 || index[0].Name != "echo" {
			t.Errorf("repository index: %d %s", resp.StatusCode, got)
		}
		resp, got = hs.b.do(t, http.MethodGet, "/v2/models/stats", nil, h)
		var stats struct {
			ModelStats []struct{ Name string } `json:"model_stats"`
		}
		if err := json.Unmarshal(got, &stats); err != nil || resp.StatusCode != 200 {
			t.Fatalf("stats: %d %s", resp.StatusCode, got)
		}
		for _, m := range stats.ModelStats {
			if m.Name != "echo" {
				t.Errorf("stats of every model name %s", m.Name)
			}
		}
		// A key allowed every model sees them all.
		all := addKey(t, hs.st, "all-models", store.Limit{})
		_, got = hs.b.do(t, http.MethodPost, "/v2/repository/index", []byte(`{}`), bearer(all))
		if err := json.Unmarshal(got, &index); err != nil || len(index) < 4 {
			t.Errorf("repository index of a key allowed every model: %s", got)
		}
		// Model ready needs a key, as every /v2/models route does; the
		// health routes stay open for probes.
		if resp, _ := hs.a.do(t, http.MethodGet, "/v2/models/echo/ready", nil, nil); resp.StatusCode != 401 {
			t.Errorf("model ready without a key: %d", resp.StatusCode)
		}
	})
}

// An open gateway (no keys, the default) answers only its own names:
// a page whose name the attacker rebinds to 127.0.0.1 gets 403, on every
// route and on /v1/ws; a page of another site cannot send the simple
// (preflight-free) bodies a browser lets it send anywhere; a page of an
// allowed origin may call the HTTP routes and open /v1/ws alike.
func TestHostileSites(t *testing.T) {
	s := newStack(t, &gateway.Options{CORSOrigins: []string{"https://app.example"}, AllowedHosts: []string{"gw.example"}})
	_, port, _ := strings.Cut(s.addr, ":")
	chat := `{"model":"echo","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
	send := func(method, path, body string, header ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, s.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			if header[i] == "Host" {
				req.Host = header[i+1]
			} else {
				req.Header.Set(header[i], header[i+1])
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	t.Run("rebinding", func(t *testing.T) {
		for _, path := range []string{"/v1/models", "/v2", "/v2/models/echo", "/healthz", "/"} {
			if code, body := send(http.MethodGet, path, "", "Host", "rebind.evil.example:"+port); code != 403 || (path != "/" && path != "/healthz" && !strings.Contains(body, "not allowed")) {
				t.Errorf("GET %s with a rebound Host: %d %s", path, code, body)
			}
		}
		code, body := send(http.MethodPost, "/v1/chat/completions", chat, "Host", "rebind.evil.example", "Origin", "http://rebind.evil.example")
		if code != 403 || !strings.Contains(body, `"code":"host_not_allowed"`) {
			t.Errorf("chat with a rebound Host: %d %s", code, body)
		}
		for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port, "app.localhost:" + port, "10.1.2.3", "gw.example:" + port, "GW.example"} {
			if code, body := send(http.MethodPost, "/v1/chat/completions", chat, "Host", host); code != 200 {
				t.Errorf("Host %s: %d %s", host, code, body)
			}
		}
		// The socket too: a rebound page's origin is "the same" as the
		// rebound Host, so the Host decides.
		h := http.Header{"Origin": {"http://rebind.evil.example:" + port}}
		c, resp, err := websocket.Dial(t.Context(), "ws://"+s.addr+"/v1/ws", &websocket.DialOptions{
			Subprotocols: []string{ws.Subprotocol}, HTTPHeader: h, Host: "rebind.evil.example:" + port})
		if err == nil {
			c.CloseNow()
			t.Errorf("a WebSocket with a rebound Host opened")
		} else if resp == nil || resp.StatusCode != 403 {
			t.Errorf("a WebSocket with a rebound Host: %v %v", resp, err)
		}
	})

	t.Run("simple bodies", func(t *testing.T) {
		for _, tc := range []struct{ ct, origin string }{
			{"text/plain", ""},
			{"text/plain;charset=UTF-8", "https://evil.example"},
			{"multipart/form-data; boundary=x", ""},
			{"application/x-www-form-urlencoded", "https://evil.example"},
			{"", "https://evil.example"},
		} {
			for _, path := range []string{"/v1/chat/completions", "/v2/models/echo/generate"} {
				code, body := send(http.MethodPost, path, chat, "Content-Type", tc.ct, "Origin", tc.origin)
				if code != 415 || !strings.Contains(body, "application/json") {
					t.Errorf("%s as %q from %q: %d %s", path, tc.ct, tc.origin, code, body)
				}
			}
		}
		// curl -d sends a form type: without a browser's Origin, or from
		// the gateway's own or an allowed origin, it is served as JSON.
		for _, origin := range []string{"", "http://localhost:" + port, "https://app.example"} {
			if code, body := send(http.MethodPost, "/v1/chat/completions", chat, "Content-Type", "application/x-www-form-urlencoded", "Origin", origin, "Host", "localhost:"+port); code != 200 {
				t.Errorf("a form type from %q: %d %s", origin, code, body)
			}
		}
	})

	t.Run("one origins list for CORS and the WebSocket", func(t *testing.T) {
		for origin, want := range map[string]bool{"https://app.example": true, "https://evil.example": false} {
			c, resp, err := websocket.Dial(t.Context(), "ws://"+s.addr+"/v1/ws", &websocket.DialOptions{
				Subprotocols: []string{ws.Subprotocol}, HTTPHeader: http.Header{"Origin": {origin}}})
			if err == nil {
				c.CloseNow()
			}
			if got := err == nil; got != want || !want && (resp == nil || resp.StatusCode != 403) {
				t.Errorf("a WebSocket from %s: opened %v, want %v (%v)", origin, got, want, err)
			}
		}
	})
}

// createStored creates a stored response on s with the key secret and
// returns its id, failing unless the answer has status want.
func createStored(t *testing.T, s *testStack, secret, body string, want int) string {
	t.Helper()
	resp, got := s.do(t, http.MethodPost, "/v1/responses", []byte(body), bearer(secret))
	var r struct{ ID string }
	if err := json.Unmarshal(got, &r); err != nil || resp.StatusCode != want {
		t.Fatalf("POST /v1/responses: %d %.300s", resp.StatusCode, got)
	}
	return r.ID
}

// storedBytes is the size of stored response id's record.
func storedBytes(t *testing.T, st store.Store, id string) int {
	t.Helper()
	rec, err := st.GetResponse(t.Context(), id)
	if err != nil {
		t.Fatalf("response %s: %v", id, err)
	}
	return len(rec.Object) + len(rec.Data)
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
