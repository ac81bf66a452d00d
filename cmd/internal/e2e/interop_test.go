package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/streamgate/streamgate/cmd/internal/coretriton"
	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/cmd/internal/tlsfiles/tlstest"
	"github.com/streamgate/streamgate/gateway"
	"github.com/streamgate/streamgate/gateway/sse"
	"github.com/streamgate/streamgate/upstream"
)

// The interop suite: the gateway against a Triton stand-in on grpc core
// (cmd/internal/coretriton), the transport Triton's server is built on,
// with Triton's default channel arguments and the variants that matter
// (connection age, stream limits, small windows, TLS). It runs over the
// upstream transport STREAMGATE_UPSTREAM_TRANSPORT names, like the rest of
// the suite; CI runs it over each.
//
// Each test runs in two modes: "pooled" (the stand-in advertises
// streamgate's in-band cancel, so requests share pooled streams, the
// transport under test) and "dedicated" (a plain Triton: one stream per
// request, on grpc-go).

// coreModes are the stand-in's two modes.
var coreModes = []struct {
	name   string
	inband bool
}{{"pooled", true}, {"dedicated", false}}

// coreStack is a gateway whose only target is srv.
func coreStack(t testing.TB, srv *coretriton.Server, gw *gateway.Options, uo upstream.Options) *testStack {
	t.Helper()
	if gw == nil {
		gw = noKeepAlive()
	}
	return newStack(t, gw, func(c *stack.Config) {
		c.Engine = nil
		c.Upstream = []string{srv.Addr}
		c.UpstreamOptions = &uo
	})
}

// wantRepeat checks an event-stream body of repeat_int32's n responses.
func wantRepeat(t testing.TB, status int, body string, n int) {
	t.Helper()
	got := events(t, body)
	if status != http.StatusOK || len(got) != n {
		t.Fatalf("status %d, %d events, want 200 and %d: %q", status, len(got), n, tail(body, 600))
	}
	for i, ev := range got {
		want := fmt.Sprintf(`{"model_name":"repeat_int32","model_version":"1","OUT":%d,"IDX":%d}`, i, i)
		if ev != want {
			t.Fatalf("event %d = %s, want %s", i, ev, want)
		}
	}
}

func TestInteropStreams(t *testing.T) {
	for _, m := range coreModes {
		t.Run(m.name, func(t *testing.T) {
			srv := coretriton.Start(t, coretriton.Options{InbandCancel: m.inband})
			s := coreStack(t, srv, nil, upstream.Options{})
			resp, body := s.post(t, "/v2/models/repeat_int32/generate_stream", repeatBody(5, 0, 0, 0))
			wantRepeat(t, resp.StatusCode, body, 5)
			resp, body = s.post(t, "/v2/models/square_int32/generate_stream", `{"IN":0}`)
			if resp.StatusCode != 200 || body != "" {
				t.Fatalf("square IN=0: %d %q, want 200 and no events", resp.StatusCode, body)
			}
			resp, body = s.post(t, "/v2/models/repeat_int32/generate_stream", `{"IN":[1],"DELAY":[0,0],"WAIT":0}`)
			want := "id: 1\ndata: {\"error\":\"expected IN and DELAY shape to match, got [1] and [2]\"}\n\n"
			if resp.StatusCode != 400 || body != want {
				t.Fatalf("in-band error: %d %q, want 400 %q", resp.StatusCode, body, want)
			}
			resp, body = s.post(t, "/v2/models/nope/generate_stream", `{}`)
			if resp.StatusCode != 404 || body != `{"error":"Request for unknown model: 'nope' is not found"}` {
				t.Fatalf("unknown model: %d %s", resp.StatusCode, body)
			}
		})
	}
}

