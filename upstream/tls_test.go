package upstream

import (
	"crypto/tls"
	"net"
	"testing"

	"github.com/streamgate/streamgate/upstream/rawsock"
)

// A target's TLS server name: the configured one, else for a target
// resolved from a dns name that name's host (its certificate names the
// service, not each replica's address), else gRPC's default, the address
// dialled.
func TestTransportCredentials(t *testing.T) {
	if got := transportCredentials(nil, "engine:8001").Info().SecurityProtocol; got != "insecure" {
		t.Fatalf("no TLS config: %q, want insecure", got)
	}
	base := &tls.Config{MinVersion: tls.VersionTLS12}
	for _, tc := range []struct {
		cfg        *tls.Config
		name, want string
	}{
		{base, "engine.default.svc:8001", "engine.default.svc"},
		{base, "", ""},
		{&tls.Config{ServerName: "triton.internal"}, "engine.default.svc:8001", "triton.internal"},
		{&tls.Config{ServerName: "triton.internal"}, "", "triton.internal"},
	} {
		info := transportCredentials(tc.cfg, tc.name).Info()
		if info.SecurityProtocol != "tls" || info.ServerName != tc.want {
			t.Errorf("name %q, config %q: %s %q, want tls %q", tc.name, tc.cfg.ServerName, info.SecurityProtocol, info.ServerName, tc.want)
		}
	}
	if base.ServerName != "" {
		t.Fatal("the caller's config was changed")
	}
}

// grpc-go's transport gets the connection it dialled reading and writing
// raw (rawsock), through the handshake of either credentials.
func TestTransportCredentialsRaw(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, _, err := transportCredentials(nil, "").ClientHandshake(t.Context(), "engine:8001", c)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.(*rawsock.Conn); !ok {
		t.Fatalf("the transport's connection is a %T", got)
	}
	if _, ok := transportCredentials(nil, "").Clone().(rawCredentials); !ok {
		t.Fatal("a clone lost the raw connection")
	}
}
