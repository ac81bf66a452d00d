package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/coder/websocket"
	"github.com/go-chi/chi/v5"
	"golang.org/x/net/http2"

	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/cmd/internal/tlsfiles"
	"github.com/streamgate/streamgate/cmd/internal/tlsfiles/tlstest"
	"github.com/streamgate/streamgate/gateway"
	"github.com/streamgate/streamgate/gateway/sse"
	"github.com/streamgate/streamgate/gateway/ws"
	"github.com/streamgate/streamgate/upstream/rawsock"
)

// testCerts are a test's throwaway CA and the gateway's certificate
// files, signed by it.
type testCerts struct {
	ca         *tlstest.CA
	dir        string
	caFile     string
	cert, key  string // the gateway's pair
	serverCert *tlstest.Cert
}

func newTestCerts(t *testing.T) *testCerts {
	t.Helper()
	ca := tlstest.NewCA(t, "streamgate test CA")
	dir := t.TempDir()
	c := &testCerts{ca: ca, dir: dir, caFile: ca.WriteFile(t, dir, "ca.crt")}
	c.serverCert = ca.Issue(t, tlstest.Options{Name: "first"})
	c.cert, c.key = c.serverCert.WriteFiles(t, dir, "gateway")
	return c
}

// withTLS makes a stack's gateway serve HTTPS with c's pair as
// --tls-cert and --tls-key configure it, and with --tls-client-ca c's CA
// when mtls.
func (c *testCerts) withTLS(t *testing.T, mtls bool) func(*stack.Config) {
	return func(cfg *stack.Config) {
		f := tlsfiles.ServerFiles{Cert: c.cert, Key: c.key}
		if mtls {
			f.ClientCA = c.caFile
		}
		tc, err := f.Config(cfg.Logger)
		if err != nil {
			t.Fatal(err)
		}
		cfg.TLS = tc
	}
}

// tlsStack is newStack with the gateway on HTTPS (see withTLS).
func (c *testCerts) tlsStack(t *testing.T, opts *gateway.Options, mtls bool, change ...func(*stack.Config)) *testStack {
	t.Helper()
	s := newStack(t, opts, append([]func(*stack.Config){c.withTLS(t, mtls)}, change...)...)
	s.roots = c.ca.Pool()
	return s
}