// TestInteropPingPolicy: pooled streams whose requests stay silent for
// 11 s, past the client's keepalive time (10 s, the least it takes), so
// that it pings them, against a server whose minimum ping interval
// without data is Triton's 300 s scaled down to 5 s with its 2 strikes:
// the server must never close a connection with "too_many_pings", and no
// request may be lost.
func TestInteropPingPolicy(t *testing.T) {
	for _, m := range coreModes {
		t.Run(m.name, func(t *testing.T) {
			srv := coretriton.Start(t, coretriton.Options{InbandCancel: m.inband, Args: map[string]any{
				"grpc.http2.min_ping_interval_without_data_ms": 5000,
			}})
			s := coreStack(t, srv, nil, upstream.Options{KeepaliveTime: time.Second, KeepaliveTimeout: 20 * time.Second})
			// Each request is silent for 11 s; four run at once.
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					resp, body := s.post(t, "/v2/models/repeat_int32/generate_stream", `{"IN":[0,1],"DELAY":[0,11000],"WAIT":0}`)
					wantRepeat(t, resp.StatusCode, body, 2)
				})
			}
			wg.Wait()
			if l := s.logs.String(); strings.Contains(l, "too_many_pings") || strings.Contains(l, "ENHANCE_YOUR_CALM") {
				t.Fatalf("the server objected to our pings:\n%s", tail(l, 4000))
			}
		})
	}
}

// loadRequests is how many requests the GOAWAY test sends; CI may raise
// it (STREAMGATE_INTEROP_REQUESTS, e.g. 10000).
func loadRequests(t *testing.T) int {
	n := 2000
	if v := os.Getenv("STREAMGATE_INTEROP_REQUESTS"); v != "" {
		if _, err := fmt.Sscan(v, &n); err != nil {
			t.Fatalf("STREAMGATE_INTEROP_REQUESTS=%q: %v", v, err)
		}
	}
	return n
}

// runLoad sends n requests for one square_int32 response from workers
// clients at once, and returns how many failed (logging the first few).
func runLoad(t *testing.T, url string, n, workers int) int64 {
	var next, failed atomic.Int64
	c := httpClient(t)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				resp, err := c.Post(url+"/v2/models/square_int32/generate_stream", "application/json", strings.NewReader(`{"IN":1}`))
				var body []byte
				if err == nil {
					body, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				want := "id: 1\ndata: {\"model_name\":\"square_int32\",\"model_version\":\"1\",\"OUT\":1}\n\n"
				if err != nil || resp.StatusCode != 200 || string(body) != want {
					if failed.Add(1) <= 5 {
						t.Errorf("request failed: %v %v %q", err, resp, body)
					}
				}
			}
		})
	}
	wg.Wait()
	return failed.Load()
}

// TestInteropGoaway: the server ends every connection after 200 ms
// (max_connection_age) with a GOAWAY and a 3 s grace, longer than any
// request but shorter than the load, while requests keep coming: every
// request must succeed, on new connections, and no stream may be cut off
// by the grace's end (the client stops placing requests on a connection
// at its GOAWAY, so its streams end with their last request).
func TestInteropGoaway(t *testing.T) {
	for _, m := range coreModes {
		t.Run(m.name, func(t *testing.T) {
			srv := coretriton.Start(t, coretriton.Options{InbandCancel: m.inband, Args: map[string]any{
				"grpc.max_connection_age_ms":       200,
				"grpc.max_connection_age_grace_ms": 3000,
			}})
			s := coreStack(t, srv, nil, upstream.Options{})
			n := loadRequests(t)
			if failed := runLoad(t, s.url, n, 8); failed > 0 {
				t.Fatalf("%d of %d requests failed", failed, n)
			}
			if peers := srv.Peers(); len(peers) < 2 {
				t.Fatalf("requests came on %d connections, want new ones after each GOAWAY", len(peers))
			}
			if st := s.up.Stats(); st.StreamBreaks != 0 || st.Retries != 0 {
				t.Fatalf("%d streams broke and %d requests were retried, want none: %+v", st.StreamBreaks, st.Retries, st)
			}
		})
	}
}

