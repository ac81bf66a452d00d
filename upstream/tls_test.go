package upstream

import (
	"crypto/tls"
	"testing"
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