// client is an HTTPS client of its own trusting c's CA, presenting cert
// when not nil (whichever CAs the server asks for), speaking HTTP/2 and
// HTTP/1.1.
func (c *testCerts) client(t *testing.T, cert *tlstest.Cert) *http.Client {
	cfg := &tls.Config{RootCAs: c.ca.Pool()}
	if cert != nil {
		tc := cert.TLS()
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &tc, nil }
	}
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	tr := &http.Transport{TLSClientConfig: cfg, Protocols: p, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// routeRequest is one request that exercises a route.
type routeRequest struct {
	method, path, body string
	eventStream        bool
}

// routeRequests are the requests TestTLSEveryRoute sends, by route
// pattern as the router names it.
var routeRequests = map[string]routeRequest{
	"GET /":                        {method: "GET", path: "/"},
	"GET /healthz":                 {method: "GET", path: "/healthz"},
	"GET /readyz":                  {method: "GET", path: "/readyz"},
	"GET /metrics":                 {method: "GET", path: "/metrics"},
	"GET /v2":                      {method: "GET", path: "/v2"},
	"GET /v2/health/live":          {method: "GET", path: "/v2/health/live"},
	"GET /v2/health/ready":         {method: "GET", path: "/v2/health/ready"},
	"GET /v1/models":               {method: "GET", path: "/v1/models"},
	"GET /v1/models/{id}":          {method: "GET", path: "/v1/models/echo"},
	"GET /v2/models/{model}":       {method: "GET", path: "/v2/models/square_int32"},
	"GET /v2/models/{model}/ready": {method: "GET", path: "/v2/models/square_int32/ready"},
	"GET /v2/models/{model}/versions/{version}":           {method: "GET", path: "/v2/models/square_int32/versions/1"},
	"GET /v2/models/{model}/versions/{version}/ready":     {method: "GET", path: "/v2/models/square_int32/versions/1/ready"},
	"POST /v2/models/{model}/generate":                    {method: "POST", path: "/v2/models/identity_int32/generate", body: `{"INPUT0":[1,2]}`},
	"POST /v2/models/{model}/versions/{version}/generate": {method: "POST", path: "/v2/models/identity_int32/versions/1/generate", body: `{"INPUT0":[3]}`},
	"POST /v2/models/{model}/generate_stream": {method: "POST", path: "/v2/models/repeat_int32/generate_stream",
		body: repeatBody(3, 10, 0, 10), eventStream: true},
	"POST /v2/models/{model}/versions/{version}/generate_stream": {method: "POST", path: "/v2/models/square_int32/versions/1/generate_stream",
		body: `{"IN":3}`, eventStream: true},
	"POST /v1/chat/completions": {method: "POST", path: "/v1/chat/completions", eventStream: true,
		body: `{"model":"echo","stream":true,"messages":[{"role":"user","content":"over TLS"}]}`},
	"POST /v1/completions": {method: "POST", path: "/v1/completions", body: `{"model":"echo","prompt":"over TLS"}`},
	"POST /v2/models/{model}/infer": {method: "POST", path: "/v2/models/identity_int32/infer",
		body: `{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"INT32","data":[1]}]}`},
	"POST /v2/models/{model}/versions/{version}/infer": {method: "POST", path: "/v2/models/identity_int32/versions/1/infer",
		body: `{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"INT32","data":[2]}]}`},
}

// Every route works over TLS, on HTTP/2 negotiated by ALPN (event streams
// included), and /v1/ws over wss:// (an HTTP/1.1 upgrade on a connection
// of its own). Routes added since this table was written are still sent a
// request, with their parameters filled in, and must answer it over
// HTTP/2 without a server error.
func TestTLSEveryRoute(t *testing.T) {
	certs := newTestCerts(t)
	s := certs.tlsStack(t, nil, false)
	if !strings.HasPrefix(s.url, "https://") {
		t.Fatalf("stack URL %s", s.url)
	}
	c := certs.client(t, nil)
	routes := s.gw.Handler().(chi.Routes)
	err := chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		key := method + " " + route
		if key == "GET /v1/ws" {
			t.Run(key, func(t *testing.T) { checkWSS(t, s, c) })
			return nil
		}
		rr, known := routeRequests[key]
		if !known {
			rr = routeRequest{method: method, path: fillPattern(route), body: "{}"}
		}
		t.Run(key, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), rr.method, s.url+rr.path, strings.NewReader(rr.body))
			if err != nil {
				t.Fatal(err)
			}
			if rr.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.Proto != "HTTP/2.0" || resp.TLS == nil || resp.TLS.NegotiatedProtocol != "h2" || resp.TLS.Version < tls.VersionTLS12 {
				t.Errorf("%s over %s (ALPN %q)", rr.path, resp.Proto, resp.TLS.NegotiatedProtocol)
			}
			switch {
			case !known && resp.StatusCode >= 500:
				t.Errorf("%s %s: %d %s", rr.method, rr.path, resp.StatusCode, body)
			case known && resp.StatusCode != http.StatusOK:
				t.Errorf("%s %s: %d %s", rr.method, rr.path, resp.StatusCode, body)
			}
			if rr.eventStream {
				if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
					t.Errorf("Content-Type %q", ct)
				}
				if evs := events(t, string(body)); len(evs) == 0 {
					t.Errorf("no events: %q", body)
				}
			}
			loadSpec(t).checkResponse(t, routes, rr.method, rr.path, resp, body)
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// A client that offers only HTTP/1.1 is served too.
	h1 := certs.client(t, nil)
	h1.Transport.(*http.Transport).Protocols.SetHTTP2(false)
	resp, err := h1.Post(s.url+"/v2/models/repeat_int32/generate_stream", "application/json", strings.NewReader(repeatBody(2, 0, 0, 0)))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Proto != "HTTP/1.1" || resp.StatusCode != 200 || len(events(t, string(body))) != 2 {
		t.Errorf("HTTP/1.1 client: %s %d %q", resp.Proto, resp.StatusCode, body)
	}
}

// fillPattern puts a value in each {param} of a route pattern.
func fillPattern(route string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(route, '{')
		if i < 0 {
			b.WriteString(route)
			return b.String()
		}
		j := strings.IndexByte(route[i:], '}')
		b.WriteString(route[:i])
		switch route[i+1 : i+j] {
		case "model", "id":
			b.WriteString("identity_int32")
		case "version":
			b.WriteString("1")
		default:
			b.WriteString("x")
		}
		route = route[i+j+1:]
	}
}