// TestInteropStreamLimit: the server allows 4 streams per connection,
// fewer than the pool opens (16); 12 overlapping requests must all succeed.
func TestInteropStreamLimit(t *testing.T) {
	for _, m := range coreModes {
		t.Run(m.name, func(t *testing.T) {
			srv := coretriton.Start(t, coretriton.Options{InbandCancel: m.inband, Args: map[string]any{
				"grpc.max_concurrent_streams": 4,
			}})
			s := coreStack(t, srv, nil, upstream.Options{MaxStreamsPerTarget: 16, MaxRequestsPerStream: 1})
			var wg sync.WaitGroup
			for range 12 {
				wg.Go(func() {
					resp, body := s.post(t, "/v2/models/repeat_int32/generate_stream", repeatBody(3, 0, 100, 100))
					wantRepeat(t, resp.StatusCode, body, 3)
				})
			}
			wg.Wait()
		})
	}
}

// TestInteropClientLeaves: a client that leaves mid-stream is cancelled
// upstream, in band (pooled) or by ending its RPC (dedicated); the server
// sees it.
func TestInteropClientLeaves(t *testing.T) {
	for _, m := range coreModes {
		t.Run(m.name, func(t *testing.T) {
			srv := coretriton.Start(t, coretriton.Options{InbandCancel: m.inband})
			s := coreStack(t, srv, nil, upstream.Options{})
			// Wall-clock time is for the report, not an assertion.
			t.Logf("the server saw the cancel %v after the client left", leaveMidStream(t, s, srv))
		})
	}
}

// leaveMidStream starts a long repeat_int32 stream through s, leaves it
// after its first event and waits (30 s at most) until srv sees its
// request cancelled; it returns how long that took.
func leaveMidStream(t *testing.T, s *testStack, srv *coretriton.Server) time.Duration {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v2/models/repeat_int32/generate_stream", strings.NewReader(repeatBody(200, 0, 50, 50)))
	resp, err := httpClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sse.NewReader(resp.Body).Next(); err != nil {
		t.Fatal(err)
	}
	var id string
	for _, e := range srv.Events() {
		if f := strings.Fields(e); len(f) == 3 && f[0] == "START" {
			id = f[1] // the last one started: this request's
		}
	}
	left := time.Now()
	cancel()
	resp.Body.Close()
	wait, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	if err := srv.WaitEvent(wait, coretriton.Cancelled(id)); err != nil {
		t.Fatal(err)
	}
	return time.Since(left)
}

// TestInteropServerHung: the server stops (SIGSTOP) under an open stream.
// The stream ends with "upstream unavailable" within keepalive's bound
// (KeepaliveTime + KeepaliveTimeout, 15 s by default; the wait here is
// generous), and once the target is down every request is refused at
// once with 503 and Retry-After, the first request for a model never
// asked before included: its metadata lookup does not wait for a target
// that answers nothing.
func TestInteropServerHung(t *testing.T) {
	for _, m := range coreModes {
		t.Run(m.name, func(t *testing.T) {
			srv := coretriton.Start(t, coretriton.Options{InbandCancel: m.inband})
			s := coreStack(t, srv, nil, upstream.Options{})
			resp, err := httpClient(t).Post(s.url+"/v2/models/repeat_int32/generate_stream", "application/json", strings.NewReader(repeatBody(1000, 0, 50, 50)))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			r := sse.NewReader(resp.Body)
			if _, err := r.Next(); err != nil {
				t.Fatal(err)
			}
			srv.Signal(syscall.SIGSTOP)
			defer srv.Signal(syscall.SIGCONT)
			stopped := time.Now()
			ended := make(chan string, 1)
			go func() { ended <- lastData(t, r) }()
			// Ejected by its first missed health check, the target is
			// down only a check later; meanwhile too, a model never asked
			// before is refused at once.
			waitFor(t, "the target to be ejected", func() bool {
				return everyTarget(s, func(ts upstream.TargetStats) bool { return !ts.Healthy })
			})
			asked := time.Now()
			resp2, body := s.post(t, "/v2/models/square_int32/generate_stream", `{"IN":[1]}`)
			if resp2.StatusCode != http.StatusServiceUnavailable || resp2.Header.Get("Retry-After") == "" {
				t.Errorf("a never-asked model while the target is ejected: %d %q (Retry-After %q), want 503 with Retry-After",
					resp2.StatusCode, body, resp2.Header.Get("Retry-After"))
			}
			t.Logf("a never-asked model refused %v after the ejection (target down by then: %v)", time.Since(asked), targetDown(s))
			select {
			case last := <-ended:
				if last != `{"error":"upstream unavailable"}` {
					t.Fatalf("the stream ended with %q", last)
				}
				t.Logf("the open stream ended %v after SIGSTOP", time.Since(stopped))
			case <-time.After(2 * time.Minute):
				t.Fatal("the open stream did not end within 2 minutes of SIGSTOP")
			}
			// Wait until the target is down (its health checks go
			// unanswered), then nothing may wait for it.
			waitFor(t, "the target to be down", func() bool { return targetDown(s) })
			for _, path := range []string{"/v2/models/repeat_int32/generate_stream", "/v2/models/blob_uint8/infer", "/v2/models/square_int32/generate_stream"} {
				asked := time.Now()
				resp, body := s.post(t, path, `{}`)
				if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
					t.Errorf("%s while the target is down: %d %q (Retry-After %q), want 503 with Retry-After", path, resp.StatusCode, body, resp.Header.Get("Retry-After"))
				}
				t.Logf("%s refused after %v", path, time.Since(asked))
			}
		})
	}
}

