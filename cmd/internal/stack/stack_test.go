package stack

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/streamgate/streamgate/cmd/internal/tlsfiles/tlstest"
	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/engine/builtin"
	"github.com/streamgate/streamgate/upstream"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Every flag reaches the Option it names, from the command line or from
// its STREAMGATE_ variable.
func TestFlagsReachOptions(t *testing.T) {
	t.Setenv("STREAMGATE_WS_ORIGINS", "app.example.com, *.example.org")
	t.Setenv("STREAMGATE_HEALTH_INTERVAL", "5s")
	f, err := Parse("serve", []string{
		"--retry-after", "3s", "--sse-keepalive", "-1s", "--sse-write-timeout", "7s",
		"--ws-write-timeout", "4s", "--ws-queue-bytes", "2000", "--ws-ping-interval", "-1s", "--ws-ping-timeout", "9s",
		"--ws-skip-origin-check", "--health-timeout", "300ms", "--cancel", "stream", "--queue-bytes", "9",
		"--queue-memory", "12345", "--client-stall-timeout", "8s",
		"--max-streams", "11", "--max-streams-per-conn", "3", "--max-body", "1000", "--ws-max-in-flight", "5",
		"--upstream-streams", "6", "--models", "/repo", "--grpc", "127.0.0.1:1", "--http", "127.0.0.1:2",
		"--upstream-idle-timeout", "42s", "--upstream-idle-timeout-model", "big=5m, off=-1s",
		"--body-timeout", "4s", "--body-min-rate", "100", "--cors-origins", "https://a.example, *.b.example",
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := f.Config(nil)
	if err != nil {
		t.Fatal(err)
	}
	g, u := cfg.Gateway, cfg.UpstreamOptions
	switch {
	case cfg.Engine == nil || cfg.Engine.ModelDir != "/repo" || cfg.EngineAddr != "127.0.0.1:1" || cfg.HTTPAddr != "127.0.0.1:2":
		t.Errorf("engine %+v at %s, http %s", cfg.Engine, cfg.EngineAddr, cfg.HTTPAddr)
	case len(cfg.Upstream) != 0:
		t.Errorf("serve's upstream is its engine, got %v", cfg.Upstream)
	case g.RetryAfter != 3*time.Second || g.MaxStreams != 11 || g.MaxStreamsPerConn != 3 || g.MaxBodyBytes != 1000 ||
		g.BodyTimeout != 4*time.Second || g.BodyMinRate != 100:
		t.Errorf("gateway %+v", g)
	case g.SSE.KeepAlive != -time.Second || g.SSE.WriteTimeout != 7*time.Second:
		t.Errorf("sse %+v", g.SSE)
	case g.WebSocket.WriteTimeout != 4*time.Second || g.WebSocket.QueueBytes != 2000 || g.WebSocket.Memory != u.Memory ||
		g.WebSocket.PingInterval != -time.Second || g.WebSocket.PingTimeout != 9*time.Second || g.WebSocket.MaxInFlight != 5:
		t.Errorf("ws %+v", g.WebSocket)
	case !g.WebSocketSkipOriginCheck:
		t.Errorf("skip %v", g.WebSocketSkipOriginCheck)
	case strings.Join(g.CORSOrigins, "|") != "https://a.example|*.b.example|app.example.com|*.example.org":
		t.Errorf("origins (--cors-origins and --ws-origins, both --origins) %q", g.CORSOrigins)
	case u.HealthInterval != 5*time.Second || u.HealthTimeout != 300*time.Millisecond || u.Cancel != upstream.CancelStream ||
		u.QueueBytes != 9 || u.Memory.Limit() != 12345 || u.StallTimeout != 8*time.Second || u.MaxStreamsPerTarget != 6 || u.IdleTimeout != 42*time.Second ||
		len(u.ModelIdleTimeouts) != 2 || u.ModelIdleTimeouts["big"] != 5*time.Minute || u.ModelIdleTimeouts["off"] != -time.Second:
		t.Errorf("upstream %+v", u)
	}
	for _, bad := range []string{"big", "=5m", "big=soon"} {
		f, _ := Parse("gateway", []string{"--upstream-idle-timeout-model", bad})
		if _, err := f.Config(nil); err == nil || !strings.Contains(err.Error(), "--upstream-idle-timeout-model") {
			t.Errorf("--upstream-idle-timeout-model %q: %v", bad, err)
		}
	}

	if _, err := Parse("gateway", []string{"--cancel", "sometimes"}); err != nil {
		t.Fatal(err) // the flag is a string; Config checks it
	}
	bad, _ := Parse("gateway", []string{"--cancel", "sometimes"})
	if _, err := bad.Config(nil); err == nil {
		t.Error("bad cancel mode accepted")
	}
	empty, _ := Parse("gateway", []string{"--upstream", " , "})
	if _, err := empty.Config(nil); err == nil {
		t.Error("a gateway without targets accepted")
	}
	if _, err := Parse("engine", []string{"--http", ":1"}); err == nil {
		t.Error("engine accepted a gateway flag")
	}
}

// The engine command's stack and the gateway command's stack, in front of
// it over loopback, serve a request together and stop in order.
func TestEngineAndGatewayStacks(t *testing.T) {
	eng, err := Start(Config{Engine: &engine.Options{Repository: builtin.FS, Backends: builtin.Backends()}})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.StopNow()
	if eng.Gateway != nil || eng.HTTP != nil || eng.EngineAddr == "" {
		t.Fatalf("engine stack %+v", eng)
	}
	gw, err := Start(flagsConfig(t, "gateway", "--upstream", eng.EngineAddr, "--http", "127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	if gw.Engine != nil || gw.Gateway == nil {
		t.Fatalf("gateway stack %+v", gw)
	}
	resp, err := http.Post(gw.URL()+"/v2/models/square_int32/generate", "application/json", strings.NewReader(`{"IN":1}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != `{"model_name":"square_int32","model_version":"1","OUT":1}` {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gw.Stop(ctx)
	gw.Stop(ctx) // idempotent
	if _, err := http.Get(gw.URL() + "/healthz"); err == nil {
		t.Error("the gateway still serves after Stop")
	}
	if _, err := gw.Upstream.Start(ctx, nil); err == nil {
		t.Error("the upstream client still takes requests after Stop")
	}
}

func TestStartRefusesNothing(t *testing.T) {
	if _, err := Start(Config{}); err == nil {
		t.Fatal("a stack of nothing started")
	}
	if _, err := Start(Config{Engine: &engine.Options{Repository: builtin.FS}}); err == nil {
		t.Fatal("an engine without its backends started") // and nothing leaks
	}
}

// The TLS flags reach the layers they name: --tls-* the gateway's HTTPS
// listener (serve, gateway) or the engine's gRPC listener (engine),
// --upstream-* the gateway's upstream client; a half-given pair, --h2c
// with TLS and upstream files without --upstream-tls are refused.
func TestTLSFlags(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	dir := t.TempDir()
	cert, key := ca.Issue(t, tlstest.Options{}).WriteFiles(t, dir, "server")
	ccert, ckey := ca.Issue(t, tlstest.Options{Use: tlstest.Client}).WriteFiles(t, dir, "client")
	caFile := ca.WriteFile(t, dir, "ca.crt")
	config := func(command string, args ...string) (Config, error) {
		t.Helper()
		f, err := Parse(command, args)
		if err != nil {
			return Config{}, err
		}
		return f.Config(nil)
	}

	cfg, err := config("serve", "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", caFile)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TLS == nil || cfg.TLS.MinVersion != tls.VersionTLS12 || cfg.TLS.ClientAuth != tls.RequireAndVerifyClientCert || cfg.TLS.GetCertificate == nil {
		t.Errorf("serve: gateway TLS %+v", cfg.TLS)
	}
	if cfg.Engine.TLS != nil || cfg.UpstreamOptions.TLS != nil || cfg.H2C {
		t.Error("serve: the engine on loopback is plaintext")
	}

	t.Run("upstream TLS from the environment", func(t *testing.T) {
		t.Setenv("STREAMGATE_UPSTREAM_TLS", "true")
		cfg, err := config("gateway", "--h2c", "--upstream-ca", caFile, "--upstream-cert", ccert, "--upstream-key", ckey, "--upstream-server-name", "engine.internal")
		if err != nil {
			t.Fatal(err)
		}
		if u := cfg.UpstreamOptions.TLS; cfg.TLS != nil || !cfg.H2C || u == nil || u.ServerName != "engine.internal" || u.RootCAs == nil {
			t.Errorf("gateway: TLS %v h2c %v upstream %+v", cfg.TLS, cfg.H2C, u)
		}
	})

	cfg, err = config("engine", "--tls-cert", cert, "--tls-key", key)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Engine.TLS == nil || cfg.Engine.TLS.ClientAuth != tls.NoClientCert || cfg.Gateway != nil {
		t.Errorf("engine: TLS %+v", cfg.Engine.TLS)
	}

	for _, tc := range []struct {
		command string
		args    []string
		want    string
	}{
		{"gateway", []string{"--tls-cert", cert}, "--tls-cert, --tls-key, --tls-client-ca: a certificate needs its key"},
		{"engine", []string{"--tls-key", key}, "--tls-cert, --tls-key, --tls-client-ca: a certificate needs its key"},
		{"gateway", []string{"--tls-cert", cert, "--tls-key", ckey}, "private key does not match"},
		{"serve", []string{"--tls-cert", cert, "--tls-key", key, "--h2c"}, "--h2c is for a plaintext listener"},
		{"gateway", []string{"--upstream-ca", caFile}, "need --upstream-tls"},
		{"gateway", []string{"--upstream-tls", "--upstream-cert", ccert}, "--upstream-ca, --upstream-cert, --upstream-key: a client certificate needs its key"},
		{"gateway", []string{"--upstream-tls", "--upstream-ca", cert + ".missing"}, "no such file"},
		{"serve", []string{"--upstream-tls"}, "unknown flag --upstream-tls"},
	} {
		if _, err := config(tc.command, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: %v, want %q", tc.command, tc.args, err, tc.want)
		}
	}
}