// checkWSS runs a request on /v1/ws over wss:// with c, the same client
// the HTTP/2 requests use: the upgrade goes over HTTP/1.1.
func checkWSS(t *testing.T, s *testStack, c *http.Client) {
	conn, resp, err := websocket.Dial(t.Context(), "wss"+strings.TrimPrefix(s.url, "https")+"/v1/ws",
		&websocket.DialOptions{HTTPClient: c, Subprotocols: []string{ws.Subprotocol}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Proto != "HTTP/1.1" || conn.Subprotocol() != ws.Subprotocol {
		t.Fatalf("upgrade: %d %s %q", resp.StatusCode, resp.Proto, conn.Subprotocol())
	}
	wsSend(t, conn, `{"type":"generate","id":"a","model":"square_int32","body":{"IN":4}}`)
	got := wsReadToEnd(t, conn)
	want := []string{
		`{"type":"data","id":"a","seq":0,"data":{"model_name":"square_int32","model_version":"1","OUT":4}}`,
		`{"type":"data","id":"a","seq":1,"data":{"model_name":"square_int32","model_version":"1","OUT":4}}`,
		`{"type":"data","id":"a","seq":2,"data":{"model_name":"square_int32","model_version":"1","OUT":4}}`,
		`{"type":"data","id":"a","seq":3,"data":{"model_name":"square_int32","model_version":"1","OUT":4}}`,
		`{"type":"done","id":"a","reason":"final"}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	conn.Close(websocket.StatusNormalClosure, "")
}

// A certificate rotated on disk is what the next connection gets, with no
// restart; a stream on a connection made before keeps going.
func TestTLSCertificateRotation(t *testing.T) {
	certs := newTestCerts(t)
	s := certs.tlsStack(t, nil, false)

	old := certs.client(t, nil)
	resp, err := old.Post(s.url+"/v2/models/repeat_int32/generate_stream", "application/json", strings.NewReader(repeatBody(3, 0, 0, 200)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if cn := resp.TLS.PeerCertificates[0].Subject.CommonName; cn != "first" {
		t.Fatalf("serving %q", cn)
	}
	r := sse.NewReader(resp.Body)
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}

	// Renamed over the old files, as a Kubernetes secret volume or
	// certbot does.
	certs.ca.Issue(t, tlstest.Options{Name: "second"}).WriteFiles(t, certs.dir, "gateway")

	next := certs.client(t, nil)
	resp2, err := next.Get(s.url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp2.Body)
	resp2.Body.Close()
	if cn := resp2.TLS.PeerCertificates[0].Subject.CommonName; cn != "second" {
		t.Fatalf("the next connection got %q, want the rotated certificate", cn)
	}
	n := 1
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the stream on the old connection: %v", err)
		}
		if !ev.IsComment {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("the old connection's stream delivered %d events, want 3", n)
	}
	if !strings.Contains(s.logs.String(), "TLS certificate reloaded") {
		t.Error("the reload was not logged")
	}
}

// With mutual TLS the gateway serves clients with a valid certificate of
// its client CA, and refuses the rest in the handshake.
func TestTLSClientCertificates(t *testing.T) {
	certs := newTestCerts(t)
	s := certs.tlsStack(t, nil, true)
	good := certs.client(t, certs.ca.Issue(t, tlstest.Options{Use: tlstest.Client}))
	resp, err := good.Post(s.url+"/v2/models/repeat_int32/generate_stream", "application/json", strings.NewReader(repeatBody(2, 0, 0, 0)))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Proto != "HTTP/2.0" || len(events(t, string(body))) != 2 {
		t.Fatalf("a valid client certificate: %d %s %q", resp.StatusCode, resp.Proto, body)
	}

	other := tlstest.NewCA(t, "another CA")
	for _, tc := range []struct {
		name string
		cert *tlstest.Cert
		want string // the alert the client reads
		log  string // why, in the gateway's log
	}{
		{"no certificate", nil, "certificate required", "client didn't provide a certificate"},
		{"expired", certs.ca.Issue(t, tlstest.Options{Use: tlstest.Client, Expired: true}), "expired certificate", "x509: certificate has expired"},
		{"another CA's", other.Issue(t, tlstest.Options{Use: tlstest.Client}), "unknown certificate authority", "x509: certificate signed by unknown authority"},
	} {
		// Over HTTP/1.1 the client's error is the alert itself (the
		// HTTP/2 transport reports only that it could not connect).
		c := certs.client(t, tc.cert)
		c.Transport.(*http.Transport).Protocols.SetHTTP2(false)
		resp, err := c.Get(s.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: served %d", tc.name, resp.StatusCode)
			continue
		}
		if !strings.Contains(err.Error(), "tls: "+tc.want) {
			t.Errorf("%s: %v, want the alert %q", tc.name, err, tc.want)
		}
		waitFor(t, "the gateway to log the refusal", func() bool { return strings.Contains(s.logs.String(), tc.log) })
	}
}

// HTTP/2's own stream limit is consistent with the per-connection limit:
// the gateway offers twice --max-streams-per-conn, so the limit's 429 is
// what a client past it sees.
func TestTLSHTTP2StreamLimit(t *testing.T) {
	certs := newTestCerts(t)
	s := certs.tlsStack(t, &gateway.Options{MaxStreamsPerConn: 70}, false)
	conn, err := tls.Dial("tcp", s.addr, &tls.Config{RootCAs: certs.ca.Pool(), NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN %q", p)
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); !ok || v != 140 {
				t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS %d (sent %v), want 140", v, ok)
			}
			return
		}
	}
}

// With --h2c the plaintext listener speaks HTTP/2 to a client that knows
// it in advance (prior knowledge, as a balancer does) and HTTP/1.1 to the
// rest; without it, such a client is refused. The HTTP/2 connection is
// one the listener wrapped to read and write raw (rawsock.Listener).
func TestH2C(t *testing.T) {
	prior := func(t *testing.T) *http.Client {
		p := new(http.Protocols)
		p.SetUnencryptedHTTP2(true)
		tr := &http.Transport{Protocols: p}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	stream := func(c *http.Client, url string) (*http.Response, []string, error) {
		resp, err := c.Post(url+"/v2/models/repeat_int32/generate_stream", "application/json", strings.NewReader(repeatBody(3, 0, 0, 0)))
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp, events(t, string(body)), err
	}

	var raw, other atomic.Int64 // the connections accepted, by kind
	s := newStack(t, nil, func(c *stack.Config) {
		c.H2C = true
		c.Server = func(srv *http.Server) {
			srv.ConnState = func(c net.Conn, st http.ConnState) {
				if st != http.StateNew {
					return
				}
				if _, ok := c.(*rawsock.Conn); ok {
					raw.Add(1)
				} else {
					other.Add(1)
				}
			}
		}
	})
	resp, evs, err := stream(prior(t), s.url)
	if err != nil || resp.Proto != "HTTP/2.0" || resp.StatusCode != 200 || len(evs) != 3 {
		t.Fatalf("prior knowledge: %v %v %v", resp, evs, err)
	}
	if raw.Load() != 1 || other.Load() != 0 {
		t.Fatalf("the HTTP/2 stream's server saw %d raw connections and %d others, want 1 raw", raw.Load(), other.Load())
	}
	resp, evs, err = stream(httpClient(t), s.url)
	if err != nil || resp.Proto != "HTTP/1.1" || len(evs) != 3 {
		t.Fatalf("HTTP/1.1 beside h2c: %v %v %v", resp, evs, err)
	}

	off := newStack(t, nil)
	if resp, _, err := stream(prior(t), off.url); err == nil {
		t.Fatalf("without --h2c a prior-knowledge client was served: %s %d", resp.Proto, resp.StatusCode)
	}
}

// Two held streams on one h2c connection (they stay in net/http, relayed
// while their handlers wait parked): the one whose client resets it is
// cancelled in the engine and counted as gone, the other runs on, keeps
// getting its events and ends with the drain's error event.
func TestH2CStreamClientLeavesAndDrain(t *testing.T) {
	s := newStack(t, nil, func(c *stack.Config) { c.H2C = true })
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	open := func(ctx context.Context) *sse.Reader {
		body := `{"text_input":"` + words(50000) + `","stream":true}`
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v2/models/echo_slow/generate_stream", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil || resp.Proto != "HTTP/2.0" || resp.StatusCode != 200 {
			t.Fatalf("stream: %v %v", resp, err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		r := sse.NewReader(resp.Body)
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
		return r
	}
	ctx, leave := context.WithCancel(t.Context())
	open(ctx)
	stay := open(t.Context())
	waitFor(t, "both requests to run", func() bool { return s.eng.InFlight() == 2 })
	leave()
	waitFor(t, "the engine to stop the abandoned request", func() bool { return s.eng.InFlight() == 1 })
	waitFor(t, "client_gone metric", func() bool {
		return s.metricValue(t, `streamgate_gateway_client_gone_total{protocol="sse"}`) == 1
	})
	for range 3 {
		if _, err := stay.Next(); err != nil {
			t.Fatalf("the other stream: %v", err)
		}
	}
	drainNow(t, s)
	if last := lastData(t, stay); last != `{"error":"server is shutting down"}` {
		t.Errorf("last event %q, want the drain's error", last)
	}
	waitFor(t, "engine idle", func() bool { return s.eng.InFlight() == 0 })
}

// The gateway reaches an engine that requires mutual TLS, as the engine
// and gateway commands' flags configure both; a gateway with a wrong
// certificate, none, or trusting another CA is refused, and says why.
func TestUpstreamMutualTLS(t *testing.T) {
	ca, other := tlstest.NewCA(t, "internal CA"), tlstest.NewCA(t, "another CA")
	dir := t.TempDir()
	caFile, otherFile := ca.WriteFile(t, dir, "ca.crt"), other.WriteFile(t, dir, "other.crt")
	// The engine's certificate names only the service, not its address.
	ecert, ekey := ca.Issue(t, tlstest.Options{Hosts: []string{"engine.internal"}, Name: "engine"}).WriteFiles(t, dir, "engine")
	gcert, gkey := ca.Issue(t, tlstest.Options{Use: tlstest.Client, Name: "gateway"}).WriteFiles(t, dir, "gateway")
	wcert, wkey := other.Issue(t, tlstest.Options{Use: tlstest.Client, Name: "intruder"}).WriteFiles(t, dir, "intruder")

	start := func(t *testing.T, command string, args ...string) (*stack.Stack, *syncBuffer) {
		t.Helper()
		f, err := stack.Parse(command, args)
		if err != nil {
			t.Fatal(err)
		}
		logs := &syncBuffer{}
		cfg, err := f.Config(slog.New(slog.NewTextHandler(logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		st, err := stack.Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			st.StopNow()
			if t.Failed() {
				t.Logf("%s log:\n%s", command, tail(logs.String(), 8<<10))
			}
		})
		return st, logs
	}
	eng, engineLogs := start(t, "engine", "--grpc", "127.0.0.1:0", "--model-cache", t.TempDir(), "--tls-cert", ecert, "--tls-key", ekey, "--tls-client-ca", caFile)
	gateway := func(t *testing.T, args ...string) (*stack.Stack, *syncBuffer) {
		return start(t, "gateway", append([]string{"--http", "127.0.0.1:0", "--upstream", eng.EngineAddr,
			"--upstream-tls", "--upstream-server-name", "engine.internal", "--health-interval", "50ms"}, args...)...)
	}
	generate := func(t *testing.T, gw *stack.Stack) (int, string) {
		resp, err := httpClient(t).Post(gw.URL()+"/v2/models/identity_int32/generate", "application/json", strings.NewReader(`{"INPUT0":[5]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	t.Run("valid certificate", func(t *testing.T) {
		gw, _ := gateway(t, "--upstream-ca", caFile, "--upstream-cert", gcert, "--upstream-key", gkey)
		if code, body := generate(t, gw); code != 200 || body != `{"model_name":"identity_int32","model_version":"1","OUTPUT0":5}` {
			t.Fatalf("%d %s", code, body)
		}
	})
	for _, tc := range []struct {
		name      string
		args      []string
		why       string // in the gateway's log
		engineWhy string // in the engine's log
	}{
		{"another CA's certificate", []string{"--upstream-ca", caFile, "--upstream-cert", wcert, "--upstream-key", wkey},
			`TLS client certificate not among those the server accepts: it will likely refuse the connection" err="chain is not signed by an acceptable CA" server_accepts_issuers="[CN=internal CA,O=streamgate tests]" cert_issuer="CN=another CA,O=streamgate tests"`,
			"x509: certificate signed by unknown authority"},
		{"no certificate", []string{"--upstream-ca", caFile},
			`TLS server asks for a client certificate and none is configured: it will likely refuse the connection (mutual TLS)" server_accepts_issuers="[CN=internal CA,O=streamgate tests]"`,
			"tls: client didn't provide a certificate"},
		{"trusting another CA", []string{"--upstream-ca", otherFile, "--upstream-cert", gcert, "--upstream-key", gkey},
			"transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority",
			"remote error: tls: bad certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw, logs := gateway(t, tc.args...)
			code, body := generate(t, gw)
			if code != http.StatusServiceUnavailable || body != `{"error":"Service Unavailable"}` {
				t.Errorf("request: %d %s, want 503", code, body)
			}
			waitFor(t, "the gateway to log why", func() bool { return strings.Contains(logs.String(), tc.why) })
			waitFor(t, "the engine to log why", func() bool { return strings.Contains(engineLogs.String(), tc.engineWhy) })
			resp, err := httpClient(t).Get(gw.URL() + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("/readyz %d, want 503", resp.StatusCode)
			}
		})
	}
}

// TestReadmeTLS runs the README's TLS example as written: its openssl
// command makes the self-signed certificate, `streamgate serve` with its
// flags serves it (in this process, on free ports), and its curl command
// streams over HTTPS trusting the certificate.
func TestReadmeTLS(t *testing.T) {
	openssl := requireTool(t, "openssl", "/usr/bin/openssl")
	curl := requireTool(t, "curl", "/usr/bin/curl")
	cmds := readmeShellCommands(t, filepath.Join("cmd", "streamgate", "README.md"), "## TLS")
	if len(cmds) != 3 || !strings.HasPrefix(cmds[0], "openssl req ") || !strings.HasPrefix(cmds[1], "streamgate serve ") || !strings.HasPrefix(cmds[2], "curl ") {
		t.Fatalf("the README's TLS example is not openssl, serve, curl: %q (update this test with it)", cmds)
	}
	dir := t.TempDir()
	run := func(bin, cmd string) string {
		t.Helper()
		c := exec.CommandContext(t.Context(), "sh", "-c", bin+strings.TrimPrefix(cmd, strings.Fields(cmd)[0]))
		c.Dir = dir
		var stderr bytes.Buffer
		c.Stderr = &stderr
		out, err := c.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s%s", cmd, err, out, stderr.Bytes())
		}
		return string(out)
	}
	run(openssl, cmds[0])

	serve, _, _ := strings.Cut(strings.TrimPrefix(cmds[1], "streamgate serve "), "#")
	args := strings.Fields(serve)
	for i, a := range args {
		if strings.HasSuffix(a, ".pem") {
			args[i] = filepath.Join(dir, a)
		}
	}
	f, err := stack.Parse("serve", append(args, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--model-cache", t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := f.Config(nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := stack.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.StopNow()
	if !strings.HasPrefix(st.URL(), "https://") {
		t.Fatalf("serve with the README's flags serves %s", st.URL())
	}
	_, port, _ := strings.Cut(st.HTTPAddr, ":")
	if !strings.Contains(cmds[2], "https://localhost:8080/") {
		t.Fatalf("the curl command does not name https://localhost:8080/: %s", cmds[2])
	}
	out := run(curl, strings.Replace(cmds[2], "localhost:8080", "localhost:"+port, 1))
	want := []string{
		`{"model_name":"repeat_int32","model_version":"1","OUT":1,"IDX":0}`,
		`{"model_name":"repeat_int32","model_version":"1","OUT":2,"IDX":1}`,
		`{"model_name":"repeat_int32","model_version":"1","OUT":3,"IDX":2}`,
	}
	if got := events(t, out); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("curl printed %q", out)
	}
}

// readmeShellCommands are the commands of the first ```sh block after the
// heading in readme (a path from the module root), continuation lines
// joined.
func readmeShellCommands(t *testing.T, readme, heading string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(moduleRoot(t), readme))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no %q", readme, heading)
	}
	_, rest, ok = strings.Cut(rest, "```sh\n")
	block, _, ok2 := strings.Cut(rest, "\n```")
	if !ok || !ok2 {
		t.Fatalf("%s: no sh block under %q", readme, heading)
	}
	var cmds []string
	for _, c := range strings.Split(strings.ReplaceAll(block, "\\\n", ""), "\n") {
		if c = strings.TrimSpace(c); c != "" {
			cmds = append(cmds, c)
		}
	}
	return cmds
}