// targetDown reports whether every target of s's upstream client is down.
func targetDown(s *testStack) bool {
	return everyTarget(s, func(ts upstream.TargetStats) bool { return ts.Down })
}

// everyTarget reports whether s's upstream client has targets and is(t)
// holds for each.
func everyTarget(s *testStack, is func(upstream.TargetStats) bool) bool {
	st := s.up.Stats()
	for _, ts := range st.Targets {
		if !is(ts) {
			return false
		}
	}
	return len(st.Targets) > 0
}

// TestInteropLargeMessages: a 64 MB request and a 16 MB response through
// the gateway, with the server's flow-control windows small (no BDP
// growth, 16 KB lookahead): every byte arrives, nothing stalls.
func TestInteropLargeMessages(t *testing.T) {
	for _, m := range coreModes {
		t.Run(m.name, func(t *testing.T) {
			srv := coretriton.Start(t, coretriton.Options{InbandCancel: m.inband, Args: map[string]any{
				"grpc.http2.bdp_probe":         0,
				"grpc.http2.lookahead_bytes":   16 << 10,
				"grpc.http2.write_buffer_size": 16 << 10,
			}})
			s := coreStack(t, srv, &gateway.Options{MaxBodyBytes: 80 << 20, SSE: &sse.Options{KeepAlive: -1}}, upstream.Options{})
			big := make([]byte, 64<<20)
			for i := range big {
				big[i] = byte(i*31 + i>>16)
			}
			for _, tc := range []struct {
				in  []byte
				out int
			}{{big, 16}, {[]byte("abc"), 16 << 20}} {
				body, n := inferBody("big", []inferInput{
					{name: "IN", shape: []int64{int64(len(tc.in))}, datatype: "UINT8", raw: tc.in},
					{name: "N", shape: []int64{1}, datatype: "INT64", data: []any{tc.out}},
				}, []requestedOutput{{"OUT", true}, {"CRC", false}}, nil)
				resp, b := s.infer(t, "/v2/models/blob_uint8/infer", body, n)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%d-byte request: status %d %q", len(tc.in), resp.StatusCode, tail(string(b), 500))
				}
				r := readInferResult(t, resp, b)
				if got := fmt.Sprint(r.outputs["CRC"]["data"]); got != fmt.Sprintf("[%d]", crc32.ChecksumIEEE(tc.in)) {
					t.Fatalf("%d-byte request: the server's CRC %s, want %d", len(tc.in), got, crc32.ChecksumIEEE(tc.in))
				}
				out := r.binary["OUT"]
				if len(out) != tc.out {
					t.Fatalf("OUT has %d bytes, want %d", len(out), tc.out)
				}
				for i, c := range out {
					if c != byte(i*7%251) {
						t.Fatalf("OUT byte %d = %d, want %d", i, c, i*7%251)
					}
				}
			}
		})
	}
}

