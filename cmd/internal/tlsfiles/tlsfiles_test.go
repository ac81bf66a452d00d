package tlsfiles

import (
	"bytes"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/streamgate/streamgate/cmd/internal/tlsfiles/tlstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// logBuffer is a logger's output, safe for concurrent handshakes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// handshake serves one TLS connection with server and returns what a
// client with client saw of the server's certificates, or the handshake's
// error.
func handshake(t *testing.T, server, client *tls.Config) ([]string, error) {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if c.(*tls.Conn).Handshake() == nil {
			c.Write([]byte("ok"))
		}
	})
	c, err := tls.Dial("tcp", lis.Addr().String(), client)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// Under TLS 1.3 the server's verdict on a client certificate arrives
	// after the client's handshake: read it.
	if _, err := io.ReadFull(c, make([]byte, 2)); err != nil {
		return nil, err
	}
	var names []string
	for _, pc := range c.ConnectionState().PeerCertificates {
		names = append(names, pc.Subject.CommonName+"#"+pc.SerialNumber.String())
	}
	return names, nil
}

// A chain file (leaf, then intermediate) is served whole: a client that
// trusts only the root verifies it.
func TestServerSendsChain(t *testing.T) {
	root := tlstest.NewCA(t, "root")
	mid := root.Intermediate(t, "intermediate")
	leaf := mid.Issue(t, tlstest.Options{})
	certFile, keyFile := leaf.WriteFiles(t, t.TempDir(), "server")
	cfg, err := ServerFiles{Cert: certFile, Key: keyFile}.Config(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		got, err := handshake(t, cfg, &tls.Config{RootCAs: root.Pool(), ServerName: "localhost", MinVersion: v, MaxVersion: v})
		if err != nil {
			t.Fatalf("TLS %x: %v", v, err)
		}
		if len(got) != 2 || !strings.HasPrefix(got[1], "intermediate#") {
			t.Fatalf("TLS %x: peer certificates %v, want the leaf and the intermediate", v, got)
		}
	}
	// TLS 1.1 is refused.
	if _, err := handshake(t, cfg, &tls.Config{RootCAs: root.Pool(), MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}); err == nil {
		t.Fatal("a TLS 1.1 client was served")
	}
}

// A rotated pair is what the next handshake gets; a half-written rotation
// keeps the previous pair, logged once, until the files match again.
func TestKeyPairReloads(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	dir := t.TempDir()
	first := ca.Issue(t, tlstest.Options{Name: "first"})
	certFile, keyFile := first.WriteFiles(t, dir, "server")
	logs := &logBuffer{}
	kp, err := LoadKeyPair(certFile, keyFile, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	serving := func() string { return kp.Certificate().Leaf.Subject.CommonName }
	if got := serving(); got != "first" {
		t.Fatalf("serving %s", got)
	}

	// Renamed over the old files, as Kubernetes and certbot rotate.
	second := ca.Issue(t, tlstest.Options{Name: "second"})
	second.WriteFiles(t, dir, "server")
	if got := serving(); got != "second" {
		t.Fatalf("after rotation serving %s, want second", got)
	}

	// Half-written: the third certificate beside the second's key.
	third := ca.Issue(t, tlstest.Options{Name: "third"})
	if err := os.WriteFile(certFile, third.ChainPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	bump(t, certFile)
	for range 3 {
		if got := serving(); got != "second" {
			t.Fatalf("with a mismatched key serving %s, want second still", got)
		}
	}
	if n := strings.Count(logs.String(), "not reloaded"); n != 1 {
		t.Fatalf("the failed reload was logged %d times, want once:\n%s", n, logs)
	}
	// Rewritten in place, the key now matches.
	if err := os.WriteFile(keyFile, third.KeyPEM(t), 0o600); err != nil {
		t.Fatal(err)
	}
	bump(t, keyFile)
	if got := serving(); got != "third" {
		t.Fatalf("after the key was written serving %s, want third", got)
	}
	// Removed: the last pair stays.
	os.Remove(certFile)
	if got := serving(); got != "third" {
		t.Fatalf("with the certificate gone serving %s", got)
	}
}

// bump gives a file rewritten in place a modification time of its own:
// the kernel's file clock is coarser than two writes in a row, but a real
// rotation rewrites a file long after its last write.
func bump(t *testing.T, file string) {
	t.Helper()
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	next := fi.ModTime().Add(time.Second)
	if err := os.Chtimes(file, next, next); err != nil {
		t.Fatal(err)
	}
}

func TestConfigErrors(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	dir := t.TempDir()
	certFile, keyFile := ca.Issue(t, tlstest.Options{}).WriteFiles(t, dir, "a")
	_, otherKey := ca.Issue(t, tlstest.Options{}).WriteFiles(t, dir, "b")
	empty := filepath.Join(dir, "empty.pem")
	os.WriteFile(empty, []byte("not a certificate\n"), 0o644)
	caFile := ca.WriteFile(t, dir, "ca.crt")

	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"cert without key", cfgErr(ServerFiles{Cert: certFile}), "needs its key"},
		{"client CA without cert", cfgErr(ServerFiles{ClientCA: caFile}), "needs its key"},
		{"missing file", cfgErr(ServerFiles{Cert: certFile, Key: filepath.Join(dir, "nope.key")}), "nope.key"},
		{"key of another cert", cfgErr(ServerFiles{Cert: certFile, Key: otherKey}), "private key does not match"},
		{"client CA without PEM", cfgErr(ServerFiles{Cert: certFile, Key: keyFile, ClientCA: empty}), "no PEM certificate"},
		{"upstream CA without PEM", clientErr(ClientFiles{CA: empty}), "no PEM certificate"},
		{"upstream cert without key", clientErr(ClientFiles{Cert: certFile}), "needs its key"},
		{"upstream key of another cert", clientErr(ClientFiles{Cert: certFile, Key: otherKey}), "private key does not match"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, tc.err, tc.want)
		}
	}
	if cfg, err := (ServerFiles{}).Config(nil); cfg != nil || err != nil {
		t.Errorf("no files: %v %v, want no TLS", cfg, err)
	}
}

