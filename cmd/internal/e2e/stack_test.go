package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/engine/builtin"
	"github.com/streamgate/streamgate/gateway"
	"github.com/streamgate/streamgate/gateway/sse"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/upstream"
)

// testStack is what `streamgate serve` runs, wired by cmd/internal/stack,
// in this process so that a test can watch the engine's work
// (eng.InFlight), drain the gateway and read upstream's counters: the
// engine with the built-in models and echo_slow on a loopback gRPC port,
// the upstream client and the gateway on a loopback HTTP port.
type testStack struct {
	*stack.Stack
	eng  *engine.Server
	up   *upstream.Client
	gw   *gateway.Server
	addr string // the gateway, host:port
	url  string // http://addr, or https://addr with TLS
	logs *syncBuffer
	// roots are the CAs of the gateway's TLS certificate, nil without
	// TLS (see withTLS).
	roots *x509.CertPool
}

// client is a client of this test's own (see httpClient) that trusts the
// gateway's TLS certificate, speaking HTTP/2 where the gateway offers it.
func (s *testStack) client(t *testing.T) *http.Client {
	c := httpClient(t)
	if s.roots != nil {
		tr := c.Transport.(*http.Transport)
		tr.TLSClientConfig = &tls.Config{RootCAs: s.roots}
		tr.ForceAttemptHTTP2 = true
	}
	return c
}

// newStack starts a stack whose gateway has opts (nil: the defaults);
// each change adjusts the stack's Config first. It logs to a buffer shown
// when the test fails, and stops when the test ends, ending whatever is
// still running.
func newStack(t testing.TB, opts *gateway.Options, change ...func(*stack.Config)) *testStack {
	t.Helper()
	if opts == nil {
		opts = &gateway.Options{}
	}
	logs := &syncBuffer{}
	cfg := stack.Config{
		Engine:  &engine.Options{Repository: builtin.FS, Backends: builtin.Backends(), Extra: []*pb.ModelConfig{echoSlowConfig(t)}},
		Gateway: opts,
		Logger:  slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	for _, c := range change {
		c(&cfg)
	}
	// The suite runs over either stream transport of the upstream client.
	if tr := os.Getenv("STREAMGATE_UPSTREAM_TRANSPORT"); tr != "" {
		uo := upstream.Options{}
		if cfg.UpstreamOptions != nil {
			uo = *cfg.UpstreamOptions
		}
		if uo.Transport == "" {
			uo.Transport = tr
		}
		cfg.UpstreamOptions = &uo
	}
	st, err := stack.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &testStack{Stack: st, eng: st.Engine, up: st.Upstream, gw: st.Gateway, addr: st.HTTPAddr, url: st.URL(), logs: logs}
	t.Cleanup(func() {
		st.StopNow()
		if t.Failed() {
			t.Logf("streamgate log:\n%s", tail(logs.String(), 16<<10))
		}
	})
	return s
}

// echoSlowConfig is the built-in echo model as "echo_slow", sleeping 20ms
// before each word: long prompts take long enough to be cancelled midway.
func echoSlowConfig(t testing.TB) *pb.ModelConfig {
	return echoConfig(t, "echo_slow", map[string]string{"delay_ms": "20"})
}

// echoConfig is the built-in echo model renamed, with config parameters.
func echoConfig(t testing.TB, name string, params map[string]string) *pb.ModelConfig {
	cfg := builtinConfig(t, "echo")
	cfg.Name = name
	cfg.Parameters = map[string]*pb.ModelParameter{}
	for k, v := range params {
		cfg.Parameters[k] = &pb.ModelParameter{StringValue: v}
	}
	return cfg
}

// words returns n words: "w0 w1 ...".
func words(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("w" + strconv.Itoa(i))
	}
	return b.String()
}

// post sends body to path and returns the response with its body read.
func (s *testStack) post(t testing.TB, path, body string) (*http.Response, string) {
	t.Helper()
	resp, b := s.do(t, http.MethodPost, path, []byte(body), http.Header{"Content-Type": {"application/json"}})
	return resp, string(b)
}

// do sends a request with header and body (nil: none), reads the answer
// and checks it against openapi.yaml.
func (s *testStack) do(t testing.TB, method, path string, body []byte, header http.Header) (*http.Response, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, s.url+path, r)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if h := header.Get("Host"); h != "" {
		req.Host = h
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	loadSpec(t).checkResponse(t, s.gw.Handler().(chi.Routes), method, path, resp, b)
	return resp, b
}

func (s *testStack) get(t testing.TB, path string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(s.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	loadSpec(t).checkResponse(t, s.gw.Handler().(chi.Routes), http.MethodGet, path, resp, b)
	return resp, string(b)
}

// events parses an SSE body into its data payloads, failing on anything
// that is not an event or a keepalive comment.
func events(t testing.TB, body string) []string {
	t.Helper()
	var out []string
	for _, ev := range sseEvents(t, body) {
		out = append(out, ev.Data)
	}
	return out
}

// sseEvents parses a whole event-stream body into its events, comments
// left out.
func sseEvents(t testing.TB, body string) []sse.Event {
	t.Helper()
	r := sse.NewReader(strings.NewReader(body))
	var out []sse.Event
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("bad SSE body %q: %v", body, err)
		}
		if !ev.IsComment {
			out = append(out, ev)
		}
	}
}

// waitHang is how long a wait for an event lasts before the test calls
// it a hang: a guard, not a timing bound. A saturated machine (load 20-30
// on two cores, under the race detector) may take many seconds for what
// takes milliseconds on a quiet one.
const waitHang = 2 * time.Minute

// waitFor polls cond until it holds, and fails the test if it still does
// not after waitHang.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitHang)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitHang, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// noKeepAlive makes streams byte-exact: no ": keepalive" comments.
func noKeepAlive() *gateway.Options {
	return &gateway.Options{SSE: &sse.Options{KeepAlive: -1}}
}

func fixedNow() time.Time { return time.Unix(1700000000, 0) }