// TestInteropServerRestart: the server is killed and started again on
// the same port; the gateway serves again once it is back, with no
// request of ours hanging meanwhile.
func TestInteropServerRestart(t *testing.T) {
	for _, m := range coreModes {
		t.Run(m.name, func(t *testing.T) {
			srv := coretriton.Start(t, coretriton.Options{InbandCancel: m.inband})
			s := coreStack(t, srv, nil, upstream.Options{})
			resp, body := s.post(t, "/v2/models/repeat_int32/generate_stream", repeatBody(3, 0, 0, 0))
			wantRepeat(t, resp.StatusCode, body, 3)
			srv.Kill()
			resp, body = s.post(t, "/v2/models/repeat_int32/generate_stream", repeatBody(3, 0, 0, 0))
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("with the server gone: %d %q, want 503", resp.StatusCode, body)
			}
			srv.Restart()
			deadline := time.After(time.Minute)
			for {
				resp, body = s.post(t, "/v2/models/repeat_int32/generate_stream", repeatBody(3, 0, 0, 0))
				if resp.StatusCode == http.StatusOK {
					wantRepeat(t, resp.StatusCode, body, 3)
					return
				}
				if resp.StatusCode != http.StatusServiceUnavailable {
					t.Fatalf("after the restart: %d %q", resp.StatusCode, body)
				}
				select {
				case <-deadline:
					t.Fatalf("still %d a minute after the restart: %q", resp.StatusCode, body)
				case <-time.After(100 * time.Millisecond): // the next health check, no sooner
				}
			}
		})
	}
}

// TestInteropTLS: the server speaks TLS, then mutual TLS (a gateway
// without a client certificate is refused), then rotates its key pair
// while connections come and go (max_connection_age): requests keep
// succeeding and new connections see the new certificate.
func TestInteropTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "interop CA")
	dir := t.TempDir()
	caFile := ca.WriteFile(t, dir, "ca")
	cert, key := ca.Issue(t, tlstest.Options{}).WriteFiles(t, dir, "server")
	client := ca.Issue(t, tlstest.Options{Use: tlstest.Client}).TLS()
	for _, m := range coreModes {
		t.Run(m.name, func(t *testing.T) {
			t.Run("tls", func(t *testing.T) {
				srv := coretriton.Start(t, coretriton.Options{InbandCancel: m.inband, TLS: &coretriton.TLSFiles{Cert: cert, Key: key}})
				s := coreStack(t, srv, nil, upstream.Options{TLS: &tls.Config{RootCAs: ca.Pool()}})
				resp, body := s.post(t, "/v2/models/repeat_int32/generate_stream", repeatBody(3, 0, 0, 0))
				wantRepeat(t, resp.StatusCode, body, 3)
			})
			t.Run("mtls", func(t *testing.T) {
				srv := coretriton.Start(t, coretriton.Options{InbandCancel: m.inband, TLS: &coretriton.TLSFiles{Cert: cert, Key: key, CA: caFile}})
				s := coreStack(t, srv, nil, upstream.Options{TLS: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{client}}})
				resp, body := s.post(t, "/v2/models/repeat_int32/generate_stream", repeatBody(3, 0, 0, 0))
				wantRepeat(t, resp.StatusCode, body, 3)
				anon := coreStack(t, srv, nil, upstream.Options{TLS: &tls.Config{RootCAs: ca.Pool()}})
				resp, body = anon.post(t, "/v2/models/repeat_int32/generate_stream", repeatBody(3, 0, 0, 0))
				if resp.StatusCode != http.StatusServiceUnavailable {
					t.Fatalf("without a client certificate: %d %q, want 503", resp.StatusCode, body)
				}
			})
			t.Run("rotation", func(t *testing.T) {
				rdir := t.TempDir()
				first := ca.Issue(t, tlstest.Options{})
				cert, key := first.WriteFiles(t, rdir, "server")
				srv := coretriton.Start(t, coretriton.Options{InbandCancel: m.inband, TLS: &coretriton.TLSFiles{Cert: cert, Key: key},
					Args: map[string]any{"grpc.max_connection_age_ms": 300, "grpc.max_connection_age_grace_ms": 30000}})
				var mu sync.Mutex
				seen := map[string]bool{}
				conf := &tls.Config{RootCAs: ca.Pool(), VerifyConnection: func(cs tls.ConnectionState) error {
					mu.Lock()
					seen[cs.PeerCertificates[0].SerialNumber.String()] = true
					mu.Unlock()
					return nil
				}}
				s := coreStack(t, srv, nil, upstream.Options{TLS: conf})
				resp, body := s.post(t, "/v2/models/repeat_int32/generate_stream", repeatBody(3, 0, 0, 0))
				wantRepeat(t, resp.StatusCode, body, 3)
				second := ca.Issue(t, tlstest.Options{})
				second.WriteFiles(t, rdir, "server")
				want := second.Leaf.SerialNumber.String()
				deadline := time.Now().Add(time.Minute)
				for {
					resp, body := s.post(t, "/v2/models/repeat_int32/generate_stream", repeatBody(3, 0, 0, 0))
					wantRepeat(t, resp.StatusCode, body, 3)
					mu.Lock()
					done := seen[want]
					mu.Unlock()
					if done {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("no connection presented the rotated certificate within a minute; events %q", srv.Events())
					}
				}
			})
		})
	}
}