func cfgErr(f ServerFiles) error {
	_, err := f.Config(nil)
	return err
}

func clientErr(f ClientFiles) error {
	_, err := f.Config(nil)
	return err
}

// With ClientCA the server takes only client certificates of that CA
// that are valid now; the client's own pair comes from ClientFiles.
func TestMutualTLS(t *testing.T) {
	ca, other := tlstest.NewCA(t, "ca"), tlstest.NewCA(t, "other")
	dir := t.TempDir()
	certFile, keyFile := ca.Issue(t, tlstest.Options{}).WriteFiles(t, dir, "server")
	server, err := ServerFiles{Cert: certFile, Key: keyFile, ClientCA: ca.WriteFile(t, dir, "ca.crt")}.Config(nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	client := func(c *tlstest.Cert) *tls.Config {
		f := ClientFiles{CA: ca.WriteFile(t, dir, "ca.crt")}
		if c != nil {
			f.Cert, f.Key = c.WriteFiles(t, t.TempDir(), "client")
		}
		cfg, err := f.Config(slog.New(slog.NewTextHandler(logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if _, err := handshake(t, server, client(ca.Issue(t, tlstest.Options{Use: tlstest.Client}))); err != nil {
		t.Fatalf("a valid client certificate: %v", err)
	}
	if logs.String() != "" {
		t.Errorf("a valid client certificate logged:\n%s", logs)
	}
	for _, tc := range []struct {
		name string
		cert *tlstest.Cert
		log  string // what the client logs, if anything
	}{
		{"no certificate", nil, "TLS server asks for a client certificate and none is configured"},
		{"expired certificate", ca.Issue(t, tlstest.Options{Use: tlstest.Client, Expired: true}), ""},
		{"another CA's", other.Issue(t, tlstest.Options{Use: tlstest.Client}), `TLS client certificate not among those the server accepts: it will likely refuse the connection" err="chain is not signed by an acceptable CA" server_accepts_issuers="[CN=ca,O=streamgate tests]" cert_issuer="CN=other,O=streamgate tests"`},
		{"a server certificate", ca.Issue(t, tlstest.Options{Use: tlstest.Server}), ""},
	} {
		before := len(logs.String())
		_, err := handshake(t, server, client(tc.cert))
		if err == nil || !strings.Contains(err.Error(), "tls:") {
			t.Errorf("%s: %v, want a TLS alert", tc.name, err)
		}
		if got := logs.String()[before:]; !strings.Contains(got, tc.log) || (tc.log == "") != (got == "") {
			t.Errorf("%s: logged %q, want %q", tc.name, got, tc.log)
		}
	}
}

// BenchmarkCertificate is what checking the files costs each handshake
// (two stats when nothing changed), beside a whole TLS 1.3 handshake
// with the same pair.
func BenchmarkCertificate(b *testing.B) {
	ca := tlstest.NewCA(b, "ca")
	certFile, keyFile := ca.Issue(b, tlstest.Options{}).WriteFiles(b, b.TempDir(), "server")
	kp, err := LoadKeyPair(certFile, keyFile, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("check", func(b *testing.B) {
		for b.Loop() {
			kp.Certificate()
		}
	})
	b.Run("handshake", func(b *testing.B) {
		server := &tls.Config{GetCertificate: kp.GetCertificate}
		client := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}
		for b.Loop() {
			c, s := net.Pipe()
			done := make(chan error, 1)
			go func() { done <- tls.Server(s, server).Handshake() }()
			if err := tls.Client(c, client).Handshake(); err != nil {
				b.Fatal(err)
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			c.Close()
			s.Close()
		}
	})
}
