package upstream

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/streamgate/streamgate/engine"

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

// serveTLSEngine serves the engine over TLS with a self-signed certificate
// for 127.0.0.1, and returns it and the pool that trusts it.
func serveTLSEngine(t *testing.T) (*testEngine, *x509.CertPool) {
	t.Helper()
	return serveTLSEngineAt(t, "")
}

// serveTLSEngineAt is serveTLSEngine on addr (see listen), with a
// certificate for localhost too: the name of a unix socket's server.
func serveTLSEngineAt(t *testing.T, addr string) (*testEngine, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "engine"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	e := serveEngine(t, addr, engine.Options{
		TLS: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}}}})
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	return e, roots
}

// spyConn is a socket that counts the reads and writes made through its
// own methods. A rawsock.Conn around it makes none: its system calls go
// to the socket (SyscallConn).
type spyConn struct {
	socket
	calls *atomic.Int64
}

type socket interface {
	net.Conn
	syscall.Conn
}

func (c spyConn) Read(p []byte) (int, error) {
	c.calls.Add(1)
	return c.socket.Read(p)
}

func (c spyConn) Write(p []byte) (int, error) {
	c.calls.Add(1)
	return c.socket.Write(p)
}

// spyDialer is grpc-go's dialer with every connection a spyConn; dials
// counts the connections, calls their reads and writes.
func spyDialer(dials, calls *atomic.Int64) grpc.DialOption {
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		network := "tcp"
		if path, ok := strings.CutPrefix(addr, "unix://"); ok { // grpc-go's form of an absolute unix: target
			network, addr = "unix", path
		} else if path, ok := strings.CutPrefix(addr, "unix:"); ok {
			network, addr = "unix", path
		}
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		dials.Add(1)
		return spyConn{c.(socket), calls}, nil
	})
}

// grpc-go's transport relays a stream over TLS and over a unix socket
// with every read and write of the connection raw (rawCredentials wraps
// it before the handshake): none goes through the dialled connection's
// own Read or Write.
func TestGRPCTransportRaw(t *testing.T) {
	dir := sockDir(t)
	tlsEngine, roots := serveTLSEngine(t)
	unixEngine := serveEngine(t, "unix:"+filepath.Join(dir, "engine.sock"), engine.Options{})
	for _, tc := range []struct {
		name   string
		target string
		tls    *tls.Config
	}{
		{"tls", tlsEngine.addr, &tls.Config{RootCAs: roots}},
		{"unix", unixEngine.addr, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dials, calls atomic.Int64
			c := newTestClient(t, []string{tc.target}, &Options{Transport: TransportGRPC, TLS: tc.tls, DialOptions: []grpc.DialOption{spyDialer(&dials, &calls)}})
			relayRepeat(t, t.Context(), c, 3, 4)
			if dials.Load() == 0 {
				t.Fatal("the stream went over no connection of the test's dialer")
			}
			if n := calls.Load(); n != 0 {
				t.Fatalf("%d reads and writes went through the connection's own methods, not raw", n)
			}
		})
	}
	// The TLS engine refuses a client that does not trust it: the stream
	// above was over TLS.
	var dials, calls atomic.Int64
	bad := newTestClient(t, []string{tlsEngine.addr}, &Options{Transport: TransportGRPC, TLS: &tls.Config{}, HealthInterval: -1,
		DialOptions: []grpc.DialOption{spyDialer(&dials, &calls)}})
	wantRefused(t, t.Context(), bad)
}

// TestH2TLS: over TLS, the h2 transport checks the target's certificate
// against the client's TLS config (its name: the address's host) and
// negotiates ALPN h2 with the engine.
func TestH2TLS(t *testing.T) {
	e, roots := serveTLSEngine(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	c := newTestClient(t, []string{e.addr}, &Options{Transport: TransportH2, TLS: &tls.Config{RootCAs: roots}})
	relayRepeat(t, ctx, c, 3, 4)

	// A client that does not trust the certificate gets no stream.
	bad := newTestClient(t, []string{e.addr}, &Options{Transport: TransportH2, TLS: &tls.Config{}, HealthInterval: -1})
	wantRefused(t, ctx, bad)
}