// TestInteropNginxGRPCPass: nginx's grpc_pass as a hop between the
// gateway and the server (cleartext HTTP/2 both ways): streams, in-band
// errors and a client that leaves all cross it.
func TestInteropNginxGRPCPass(t *testing.T) {
	bin := requireTool(t, "nginx", "/usr/sbin/nginx")
	for _, m := range coreModes {
		t.Run(m.name, func(t *testing.T) {
			srv := coretriton.Start(t, coretriton.Options{InbandCancel: m.inband})
			dir := t.TempDir()
			addr := freeAddr(t)
			conf := `events {}
http {
  server {
    listen ` + addr + ` http2;
    client_max_body_size 0;
    location = /healthz { return 200; }
    location / {
      grpc_pass grpc://` + srv.Addr + `;
      grpc_read_timeout 1h;
      grpc_send_timeout 1h;
    }
  }
}
`
			conf, err := nginxTempPaths(conf, dir)
			if err != nil {
				t.Fatal(err)
			}
			h2c := &http.Transport{Protocols: new(http.Protocols)}
			h2c.Protocols.SetUnencryptedHTTP2(true)
			t.Cleanup(h2c.CloseIdleConnections)
			runNginx(t, bin, "grpc_pass test configuration", conf, dir, &http.Client{Transport: h2c}, "http://"+addr+"/healthz")

			s := newStack(t, noKeepAlive(), func(c *stack.Config) {
				c.Engine = nil
				c.Upstream = []string{addr}
			})
			resp, body := s.post(t, "/v2/models/repeat_int32/generate_stream", repeatBody(5, 0, 10, 10))
			wantRepeat(t, resp.StatusCode, body, 5)
			resp, body = s.post(t, "/v2/models/repeat_int32/generate_stream", `{"IN":[1],"DELAY":[0,0],"WAIT":0}`)
			if resp.StatusCode != 400 || !strings.Contains(body, "expected IN and DELAY shape to match") {
				t.Fatalf("in-band error: %d %q", resp.StatusCode, body)
			}
			leaveMidStream(t, s, srv)
		})
	}
}
