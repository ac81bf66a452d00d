package upstream

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/streamgate/streamgate/engine"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// sockDir is a directory for unix sockets, removed when the test ends.
// It is short: a socket's path must stay under 108 bytes, and
// t.TempDir's, named after the test, can pass that.
func sockDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Targets are read as grpc-go reads them: the socket dialled and the
// :authority sent.
func TestParseAddress(t *testing.T) {
	for _, tc := range []struct {
		target, network, addr, authority string
		tlsName                          string // the TLS server name checked
	}{
		{"127.0.0.1:8001", "tcp", "127.0.0.1:8001", "127.0.0.1:8001", "127.0.0.1"},
		{"engine.internal:8001", "tcp", "engine.internal:8001", "engine.internal:8001", "engine.internal"},
		{"[::1]:8001", "tcp", "[::1]:8001", "[::1]:8001", "::1"},
		{":8001", "tcp", ":8001", "localhost:8001", "localhost"},
		{"passthrough:///10.0.0.7:8001", "tcp", "10.0.0.7:8001", "10.0.0.7:8001", "10.0.0.7"},
		{"unix:/run/triton.sock", "unix", "/run/triton.sock", "localhost", "localhost"},
		{"unix:///run/triton.sock", "unix", "/run/triton.sock", "localhost", "localhost"},
		{"unix:run/triton.sock", "unix", "run/triton.sock", "localhost", "localhost"},
		{"unix-abstract:triton", "unix", "@triton", "localhost", "localhost"},
	} {
		a, err := parseAddress(tc.target)
		if err != nil {
			t.Errorf("%s: %v", tc.target, err)
			continue
		}
		if want := (address{tc.network, tc.addr, tc.authority}); a != want {
			t.Errorf("%s: %+v, want %+v", tc.target, a, want)
		}
		// TLS: the server name configured is the authority (grpc-go's
		// precedence); without one the authority's host is checked.
		if got := targetAuthority(a, &tls.Config{ServerName: "triton.internal"}); got != "triton.internal" {
			t.Errorf("%s with a TLS server name: authority %q", tc.target, got)
		}
		if got := h2TLS(&tls.Config{}, a.authority).ServerName; got != tc.tlsName {
			t.Errorf("%s: TLS server name %q, want %q", tc.target, got, tc.tlsName)
		}
	}
}

// A malformed unix or passthrough target is refused by New, on either
// transport, with what is wrong with it: not later, by every dial.
func TestNewRefusesMalformedTarget(t *testing.T) {
	for _, tc := range []struct{ target, want string }{
		{"unix:", `upstream: target "unix:": no socket path; want unix:PATH`},
		{"unix://", `upstream: target "unix://": no socket path; want unix:PATH`},
		{"unix-abstract:", `upstream: target "unix-abstract:": no socket path; want unix-abstract:PATH`},
		{"unix://engine/run/triton.sock", `upstream: target "unix://engine/run/triton.sock": a unix socket has no host ("engine"); want unix:PATH or unix:///ABSOLUTE_PATH`},
		{"passthrough:///", `upstream: target "passthrough:///": no address; want passthrough:///host:port`},
		{"unix:/run/%zz.sock", `upstream: target "unix:/run/%zz.sock": invalid URL escape "%zz"`},
	} {
		for _, tr := range []string{TransportH2, TransportGRPC} {
			c, err := New([]string{"127.0.0.1:8001", tc.target}, &Options{Transport: tr})
			if err == nil {
				c.Close()
				t.Errorf("%s, transport %s: New accepted it", tc.target, tr)
			} else if err.Error() != tc.want {
				t.Errorf("%s, transport %s: %q, want %q", tc.target, tr, err, tc.want)
			}
		}
	}
}

// A unix socket target, in either spelling, behaves on both transports
// as a TCP one: a stream's responses relayed, health checks that find the
// engine gone and back, and new streams once it is back.
func TestUnixTarget(t *testing.T) {
	dir := sockDir(t)
	for _, tr := range []string{TransportH2, TransportGRPC} {
		for _, form := range []string{"unix:", "unix://"} {
			t.Run(tr+"/"+form, func(t *testing.T) {
				path := filepath.Join(dir, strings.NewReplacer("/", "", ":", "").Replace(tr+form)+".sock")
				e := serveEngine(t, "unix:"+path, engine.Options{})
				target := form + path
				c := newTestClient(t, []string{target}, &Options{Transport: tr, HealthInterval: 20 * time.Millisecond})
				relayRepeat(t, t.Context(), c, 3, 4)
				if st := c.Stats().Targets; len(st) != 1 || st[0].Addr != target {
					t.Fatalf("targets %+v, want one, %s", st, target)
				}

				e.stop()
				waitFor(t, "the stopped engine found unhealthy", func() bool { return !c.Stats().Targets[0].Healthy })
				serveEngine(t, "unix:"+path, engine.Options{})
				waitFor(t, "the engine back found healthy", func() bool { return c.Stats().Targets[0].Healthy })
				relayRepeat(t, t.Context(), c, 10, 4)
			})
		}
	}
}

// Both transports send gRPC's :authority for the target: "localhost" to a
// unix socket, the address to a TCP one. The pooled stream (the h2
// transport's own connection) and the unary calls (grpc-go's) agree.
func TestTargetAuthority(t *testing.T) {
	dir := sockDir(t)
	for _, tr := range []string{TransportH2, TransportGRPC} {
		for _, unix := range []bool{false, true} {
			t.Run(tr+"/unix="+map[bool]string{false: "no", true: "yes"}[unix], func(t *testing.T) {
				at := ""
				if unix {
					at = "unix:" + filepath.Join(dir, tr+".sock")
				}
				e, addr := startTraceEngineAt(t, true, at)
				c := newTestClient(t, []string{addr}, &Options{Transport: tr, Cancel: CancelInband, HealthInterval: -1})
				cl, err := c.Start(t.Context(), &pb.ModelInferRequest{ModelName: "m"})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := readAll(t.Context(), cl); err != nil {
					t.Fatal(err)
				}
				if _, err := c.ModelMetadata(t.Context(), "m", ""); err != nil {
					t.Fatal(err)
				}
				want := addr
				if unix {
					want = "localhost"
				}
				e.mu.Lock()
				defer e.mu.Unlock()
				for _, m := range []string{"ModelMetadata", "ModelStreamInfer"} {
					if got := e.authority[m]; got != want {
						t.Errorf("%s's :authority %q, want %q", m, got, want)
					}
				}
			})
		}
	}
}

// Over TLS, a unix socket's server is checked as "localhost" on both
// transports (grpc-go's name for it), unless the configuration names it.
func TestUnixTargetTLS(t *testing.T) {
	path := filepath.Join(sockDir(t), "tls.sock")
	e, roots := serveTLSEngineAt(t, "unix:"+path)
	for _, tr := range []string{TransportH2, TransportGRPC} {
		t.Run(tr, func(t *testing.T) {
			c := newTestClient(t, []string{e.addr}, &Options{Transport: tr, TLS: &tls.Config{RootCAs: roots}})
			relayRepeat(t, t.Context(), c, 3, 4)

			// A name the certificate does not carry is refused.
			bad := newTestClient(t, []string{e.addr}, &Options{Transport: tr, TLS: &tls.Config{RootCAs: roots, ServerName: "engine.internal"}, HealthInterval: -1})
			wantRefused(t, t.Context(), bad)
		})
	}
}
